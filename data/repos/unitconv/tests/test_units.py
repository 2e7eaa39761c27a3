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


def test_factor_of_length():
    assert factor_of("km") == 1000.0
    assert factor_of("cm") == 0.01


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