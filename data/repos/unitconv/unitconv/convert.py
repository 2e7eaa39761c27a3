"""Conversion between simple units, including temperatures."""

from .units import (
    DimensionError,
    dimension_of,
    factor_of,
    is_temperature,
    normalize_unit,
)

ABSOLUTE_ZERO_C = -273.15


def celsius_to_kelvin(value):
    """Convert degrees Celsius to kelvin."""
    return value - ABSOLUTE_ZERO_C


def kelvin_to_celsius(value):
    """Convert kelvin to degrees Celsius."""
    return value + ABSOLUTE_ZERO_C


def celsius_to_fahrenheit(value):
    """Convert degrees Celsius to degrees Fahrenheit."""
    return value * 9.0 / 5.0 + 32.0


def fahrenheit_to_celsius(value):
    """Convert degrees Fahrenheit to degrees Celsius."""
    return (value - 32.0) * 5.0 / 9.0


def _to_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return fahrenheit_to_celsius(value)
    return kelvin_to_celsius(value)


def _from_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return celsius_to_fahrenheit(value)
    return celsius_to_kelvin(value)


def convert_temperature(value, from_unit, to_unit):
    """Convert a temperature between C, F and K, rejecting values below absolute zero."""
    src = normalize_unit(from_unit)
    dst = normalize_unit(to_unit)
    celsius = _to_celsius(value, src)
    if celsius < ABSOLUTE_ZERO_C:
        raise ValueError("temperature below absolute zero")
    return _from_celsius(celsius, dst)


def convert(value, from_unit, to_unit):
    """Convert a value between two units of the same dimension."""
    src_dim = dimension_of(from_unit)
    dst_dim = dimension_of(to_unit)
    if src_dim != dst_dim:
        raise DimensionError(
            "cannot convert %s (%s) to %s (%s)" % (from_unit, src_dim, to_unit, dst_dim)
        )
    if is_temperature(from_unit):
        return convert_temperature(value, from_unit, to_unit)
    return value * factor_of(from_unit) / factor_of(to_unit)


def convert_rounded(value, from_unit, to_unit, digits=2):
    """Convert and round the result to the given number of digits."""
    return round(convert(value, from_unit, to_unit), digits)


def best_unit(value, unit, candidates):
    """Pick the largest candidate unit in which the value is at least 1."""
    ordered = sorted(candidates, key=factor_of)
    chosen = ordered[0]
    for candidate in ordered:
        if abs(convert(value, unit, candidate)) >= 1.0:
            chosen = candidate
    return chosen, convert(value, unit, chosen)


def sum_quantities(pairs, target_unit):
    """Sum (value, unit) pairs expressed in the target unit."""
    total = 0.0
    for value, unit in pairs:
        total += convert(value, unit, target_unit)
    return total
