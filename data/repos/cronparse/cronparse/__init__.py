"""cronparse: parse cron expressions and compute upcoming run times."""

from .fields import (
    CronError, FieldSpec, MINUTE, HOUR, DAY, MONTH, WEEKDAY,
    parse_value, parse_range, parse_item, parse_field, format_values,
)
from .expression import ALIASES, CronExpression, cron_weekday, parse, is_valid
from .schedule import next_run, next_runs, runs_between, count_runs, seconds_until_next

__all__ = [
    "CronError", "FieldSpec", "MINUTE", "HOUR", "DAY", "MONTH", "WEEKDAY",
    "parse_value", "parse_range", "parse_item", "parse_field", "format_values",
    "ALIASES", "CronExpression", "cron_weekday", "parse", "is_valid",
    "next_run", "next_runs", "runs_between", "count_runs", "seconds_until_next",
]
