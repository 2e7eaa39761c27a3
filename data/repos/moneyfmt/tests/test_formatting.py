import pytest

from moneyfmt import (
    HALF_UP,
    currency_info,
    format_compact,
    format_money,
    format_number,
    format_percent,
    group_digits,
    style_separators,
)


def test_group_digits():
    assert group_digits("1234567") == "1,234,567"
    assert group_digits("123456") == "123,456"


def test_group_digits_short_and_boundary():
    assert group_digits("") == ""
    assert group_digits("999") == "999"
    assert group_digits("1000") == "1,000"


def test_group_digits_custom():
    assert group_digits("12345678", " ", 4) == "1234 5678"
    assert group_digits("123", "-", 1) == "1-2-3"
    with pytest.raises(ValueError):
        group_digits("123", ",", 0)


def test_style_separators():
    assert style_separators("de") == (".", ",")
    with pytest.raises(ValueError):
        style_separators("xx")


def test_format_number_default():
    assert format_number(1234567.891) == "1,234,567.89"


def test_format_number_pads_places():
    assert format_number(5) == "5.00"
    assert format_number("0.5", 3) == "0.500"


def test_format_number_zero_places():
    assert format_number("1234.5", 0) == "1,234"
    assert format_number("1234.5", 0, mode=HALF_UP) == "1,235"


def test_format_number_negative():
    assert format_number(-1234.5) == "-1,234.50"


def test_format_number_negative_rounds_to_zero():
    assert format_number("-0.001") == "0.00"


def test_format_number_styles():
    assert format_number("1234567.5", 2, "de") == "1.234.567,50"
    assert format_number("1234567.5", 2, "fr") == "1 234 567,50"
    assert format_number("1234567.5", 2, "ch") == "1'234'567.50"


def test_format_number_without_grouping():
    assert format_number(1234567, 1, group=False) == "1234567.0"


def test_format_percent():
    assert format_percent(0.125) == "12.5%"
    assert format_percent("0.5", 0) == "50%"
    assert format_percent("0.12345", 2, "de") == "12,34%"


def test_currency_info():
    assert currency_info("usd") == ("$", 2, True)
    with pytest.raises(ValueError):
        currency_info("XYZ")


def test_format_money_usd():
    assert format_money(1234.5) == "$1,234.50"
    assert format_money(-1234.5) == "-$1,234.50"


def test_format_money_accounting():
    assert format_money(-42, accounting=True) == "($42.00)"
    assert format_money(42, accounting=True) == "$42.00"


def test_format_money_symbol_after():
    assert format_money("1234.5", "EUR", "de") == "1.234,50 €"


def test_format_money_zero_digit_currency_uses_bankers():
    assert format_money("1234.5", "JPY") == "¥1,234"
    assert format_money("1235.5", "JPY") == "¥1,236"


def test_format_money_three_digit_currency():
    assert format_money("1.2345", "BHD", mode=HALF_UP) == "1.235 BD"


def test_format_money_long_symbol_gets_space():
    assert format_money(10, "CHF", "ch") == "CHF 10.00"
    assert format_money(10, "CHF", space=False) == "CHF10.00"
    assert format_money(10, "GBP", space=True) == "£ 10.00"
    assert format_money(10, "CAD") == "C$10.00"


@pytest.mark.parametrize(
    "value, expected",
    [(999, "999"), (1000, "1K"), (1500, "1.5K"), (2500000, "2.5M"), (-1250, "-1.2K"),
     (3 * 10**9, "3B"), (1234567890123, "1234.6B")],
)
def test_format_compact(value, expected):
    assert format_compact(value) == expected


def test_format_compact_places():
    assert format_compact(1234567, 2) == "1.23M"
