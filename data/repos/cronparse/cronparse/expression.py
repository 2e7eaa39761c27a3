"""The CronExpression type: parsing and matching datetimes."""

from .fields import SPECS, CronError, parse_field, format_values

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def cron_weekday(dt):
    """Weekday of dt in cron numbering (Sunday = 0)."""
    return (dt.weekday() + 1) % 7


class CronExpression:
    """A parsed 5-field cron expression."""

    def __init__(self, text):
        source = text.strip()
        expanded = ALIASES.get(source.lower(), source)
        parts = expanded.split()
        if len(parts) != 5:
            raise CronError(f"expected 5 fields, got {len(parts)}")
        self.text = source
        values = [parse_field(part, spec) for part, spec in zip(parts, SPECS)]
        self.minutes, self.hours, self.days, self.months, self.weekdays = values
        self.day_restricted = not parts[2].startswith("*")
        self.weekday_restricted = not parts[4].startswith("*")

    def __repr__(self):
        return f"CronExpression({self.text!r})"

    def matches_day(self, dt):
        """True if the date part satisfies the day-of-month/day-of-week rule."""
        day_ok = dt.day in self.days
        weekday_ok = cron_weekday(dt) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok

    def matches(self, dt):
        """True if the expression fires at the minute of dt."""
        return (
            dt.minute in self.minutes
            and dt.hour in self.hours
            and dt.month in self.months
            and self.matches_day(dt)
        )

    def canonical(self):
        """Normalized expression with lists compressed into ranges."""
        fields = (self.minutes, self.hours, self.days, self.months, self.weekdays)
        out = []
        for values, spec in zip(fields, SPECS):
            if values == spec.all_values():
                out.append("*")
            else:
                out.append(format_values(values))
        return " ".join(out)

    def runs_per_day(self):
        """How many times the expression fires on a matching day."""
        return len(self.minutes) * len(self.hours)


def parse(text):
    """Parse text into a CronExpression."""
    return CronExpression(text)


def is_valid(text):
    """True if text is a valid cron expression."""
    try:
        CronExpression(text)
    except CronError:
        return False
    return True
