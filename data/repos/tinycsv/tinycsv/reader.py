"""A small state-machine CSV parser."""


class CSVError(ValueError):
    """Raised for malformed CSV input."""


class Dialect:
    """Delimiter, quote character and whitespace handling for a CSV flavour."""

    def __init__(self, delimiter=",", quotechar='"', strip=False):
        if len(delimiter) != 1 or len(quotechar) != 1:
            raise ValueError("delimiter and quotechar must be single characters")
        if delimiter == quotechar:
            raise ValueError("delimiter and quotechar must differ")
        self.delimiter = delimiter
        self.quotechar = quotechar
        self.strip = strip


DEFAULT = Dialect()

_START, _FIELD, _QUOTED, _QUOTE_IN_QUOTED = range(4)


def _finish_field(field, quoted, dialect):
    text = "".join(field)
    if dialect.strip and not quoted:
        return text.strip()
    return text


def parse(text, dialect=DEFAULT):
    """Parse CSV text into a list of rows (lists of strings)."""
    rows = []
    row = []
    field = []
    state = _START
    quoted = False
    index = 0
    text = text.replace("\r\n", "\n")
    while index < len(text):
        char = text[index]
        if state == _QUOTED:
            if char == dialect.quotechar:
                state = _QUOTE_IN_QUOTED
            else:
                field.append(char)
        elif state == _QUOTE_IN_QUOTED:
            if char == dialect.quotechar:
                field.append(char)
                state = _QUOTED
            elif char == dialect.delimiter:
                row.append(_finish_field(field, quoted, dialect))
                field, quoted, state = [], False, _START
            elif char == "\n":
                row.append(_finish_field(field, quoted, dialect))
                rows.append(row)
                row, field, quoted, state = [], [], False, _START
            elif not (dialect.strip and char in " \t"):
                raise CSVError("unexpected %r after closing quote at %d" % (char, index))
        elif char == dialect.quotechar and state == _START:
            state = _QUOTED
            quoted = True
        elif char == dialect.quotechar and dialect.strip and not "".join(field).strip():
            field = []
            state = _QUOTED
            quoted = True
        elif char == dialect.delimiter:
            row.append(_finish_field(field, quoted, dialect))
            field, quoted, state = [], False, _START
        elif char == "\n":
            row.append(_finish_field(field, quoted, dialect))
            rows.append(row)
            row, field, quoted, state = [], [], False, _START
        else:
            field.append(char)
            state = _FIELD
        index += 1
    if state == _QUOTED:
        raise CSVError("unterminated quoted field")
    if field or row or quoted:
        row.append(_finish_field(field, quoted, dialect))
        rows.append(row)
    return rows


def parse_line(line, dialect=DEFAULT):
    """Parse a single CSV record into a list of strings."""
    rows = parse(line, dialect)
    if len(rows) > 1:
        raise CSVError("more than one record in line")
    return rows[0] if rows else []


def skip_blank(rows):
    """Drop rows that consist of a single empty field."""
    return [row for row in rows if row != [""]]


def column_count(rows):
    """Return the maximum number of fields in any row (0 for no rows)."""
    return max((len(row) for row in rows), default=0)
