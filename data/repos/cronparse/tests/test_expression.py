from datetime import datetime

import pytest

from cronparse import CronError, CronExpression, cron_weekday, parse, is_valid


def test_parse_fields():
    cron = parse("*/30 9-17 1,15 * mon-fri")
    assert cron.minutes == (0, 30)
    assert cron.hours == tuple(range(9, 18))
    assert cron.days == (1, 15)
    assert cron.months == tuple(range(1, 13))
    assert cron.weekdays == (1, 2, 3, 4, 5)


def test_wrong_field_count():
    with pytest.raises(CronError, match="expected 5 fields, got 4"):
        parse("* * * *")
    with pytest.raises(CronError):
        parse("* * * * * *")


def test_aliases():
    assert parse("@daily").canonical() == "0 0 * * *"
    assert parse("@HOURLY").canonical() == "0 * * * *"
    assert parse("@weekly").weekdays == (0,)
    assert parse("@yearly").months == (1,)


def test_unknown_alias():
    with pytest.raises(CronError):
        parse("@fortnightly")


def test_is_valid():
    assert is_valid("0 0 * * *") is True
    assert is_valid("61 0 * * *") is False
    assert is_valid("0 0 * * * extra") is False


def test_repr_keeps_text():
    assert repr(CronExpression("  5 4 * * *  ")) == "CronExpression('5 4 * * *')"


def test_cron_weekday():
    assert cron_weekday(datetime(2024, 1, 1)) == 1
    assert cron_weekday(datetime(2024, 1, 6)) == 6
    assert cron_weekday(datetime(2024, 1, 7)) == 0


def test_matches():
    cron = parse("30 9 * * *")
    assert cron.matches(datetime(2024, 5, 1, 9, 30)) is True
    assert cron.matches(datetime(2024, 5, 1, 9, 31)) is False
    assert cron.matches(datetime(2024, 5, 1, 10, 30)) is False


def test_matches_month():
    cron = parse("0 0 * jun-aug *")
    assert cron.matches(datetime(2024, 6, 10)) is True
    assert cron.matches(datetime(2024, 8, 31)) is True
    assert cron.matches(datetime(2024, 9, 1)) is False


def test_day_or_weekday_when_both_restricted():
    cron = parse("0 0 13 * fri")
    assert cron.matches(datetime(2024, 1, 5)) is True
    assert cron.matches(datetime(2024, 1, 13)) is True
    assert cron.matches(datetime(2024, 1, 14)) is False


def test_day_and_weekday_when_one_is_star():
    only_day = parse("0 0 13 * *")
    assert only_day.matches(datetime(2024, 1, 13)) is True
    assert only_day.matches(datetime(2024, 1, 5)) is False
    only_weekday = parse("0 0 * * fri")
    assert only_weekday.matches(datetime(2024, 1, 5)) is True
    assert only_weekday.matches(datetime(2024, 1, 13)) is False


def test_stepped_star_counts_as_unrestricted():
    cron = parse("0 0 */2 * mon")
    assert cron.day_restricted is False
    assert cron.matches(datetime(2024, 1, 15)) is True
    assert cron.matches(datetime(2024, 1, 3)) is False


def test_canonical():
    assert parse("*/15 0-2 * jan-mar mon-fri").canonical() == "0,15,30,45 0-2 * 1-3 1-5"
    assert parse("0-59 * 1-31 * 0-6").canonical() == "* * * * *"
    assert parse("0 12 * * 7").canonical() == "0 12 * * 0"


def test_runs_per_day():
    assert parse("*/15 9-10 * * *").runs_per_day() == 8
    assert parse("* * * * *").runs_per_day() == 1440
