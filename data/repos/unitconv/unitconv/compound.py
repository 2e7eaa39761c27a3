"""Compound units such as m/s or km/h built from simple units."""

from .convert import convert
from .units import DimensionError, dimension_of, factor_of


def split_compound(symbol):
    """Split a compound unit like 'km/h' into (numerator, denominator)."""
    parts = symbol.split("/")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise ValueError("not a compound unit: %r" % symbol)
    return parts[0].strip(), parts[1].strip()


def is_compound(symbol):
    """Return True if the symbol has exactly one '/' separating two units."""
    return symbol.count("/") == 1


def compound_factor(symbol):
    """Return the factor converting a compound unit to base units (no temperatures)."""
    num, den = split_compound(symbol)
    return factor_of(num) / factor_of(den)


def compound_dimension(symbol):
    """Return (numerator dimension, denominator dimension) for a compound unit."""
    num, den = split_compound(symbol)
    return dimension_of(num), dimension_of(den)


def convert_compound(value, from_unit, to_unit):
    """Convert a value between two compatible compound units."""
    if compound_dimension(from_unit) != compound_dimension(to_unit):
        raise DimensionError("incompatible compound units")
    return value * compound_factor(from_unit) / compound_factor(to_unit)


def speed(distance, distance_unit, duration, duration_unit, out_unit="m/s"):
    """Compute a speed from a distance and a duration."""
    if duration <= 0:
        raise ValueError("duration must be positive")
    metres = convert(distance, distance_unit, "m")
    seconds = convert(duration, duration_unit, "s")
    return convert_compound(metres / seconds, "m/s", out_unit)


def travel_time(distance, distance_unit, rate, rate_unit, out_unit="h"):
    """Compute how long it takes to cover a distance at a given rate."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    metres = convert(distance, distance_unit, "m")
    metres_per_second = convert_compound(rate, rate_unit, "m/s")
    return convert(metres / metres_per_second, "s", out_unit)


def convert_any(value, from_unit, to_unit):
    """Convert between simple or compound units, dispatching on the symbol."""
    if is_compound(from_unit) and is_compound(to_unit):
        return convert_compound(value, from_unit, to_unit)
    if is_compound(from_unit) or is_compound(to_unit):
        raise DimensionError("cannot mix compound and simple units")
    return convert(value, from_unit, to_unit)
