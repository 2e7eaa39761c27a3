from decimal import Decimal

import pytest

from ledgerkit import to_cents, from_cents, round_money, format_cents, allocate


def test_to_cents_integer():
    assert to_cents(12) == 1200


def test_to_cents_rounds_half_up():
    assert to_cents("2.345") == 235
    assert to_cents("2.344") == 234


def test_to_cents_negative():
    assert to_cents("-1.50") == -150


def test_from_cents_two_places():
    assert from_cents(1234) == Decimal("12.34")
    assert str(from_cents(5)) == "0.05"


def test_round_money_half_up_default():
    assert round_money("0.125") == Decimal("0.13")


def test_round_money_bankers():
    assert round_money("0.125", bankers=True) == Decimal("0.12")
    assert round_money("0.135", bankers=True) == Decimal("0.14")


def test_round_money_places():
    assert round_money("3.14159", places=3) == Decimal("3.142")
    assert round_money("7.5", places=0) == Decimal("8")


def test_round_money_negative_places_rejected():
    with pytest.raises(ValueError):
        round_money("1.0", places=-1)


def test_format_cents_thousands():
    assert format_cents(123456789) == "$1,234,567.89"


def test_format_cents_small_and_negative():
    assert format_cents(7) == "$0.07"
    assert format_cents(0) == "$0.00"
    assert format_cents(-250, symbol="EUR ") == "-EUR 2.50"


def test_allocate_even_split():
    assert allocate(300, [1, 1, 1]) == [100, 100, 100]


def test_allocate_leftover_goes_first():
    assert allocate(100, [1, 1, 1]) == [34, 33, 33]
    assert allocate(101, [1, 1, 1]) == [34, 34, 33]


def test_allocate_weighted():
    assert allocate(1000, [3, 1]) == [750, 250]
    assert sum(allocate(999, [2, 5, 3])) == 999
    assert allocate(5, [1]) == [5]


def test_allocate_invalid_weights():
    with pytest.raises(ValueError, match="must not be empty"):
        allocate(100, [])
    with pytest.raises(ValueError, match="positive"):
        allocate(100, [0, 0])
