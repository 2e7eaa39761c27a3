from datetime import datetime

import pytest

from cronparse import CronError, next_run, next_runs, runs_between, count_runs, seconds_until_next, parse


def test_every_fifteen_minutes():
    assert next_runs("*/15 * * * *", datetime(2024, 1, 1, 10, 7, 30), 4) == [
        datetime(2024, 1, 1, 10, 15),
        datetime(2024, 1, 1, 10, 30),
        datetime(2024, 1, 1, 10, 45),
        datetime(2024, 1, 1, 11, 0),
    ]


def test_next_run_is_strictly_after():
    assert next_run("0 * * * *", datetime(2024, 1, 1, 10, 0)) == datetime(2024, 1, 1, 11, 0)
    assert next_run("0 * * * *", datetime(2024, 1, 1, 9, 59, 59)) == datetime(2024, 1, 1, 10, 0)


def test_seconds_are_dropped():
    assert next_run("* * * * *", datetime(2024, 1, 1, 10, 0, 59, 999)) == datetime(2024, 1, 1, 10, 1)


def test_weekdays_skip_weekend():
    assert next_runs("0 9 * * 1-5", datetime(2024, 1, 5, 10, 0), 3) == [
        datetime(2024, 1, 8, 9, 0),
        datetime(2024, 1, 9, 9, 0),
        datetime(2024, 1, 10, 9, 0),
    ]


def test_hour_list_and_day_rollover():
    cron = parse("5 10,14 * * *")
    assert next_run(cron, datetime(2024, 3, 1, 10, 6)) == datetime(2024, 3, 1, 14, 5)
    assert next_run(cron, datetime(2024, 3, 1, 14, 5)) == datetime(2024, 3, 2, 10, 5)
    assert next_run(cron, datetime(2024, 3, 1, 9, 0)) == datetime(2024, 3, 1, 10, 5)


def test_minute_rolls_into_next_hour():
    assert next_run("59 * * * *", datetime(2024, 1, 1, 10, 59)) == datetime(2024, 1, 1, 11, 59)
    assert next_run("10 * * * *", datetime(2024, 1, 1, 23, 30)) == datetime(2024, 1, 2, 0, 10)


def test_month_end_rollover():
    assert next_run("0 8 * * *", datetime(2024, 1, 31, 9, 0)) == datetime(2024, 2, 1, 8, 0)
    assert next_run("0 0 * * *", datetime(2024, 12, 31, 0, 0)) == datetime(2025, 1, 1, 0, 0)


def test_day_31_skips_short_months():
    assert next_run("30 23 31 * *", datetime(2024, 1, 31, 23, 30)) == datetime(2024, 3, 31, 23, 30)


def test_leap_day():
    assert next_run("0 0 29 2 *", datetime(2024, 3, 1)) == datetime(2028, 2, 29)
    assert next_run("0 0 29 2 *", datetime(2024, 2, 28, 12, 0)) == datetime(2024, 2, 29)


def test_leap_day_skips_century_year():
    assert next_run("0 0 29 2 *", datetime(2096, 3, 1)) == datetime(2104, 2, 29)


def test_impossible_date_raises():
    with pytest.raises(CronError):
        next_run("0 0 30 2 *", datetime(2024, 1, 1))


def test_yearly_rolls_over_year():
    assert next_run("@yearly", datetime(2024, 6, 15)) == datetime(2025, 1, 1)
    assert next_run("0 0 1 3 *", datetime(2024, 12, 15)) == datetime(2025, 3, 1)


def test_month_names_and_weekday():
    assert next_run("0 12 * jan,jul mon", datetime(2024, 2, 1)) == datetime(2024, 7, 1, 12, 0)


def test_sunday_as_seven():
    assert next_run("0 0 * * 7", datetime(2024, 1, 1)) == datetime(2024, 1, 7)


def test_friday_or_thirteenth():
    assert next_runs("0 0 13 * 5", datetime(2024, 1, 1), 4) == [
        datetime(2024, 1, 5), datetime(2024, 1, 12), datetime(2024, 1, 13), datetime(2024, 1, 19),
    ]


def test_next_runs_count_edge_cases():
    assert next_runs("* * * * *", datetime(2024, 1, 1), 0) == []
    assert next_runs("* * * * *", datetime(2024, 1, 1), 1) == [datetime(2024, 1, 1, 0, 1)]
    with pytest.raises(ValueError):
        next_runs("* * * * *", datetime(2024, 1, 1), -1)


def test_runs_between_inclusive_end():
    runs = runs_between("0 */6 * * *", datetime(2024, 1, 1, 0, 0), datetime(2024, 1, 2, 0, 0))
    assert runs == [
        datetime(2024, 1, 1, 6, 0), datetime(2024, 1, 1, 12, 0),
        datetime(2024, 1, 1, 18, 0), datetime(2024, 1, 2, 0, 0),
    ]


def test_count_runs():
    assert count_runs("*/10 * * * *", datetime(2024, 1, 1, 0, 0), datetime(2024, 1, 1, 1, 0)) == 6
    assert count_runs("0 0 1 * *", datetime(2024, 1, 1), datetime(2024, 12, 31)) == 11
    assert count_runs("0 0 1 * *", datetime(2024, 1, 1), datetime(2024, 1, 1)) == 0


def test_seconds_until_next():
    assert seconds_until_next("*/5 * * * *", datetime(2024, 1, 1, 10, 2, 30)) == 150
    assert seconds_until_next("0 0 * * *", datetime(2024, 1, 1, 23, 0)) == 3600
