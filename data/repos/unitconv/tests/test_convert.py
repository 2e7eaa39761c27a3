import pytest

from unitconv import (
    DimensionError,
    best_unit,
    celsius_to_fahrenheit,
    celsius_to_kelvin,
    convert,
    convert_rounded,
    convert_temperature,
    fahrenheit_to_celsius,
    kelvin_to_celsius,
    sum_quantities,
)


def test_convert_km_to_m():
    assert convert(2.5, "km", "m") == 2500.0


def test_convert_m_to_km():
    assert convert(1500, "m", "km") == 1.5


def test_convert_miles_to_km():
    assert convert(1, "mi", "km") == pytest.approx(1.609344)


def test_convert_pounds_to_grams():
    assert convert(2, "lb", "g") == pytest.approx(907.18474)


def test_convert_hours_to_minutes():
    assert convert(1.5, "h", "min") == 90.0


def test_convert_incompatible_raises():
    with pytest.raises(DimensionError):
        convert(1, "kg", "m")


def test_celsius_to_kelvin():
    assert celsius_to_kelvin(0) == 273.15
    assert kelvin_to_celsius(273.15) == 0.0


def test_celsius_fahrenheit_fixed_points():
    assert celsius_to_fahrenheit(100) == 212.0
    assert celsius_to_fahrenheit(0) == 32.0
    assert fahrenheit_to_celsius(212) == 100.0


def test_minus_forty_is_same_in_both_scales():
    assert celsius_to_fahrenheit(-40) == -40.0
    assert fahrenheit_to_celsius(-40) == -40.0


def test_convert_temperature_f_to_k():
    assert convert_temperature(32, "F", "K") == pytest.approx(273.15)


def test_convert_dispatches_temperature():
    assert convert(25, "C", "F") == 77.0


def test_absolute_zero_is_allowed():
    assert convert_temperature(0, "K", "C") == -273.15


def test_below_absolute_zero_raises():
    with pytest.raises(ValueError):
        convert_temperature(-300, "C", "K")


def test_convert_rounded_default_two_digits():
    assert convert_rounded(1, "in", "cm") == 2.54
    assert convert_rounded(1, "ft", "in") == 12.0
    assert convert_rounded(1, "mi", "km") == 1.61


def test_best_unit_picks_largest_unit_at_least_one():
    assert best_unit(2500, "m", ["m", "km", "cm"]) == ("km", 2.5)


def test_best_unit_exactly_one():
    assert best_unit(1000, "m", ["m", "km"]) == ("km", 1.0)


def test_best_unit_small_value_uses_smallest():
    assert best_unit(0.5, "mm", ["m", "mm", "cm"]) == ("mm", 0.5)


def test_sum_quantities():
    assert sum_quantities([(1, "km"), (500, "m"), (250, "m")], "m") == 1750.0


def test_sum_quantities_empty():
    assert sum_quantities([], "kg") == 0.0
