"""Serialising rows back to CSV text."""

from .reader import DEFAULT

QUOTE_MINIMAL = "minimal"
QUOTE_ALL = "all"
QUOTE_NONNUMERIC = "nonnumeric"


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def needs_quotes(text, dialect=DEFAULT):
    """Return True if a field must be quoted to round-trip."""
    if text != text.strip():
        return True
    for char in (dialect.delimiter, dialect.quotechar, "\n", "\r"):
        if char in text:
            return True
    return False


def to_text(value):
    """Render a Python value as field text (None -> '', bools lower-case)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def quote(text, dialect=DEFAULT):
    """Wrap text in quote characters, doubling embedded quotes."""
    q = dialect.quotechar
    return q + text.replace(q, q + q) + q


def format_field(value, dialect=DEFAULT, quoting=QUOTE_MINIMAL):
    """Format one value according to the quoting mode."""
    text = to_text(value)
    if quoting == QUOTE_ALL:
        return quote(text, dialect)
    if quoting == QUOTE_NONNUMERIC and not _is_number(value) and value is not None:
        return quote(text, dialect)
    if needs_quotes(text, dialect):
        return quote(text, dialect)
    return text


def format_row(values, dialect=DEFAULT, quoting=QUOTE_MINIMAL):
    """Format a sequence of values as one CSV line (no newline)."""
    return dialect.delimiter.join(format_field(v, dialect, quoting) for v in values)


def write(rows, dialect=DEFAULT, quoting=QUOTE_MINIMAL, newline="\n"):
    """Format rows as CSV text; every line ends with the newline string."""
    return "".join(format_row(row, dialect, quoting) + newline for row in rows)
