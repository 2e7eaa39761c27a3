"""Type inference for CSV cells and columns."""

TRUE_WORDS = ("true", "yes")
FALSE_WORDS = ("false", "no")
NULL_WORDS = ("", "null", "none", "na")

# ordering from narrowest to widest
_RANK = {"null": 0, "bool": 1, "int": 2, "float": 3, "str": 4}


def is_int(text):
    """Return True if text is an optionally signed decimal integer."""
    body = text[1:] if text[:1] in ("+", "-") else text
    return body.isdigit()


def is_float(text):
    """Return True if text is a decimal number with a fractional part or exponent."""
    if is_int(text):
        return False
    try:
        float(text)
    except ValueError:
        return False
    lowered = text.lower()
    return "inf" not in lowered and "nan" not in lowered


def kind_of(text):
    """Classify a cell as 'null', 'bool', 'int', 'float' or 'str'."""
    cleaned = text.strip()
    lowered = cleaned.lower()
    if lowered in NULL_WORDS:
        return "null"
    if lowered in TRUE_WORDS or lowered in FALSE_WORDS:
        return "bool"
    if is_int(cleaned):
        return "int"
    if is_float(cleaned):
        return "float"
    return "str"


def convert(text, kind):
    """Convert text to the Python value for the given kind."""
    cleaned = text.strip()
    if cleaned.lower() in NULL_WORDS and kind != "str":
        return None
    if kind == "bool":
        return cleaned.lower() in TRUE_WORDS
    if kind == "int":
        return int(cleaned)
    if kind == "float":
        return float(cleaned)
    return text


def infer_value(text):
    """Convert a single cell using its own inferred kind."""
    return convert(text, kind_of(text))


def widen(left, right):
    """Return the narrowest kind that can hold values of both kinds."""
    if left == "null":
        return right
    if right == "null":
        return left
    if left == right:
        return left
    if {left, right} == {"int", "float"}:
        return "float"
    return "str"


def column_kind(cells):
    """Infer a single kind for a whole column of cells."""
    kind = "null"
    for cell in cells:
        kind = widen(kind, kind_of(cell))
    return kind


def infer_columns(rows):
    """Return the inferred kind of each column; short rows simply lack cells."""
    if not rows:
        return []
    width = max(len(row) for row in rows)
    return [column_kind(row[i] for row in rows if i < len(row)) for i in range(width)]


def convert_rows(rows):
    """Convert every cell using the inferred kind of its column."""
    kinds = infer_columns(rows)
    return [[convert(cell, kinds[i]) for i, cell in enumerate(row)] for row in rows]


def kind_rank(kind):
    """Return the width rank of a kind (null is narrowest, str widest)."""
    return _RANK[kind]
