"""Computing run times of a cron expression."""

from datetime import datetime, timedelta

from .expression import CronExpression
from .fields import CronError

MAX_YEARS = 8


def _as_expression(expr):
    return expr if isinstance(expr, CronExpression) else CronExpression(expr)


def _next_in(values, current):
    """Smallest value >= current, or None."""
    for value in values:
        if value >= current:
            return value
    return None


def _first_of_next_month(dt):
    if dt.month == 12:
        return datetime(dt.year + 1, 1, 1)
    return datetime(dt.year, dt.month + 1, 1)


def next_run(expr, after):
    """First firing time strictly after `after` (seconds are dropped)."""
    cron = _as_expression(expr)
    dt = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    limit = after.year + MAX_YEARS
    while dt.year <= limit:
        if dt.month not in cron.months:
            dt = _first_of_next_month(dt)
            continue
        if not cron.matches_day(dt):
            dt = datetime(dt.year, dt.month, dt.day) + timedelta(days=1)
            continue
        hour = _next_in(cron.hours, dt.hour)
        if hour is None:
            dt = datetime(dt.year, dt.month, dt.day) + timedelta(days=1)
            continue
        if hour != dt.hour:
            dt = dt.replace(hour=hour, minute=0)
        minute = _next_in(cron.minutes, dt.minute)
        if minute is None:
            dt = dt.replace(minute=0) + timedelta(hours=1)
            continue
        return dt.replace(minute=minute)
    raise CronError("expression never fires")


def next_runs(expr, after, count):
    """The next `count` firing times after `after`."""
    if count < 0:
        raise ValueError("count must be non-negative")
    cron = _as_expression(expr)
    result = []
    current = after
    for _ in range(count):
        current = next_run(cron, current)
        result.append(current)
    return result


def runs_between(expr, start, end):
    """Firing times t with start < t <= end."""
    cron = _as_expression(expr)
    result = []
    current = start
    while True:
        current = next_run(cron, current)
        if current > end:
            return result
        result.append(current)


def count_runs(expr, start, end):
    """Number of firing times in (start, end]."""
    return len(runs_between(expr, start, end))


def seconds_until_next(expr, now):
    """Whole seconds from now until the next firing."""
    delta = next_run(expr, now) - now
    return int(delta.total_seconds())
