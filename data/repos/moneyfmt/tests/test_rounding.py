from decimal import Decimal

import pytest

from moneyfmt import (
    BANKERS,
    CEILING,
    DOWN,
    FLOOR,
    HALF_DOWN,
    HALF_EVEN,
    HALF_UP,
    UP,
    allocate,
    from_minor_units,
    round_to,
    to_decimal,
    to_minor_units,
)

D = Decimal


def test_to_decimal_variants():
    assert to_decimal(0.1) == D("0.1")
    assert to_decimal("2.50") == D("2.50")
    assert to_decimal(7) == D(7)
    assert to_decimal(D("1.5")) == D("1.5")


@pytest.mark.parametrize(
    "mode, expected",
    [(HALF_UP, "3"), (HALF_DOWN, "2"), (HALF_EVEN, "2"), (UP, "3"), (DOWN, "2"), (CEILING, "3"),
     (FLOOR, "2")],
)
def test_modes_on_positive_half(mode, expected):
    assert round_to("2.5", 0, mode) == D(expected)


@pytest.mark.parametrize(
    "mode, expected",
    [(HALF_UP, "-3"), (HALF_DOWN, "-2"), (HALF_EVEN, "-2"), (UP, "-3"), (DOWN, "-2"),
     (CEILING, "-2"), (FLOOR, "-3")],
)
def test_modes_on_negative_half(mode, expected):
    assert round_to("-2.5", 0, mode) == D(expected)


def test_half_even_rounds_odd_up():
    assert round_to("3.5", 0, HALF_EVEN) == D("4")
    assert round_to("0.125", 2, BANKERS) == D("0.12")
    assert round_to("0.135", 2, BANKERS) == D("0.14")
    assert round_to("2.5") == D("2")


def test_half_down_on_odd_whole():
    assert round_to("3.5", 0, HALF_DOWN) == D("3")
    assert round_to("-3.5", 0, HALF_DOWN) == D("-3")


def test_half_modes_not_at_half():
    assert round_to("2.51", 0, HALF_DOWN) == D("3")
    assert round_to("2.49", 0, HALF_UP) == D("2")


def test_directed_modes_off_half():
    assert round_to("1.01", 0, UP) == D("2")
    assert round_to("1.99", 0, DOWN) == D("1")
    assert round_to("-1.2", 0, CEILING) == D("-1")
    assert round_to("-1.2", 0, FLOOR) == D("-2")
    assert round_to("0.2", 0, CEILING) == D("1")
    assert round_to("0.7", 0, FLOOR) == D("0")


def test_exact_values_unchanged():
    assert round_to("4", 0, UP) == D("4")
    assert round_to("-1.25", 2, CEILING) == D("-1.25")


def test_round_to_places_keeps_exponent():
    assert str(round_to("1.005", 2, HALF_UP)) == "1.01"
    assert str(round_to(3, 2)) == "3.00"


def test_round_to_float_input():
    assert round_to(2.675, 2, HALF_UP) == D("2.68")


def test_round_to_invalid_arguments():
    with pytest.raises(ValueError):
        round_to("1", 2, "sideways")
    with pytest.raises(ValueError):
        round_to("1", -1)


def test_minor_units():
    assert to_minor_units("12.345") == 1234
    assert to_minor_units("12.345", mode=HALF_UP) == 1235
    assert to_minor_units("5", places=0) == 5


def test_from_minor_units():
    assert str(from_minor_units(1234)) == "12.34"
    assert str(from_minor_units(-5)) == "-0.05"
    assert str(from_minor_units(7, places=3)) == "0.007"


def test_allocate_even_split_with_remainder():
    assert allocate("100", [1, 1, 1]) == [D("33.34"), D("33.33"), D("33.33")]


def test_allocate_ratios():
    assert allocate("10", [70, 30]) == [D("7.00"), D("3.00")]
    assert allocate("0.10", [2, 5]) == [D("0.03"), D("0.07")]


def test_allocate_tie_goes_to_first():
    assert allocate("0.05", [3, 7]) == [D("0.02"), D("0.03")]


def test_allocate_single_part():
    assert allocate("5", [1]) == [D("5.00")]


def test_allocate_zero_ratio_part():
    assert allocate("1", [1, 0, 1]) == [D("0.50"), D("0.00"), D("0.50")]


def test_allocate_invalid():
    with pytest.raises(ValueError):
        allocate("1", [])
    with pytest.raises(ValueError):
        allocate("1", [0, 0])
    with pytest.raises(ValueError):
        allocate("1", [2, -1])
