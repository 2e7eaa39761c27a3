"""Mapping rows to dictionaries using a header row."""

from .infer import convert, infer_columns
from .reader import DEFAULT, CSVError, parse, skip_blank
from .writer import QUOTE_MINIMAL, write


def check_header(header):
    """Validate a header: no empty names and no duplicates."""
    seen = set()
    for name in header:
        if not name.strip():
            raise CSVError("empty column name")
        if name in seen:
            raise CSVError("duplicate column name %r" % name)
        seen.add(name)
    return list(header)


def row_to_dict(header, row, fill=None, strict=False):
    """Map one row onto the header; short rows are padded with `fill`."""
    if len(row) > len(header) or (strict and len(row) < len(header)):
        raise CSVError("row has %d fields, header has %d" % (len(row), len(header)))
    record = {}
    for index, name in enumerate(header):
        record[name] = row[index] if index < len(row) else fill
    return record


def read_dicts(text, dialect=DEFAULT, infer=False, strict=False):
    """Parse CSV text with a header row into a list of dicts."""
    rows = skip_blank(parse(text, dialect))
    if not rows:
        return []
    header = check_header(rows[0])
    body = rows[1:]
    if infer:
        kinds = infer_columns(body)
        body = [[convert(cell, kinds[i]) for i, cell in enumerate(row)] for row in body]
    return [row_to_dict(header, row, strict=strict) for row in body]


def write_dicts(records, fields=None, dialect=DEFAULT, quoting=QUOTE_MINIMAL, missing=""):
    """Write dicts as CSV with a header; fields default to sorted keys of all records."""
    if fields is None:
        names = set()
        for record in records:
            names.update(record)
        fields = sorted(names)
    rows = [list(fields)]
    for record in records:
        rows.append([record.get(name, missing) for name in fields])
    return write(rows, dialect, quoting)


def select_columns(records, names):
    """Keep only the named keys of each record, in the given order."""
    return [{name: record[name] for name in names} for record in records]


def column_values(records, name):
    """Return the list of values in one column."""
    return [record[name] for record in records]
