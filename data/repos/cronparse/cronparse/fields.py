"""Parsing and formatting of individual cron fields."""


class CronError(ValueError):
    """Raised for malformed cron expressions."""


MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun",
               "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


class FieldSpec:
    """Name, allowed range and optional symbolic names of one cron field."""

    def __init__(self, name, low, high, names=None, name_offset=0):
        self.name = name
        self.low = low
        self.high = high
        self.names = names or ()
        self.name_offset = name_offset

    def all_values(self):
        """Every allowed value of the field."""
        return tuple(range(self.low, self.high + 1))


MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY = FieldSpec("day", 1, 31)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES, 1)
WEEKDAY = FieldSpec("weekday", 0, 6, DAY_NAMES, 0)

SPECS = (MINUTE, HOUR, DAY, MONTH, WEEKDAY)


def parse_value(token, spec):
    """Parse a number or a name (for months and weekdays) within spec."""
    lowered = token.lower()
    if lowered in spec.names:
        return spec.names.index(lowered) + spec.name_offset
    if not token.isdigit():
        raise CronError(f"invalid {spec.name} value {token!r}")
    value = int(token)
    if spec is WEEKDAY and value == 7:
        return 0
    if value < spec.low or value > spec.high:
        raise CronError(f"{spec.name} value {value} out of range {spec.low}-{spec.high}")
    return value


def parse_range(token, spec):
    """Parse '*', 'a' or 'a-b' into an inclusive (start, end) pair."""
    if token == "*":
        return spec.low, spec.high
    if "-" in token:
        left, right = token.split("-", 1)
        start = parse_value(left, spec)
        end = parse_value(right, spec)
        if spec is WEEKDAY and end == 0 and right.strip() == "7":
            end = 7
        if start > end:
            raise CronError(f"reversed range {token!r} in {spec.name}")
        return start, end
    value = parse_value(token, spec)
    return value, value


def parse_item(item, spec):
    """Parse one comma-separated item such as '1-10/3' into a set of values."""
    step = 1
    base = item
    if "/" in item:
        base, step_text = item.split("/", 1)
        if not step_text.isdigit() or int(step_text) == 0:
            raise CronError(f"invalid step {step_text!r} in {spec.name}")
        step = int(step_text)
    start, end = parse_range(base, spec)
    if "/" in item and base != "*" and "-" not in base:
        end = spec.high
    values = set()
    for value in range(start, end + 1, step):
        values.add(value % 7 if spec is WEEKDAY else value)
    return values


def parse_field(text, spec):
    """Parse a whole field into a sorted tuple of allowed values."""
    if not text:
        raise CronError(f"empty {spec.name} field")
    values = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"empty list item in {spec.name}")
        values |= parse_item(item, spec)
    return tuple(sorted(values))


def format_values(values):
    """Compress sorted integers into cron list syntax, e.g. (1,2,3,7) -> '1-3,7'."""
    if not values:
        return ""
    parts = []
    start = prev = values[0]
    for value in list(values[1:]) + [None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        if start == prev:
            parts.append(str(start))
        elif prev == start + 1:
            parts.append(f"{start},{prev}")
        else:
            parts.append(f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)
