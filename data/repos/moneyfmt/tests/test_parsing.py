from decimal import Decimal

import pytest

from moneyfmt import (
    ParseError,
    detect_currency,
    format_money,
    format_number,
    parse_money,
    parse_number,
    parse_percent,
)

D = Decimal


def test_parse_plain_numbers():
    assert parse_number("1234.50") == D("1234.50")
    assert parse_number("42") == D("42")


def test_parse_grouped():
    assert parse_number("1,234,567.89") == D("1234567.89")


def test_parse_signs_and_parentheses():
    assert parse_number("-12.5") == D("-12.5")
    assert parse_number("+3") == D("3")
    assert parse_number("(7.25)") == D("-7.25")


def test_parse_styles():
    assert parse_number("1.234,5", "de") == D("1234.5")
    assert parse_number("1 234,5", "fr") == D("1234.5")
    assert parse_number("1'234.5", "ch") == D("1234.5")


def test_parse_leading_decimal_point():
    assert parse_number(".75") == D("0.75")


@pytest.mark.parametrize(
    "bad", ["", "abc", "1.2.3", "12,34", ",123", "1234,567", "1,23a", "-", "(12", "1e5", "NaN"]
)
def test_parse_invalid_numbers(bad):
    with pytest.raises(ParseError):
        parse_number(bad)


def test_parse_group_of_three_boundary():
    assert parse_number("999,999") == D("999999")


def test_detect_currency():
    assert detect_currency("$5") == "USD"
    assert detect_currency("5 €") == "EUR"
    assert detect_currency("chf 10") == "CHF"
    assert detect_currency("12 BD") == "BHD"
    assert detect_currency("C$5") == "CAD"
    assert detect_currency("12") is None


def test_parse_money_symbol():
    assert parse_money("$1,234.50") == (D("1234.50"), "USD")
    assert parse_money("-£3") == (D("-3"), "GBP")
    assert parse_money("C$7.25") == (D("7.25"), "CAD")


def test_parse_money_code_and_accounting():
    assert parse_money("(USD 12.00)") == (D("-12.00"), "USD")


def test_parse_money_style():
    assert parse_money("1.234,50 €", "de") == (D("1234.50"), "EUR")


def test_parse_money_without_currency():
    with pytest.raises(ParseError):
        parse_money("12.00")


def test_parse_percent():
    assert parse_percent("12.5%") == D("0.125")
    assert parse_percent(" 100 % ") == D("1")
    assert parse_percent("-3%") == D("-0.03")


def test_parse_percent_requires_sign():
    with pytest.raises(ParseError):
        parse_percent("12.5")


def test_round_trip_number_and_money():
    assert parse_number(format_number("-9876543.21", 2, "fr"), "fr") == D("-9876543.21")
    assert parse_money(format_money("-1234.5", accounting=True)) == (D("-1234.50"), "USD")
