import pytest

from unitconv import (
    UnknownUnitError,
    DimensionError,
    dimension_of,
    factor_of,
    is_temperature,
    normalize_unit,
    units_of,
)


def test_normalize_strips_whitespace():
    assert normalize_unit("  kg ") == "kg"


def test_normalize_alias_case_insensitive():
    assert normalize_unit("Meters") == "m"
    assert normalize_unit("FEET") == "ft"


def test_normalize_uppercase_symbol_falls_back_to_lowercase():
    assert normalize_unit("KM") == "km"


def test_normalize_temperature_alias():
    assert normalize_unit("celsius") == "C"
    assert normalize_unit("Kelvin") == "K"


def test_normalize_unknown_raises():
    with pytest.raises(UnknownUnitError):
        normalize_unit("furlong")


def test_dimension_of_units():
    assert dimension_of("mi") == "length"
    assert dimension_of("oz") == "mass"
    assert dimension_of("hours") == "time"
    assert dimension_of("F") == "temperature"


@pytest.mark.parametrize(
    "unit, factor",
    [("mm", 0.001), ("cm", 0.01), ("m", 1.0), ("km", 1000.0), ("in", 0.0254), ("ft", 0.3048),
     ("yd", 0.9144), ("mi", 1609.344), ("mg", 0.000001), ("g", 0.001), ("kg", 1.0),
     ("t", 1000.0), ("oz", 0.028349523125), ("lb", 0.45359237), ("ms", 0.001), ("s", 1.0),
     ("min", 60.0), ("h", 3600.0), ("day", 86400.0), ("week", 604800.0)],
)
def test_factor_of_every_unit(unit, factor):
    assert factor_of(unit) == factor


def test_factor_of_temperature_raises():
    with pytest.raises(DimensionError):
        factor_of("C")


def test_is_temperature():
    assert is_temperature("K") is True
    assert is_temperature("kg") is False


def test_units_of_mass_sorted():
    assert units_of("mass") == ["g", "kg", "lb", "mg", "oz", "t"]


def test_units_of_temperature():
    assert units_of("temperature") == ["C", "F", "K"]