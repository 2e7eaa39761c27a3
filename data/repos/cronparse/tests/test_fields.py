import pytest

from cronparse import (
    CronError, MINUTE, HOUR, DAY, MONTH, WEEKDAY,
    parse_value, parse_range, parse_item, parse_field, format_values,
)


def test_parse_value_numbers():
    assert parse_value("0", MINUTE) == 0
    assert parse_value("59", MINUTE) == 59
    assert parse_value("31", DAY) == 31


def test_parse_value_names_case_insensitive():
    assert parse_value("jan", MONTH) == 1
    assert parse_value("DEC", MONTH) == 12
    assert parse_value("sun", WEEKDAY) == 0
    assert parse_value("Sat", WEEKDAY) == 6


def test_parse_value_weekday_seven_is_sunday():
    assert parse_value("7", WEEKDAY) == 0


@pytest.mark.parametrize("token,spec", [
    ("60", MINUTE), ("24", HOUR), ("0", DAY), ("32", DAY), ("13", MONTH),
    ("0", MONTH), ("8", WEEKDAY), ("abc", MINUTE), ("-1", MINUTE), ("mon", MONTH),
])
def test_parse_value_rejects(token, spec):
    with pytest.raises(CronError):
        parse_value(token, spec)


def test_parse_range():
    assert parse_range("*", HOUR) == (0, 23)
    assert parse_range("3-7", HOUR) == (3, 7)
    assert parse_range("5", HOUR) == (5, 5)
    assert parse_range("4-4", HOUR) == (4, 4)
    assert parse_range("mar-may", MONTH) == (3, 5)


def test_parse_range_reversed():
    with pytest.raises(CronError):
        parse_range("7-3", HOUR)


def test_parse_item_steps():
    assert parse_item("*/20", MINUTE) == {0, 20, 40}
    assert parse_item("10-30/10", MINUTE) == {10, 20, 30}
    assert parse_item("10-29/10", MINUTE) == {10, 20}


def test_parse_item_single_value_step_runs_to_max():
    assert parse_item("5/15", MINUTE) == {5, 20, 35, 50}
    assert parse_item("20/2", HOUR) == {20, 22}


def test_parse_item_bad_step():
    with pytest.raises(CronError):
        parse_item("*/0", MINUTE)
    with pytest.raises(CronError):
        parse_item("*/x", MINUTE)


def test_parse_field_list_sorted():
    assert parse_field("30,5,15", MINUTE) == (5, 15, 30)
    assert parse_field("1-3,2-5", DAY) == (1, 2, 3, 4, 5)


def test_parse_field_star():
    assert parse_field("*", MINUTE) == tuple(range(60))
    assert parse_field("*", DAY)[0] == 1
    assert parse_field("*", DAY)[-1] == 31
    assert len(parse_field("*", MONTH)) == 12


def test_parse_field_weekday_ranges():
    assert parse_field("mon-fri", WEEKDAY) == (1, 2, 3, 4, 5)
    assert parse_field("5-7", WEEKDAY) == (0, 5, 6)
    assert parse_field("*/2", WEEKDAY) == (0, 2, 4, 6)


def test_parse_field_empty_parts():
    with pytest.raises(CronError, match="empty minute field"):
        parse_field("", MINUTE)
    with pytest.raises(CronError, match="empty list item in hour"):
        parse_field("1,,2", HOUR)


def test_parse_field_malformed_range_and_step():
    with pytest.raises(CronError):
        parse_field("1-2-3", MINUTE)
    with pytest.raises(CronError):
        parse_field("*/2/3", MINUTE)


def test_format_values():
    assert format_values((1, 2, 3, 7)) == "1-3,7"
    assert format_values((1, 2)) == "1,2"
    assert format_values((5,)) == "5"
    assert format_values(()) == ""
    assert format_values((0, 15, 30, 45)) == "0,15,30,45"
    assert format_values((1, 2, 3, 5, 6, 9, 10, 11)) == "1-3,5,6,9-11"
