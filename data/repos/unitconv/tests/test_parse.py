import pytest

from unitconv import (
    QuantityError,
    UnknownUnitError,
    convert_text,
    format_quantity,
    parse_quantity,
    parse_sum,
)


def test_parse_simple():
    assert parse_quantity("3.5 km") == (3.5, "km")


def test_parse_without_space_and_alias():
    assert parse_quantity("12kilograms") == (12.0, "kg")
    assert parse_quantity("3.5km") == (3.5, "km")


def test_parse_negative_and_sign():
    assert parse_quantity("-4 C") == (-4.0, "C")
    assert parse_quantity("+2 h") == (2.0, "h")


def test_parse_thousands_separator():
    assert parse_quantity("1,250 m") == (1250.0, "m")


def test_parse_compound_unit():
    assert parse_quantity("90 km/hours") == (90.0, "km/h")


@pytest.mark.parametrize("bad", ["", "   ", "km", "3.5", "-. m"])
def test_parse_invalid(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_parse_unknown_unit():
    with pytest.raises(UnknownUnitError):
        parse_quantity("3 parsecs")
    with pytest.raises(UnknownUnitError):
        parse_quantity("1.2.3 m")


def test_format_trims_zeros():
    assert format_quantity(2.5, "km") == "2.5 km"
    assert format_quantity(3.0, "m") == "3 m"
    assert format_quantity(1.23456, "kg") == "1.23 kg"


def test_format_rounds_to_digits():
    assert format_quantity(1.23456, "kg", digits=3) == "1.235 kg"


def test_format_negative_zero():
    assert format_quantity(-0.001, "m") == "0 m"


def test_convert_text():
    assert convert_text("2 ft", "in") == "24 in"
    assert convert_text("100 C", "F") == "212 F"
    assert convert_text("1 mi", "km") == "1.61 km"


def test_convert_text_compound():
    assert convert_text("10 m/s", "km/h", digits=1) == "36 km/h"


def test_parse_sum():
    assert parse_sum("1 km + 200 m + 30 m", "m") == 1230.0


def test_parse_sum_ignores_empty_parts():
    assert parse_sum("1 h + + 30 min", "min") == 90.0
