"""npm-style version ranges: comparators, ^, ~, x-ranges and || alternatives."""

from .version import InvalidVersion, Version

_OPERATORS = (">=", "<=", ">", "<", "=")
_WILDCARDS = ("x", "X", "*")


class InvalidRange(ValueError):
    """Raised when a range string cannot be parsed."""


class Comparator:
    """A single constraint such as '>=1.2.0'."""

    def __init__(self, operator, version):
        self.operator = operator
        self.version = version

    def test(self, version):
        """Return True if the version satisfies this comparator."""
        result = version.compare(self.version)
        if self.operator == ">=":
            return result >= 0
        if self.operator == "<=":
            return result <= 0
        if self.operator == ">":
            return result > 0
        if self.operator == "<":
            return result < 0
        return result == 0


def _parse_partial(text):
    """Parse '1', '1.2', '1.2.x' into (numbers, prerelease) with None for wildcards."""
    pre = ()
    if "-" in text:
        text, _, pre_text = text.partition("-")
        pre = tuple(pre_text.split("."))
    pieces = text.split(".")
    if len(pieces) > 3 or not text:
        raise InvalidRange("bad version %r" % text)
    numbers = []
    for piece in pieces:
        if piece in _WILDCARDS:
            numbers.append(None)
        elif piece.isdigit():
            numbers.append(int(piece))
        else:
            raise InvalidRange("bad version part %r" % piece)
    numbers.append(None)
    cut = numbers.index(None)
    # everything after the first wildcard (or missing part) is a wildcard too
    return numbers[:cut] + [None] * (3 - cut), pre


def _upper_for_wildcard(numbers):
    major, minor, _ = numbers
    if minor is None:
        return Version(major + 1, 0, 0)
    return Version(major, minor + 1, 0)


def _expand_plain(operator, numbers, pre):
    major, minor, patch = numbers
    if major is None:
        return []
    if patch is not None:
        return [Comparator(operator or "=", Version(major, minor, patch, pre))]
    low = Version(major, minor or 0, 0)
    high = _upper_for_wildcard(numbers)
    if operator in ("", "="):
        return [Comparator(">=", low), Comparator("<", high)]
    if operator == ">=":
        return [Comparator(">=", low)]
    if operator == "<":
        return [Comparator("<", low)]
    if operator == ">":
        return [Comparator(">=", high)]
    return [Comparator("<", high)]


def expand_caret(numbers, pre):
    """Expand '^M.m.p': allow changes that do not modify the left-most non-zero part."""
    major, minor, patch = numbers
    low = Version(major, minor or 0, patch or 0, pre)
    if major > 0 or minor is None:
        high = Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        high = Version(0, minor + 1, 0)
    else:
        high = Version(0, 0, patch + 1)
    return [Comparator(">=", low), Comparator("<", high)]


def expand_tilde(numbers, pre):
    """Expand '~M.m.p': allow patch-level changes (minor-level if minor missing)."""
    major, minor, patch = numbers
    low = Version(major, minor or 0, patch or 0, pre)
    if minor is None:
        high = Version(major + 1, 0, 0)
    else:
        high = Version(major, minor + 1, 0)
    return [Comparator(">=", low), Comparator("<", high)]


def parse_comparator(token):
    """Expand one range token into a list of Comparators."""
    token = token.strip().lstrip("vV")
    if token.startswith("^") or token.startswith("~"):
        numbers, pre = _parse_partial(token[1:].lstrip("v"))
        if numbers[0] is None:
            return []
        expand = expand_caret if token[0] == "^" else expand_tilde
        return expand(numbers, pre)
    operator = ""
    for candidate in _OPERATORS:
        if token.startswith(candidate):
            operator = candidate
            break
    numbers, pre = _parse_partial(token[len(operator):].strip())
    return _expand_plain(operator, numbers, pre)


def _parse_hyphen(low_text, high_text):
    low_numbers, low_pre = _parse_partial(low_text)
    major, minor, patch = (n or 0 for n in low_numbers)
    comparators = [Comparator(">=", Version(major, minor, patch, low_pre))]
    high_numbers, high_pre = _parse_partial(high_text)
    if high_numbers[2] is not None:
        comparators.append(Comparator("<=", Version(*high_numbers, prerelease=high_pre)))
    elif high_numbers[0] is not None:
        comparators.append(Comparator("<", _upper_for_wildcard(high_numbers)))
    return comparators


def parse_range(text):
    """Parse a range string into a list of comparator sets (OR of ANDs)."""
    sets = []
    for alternative in text.split("||"):
        tokens = alternative.split()
        if len(tokens) == 3 and tokens[1] == "-":
            sets.append(_parse_hyphen(tokens[0], tokens[2]))
            continue
        comparators = []
        for token in tokens:
            comparators.extend(parse_comparator(token))
        sets.append(comparators)
    return sets


def _set_allows(comparators, version):
    for comparator in comparators:
        if not comparator.test(version):
            return False
    if version.is_prerelease():
        # A prerelease only matches if some comparator names the same core with a prerelease.
        for comparator in comparators:
            bound = comparator.version
            if bound.is_prerelease() and bound.core == version.core:
                return True
        return False
    return True


def satisfies(version, range_text):
    """Return True if the version satisfies the range."""
    if isinstance(version, str):
        try:
            version = Version.parse(version)
        except InvalidVersion:
            return False
    return any(_set_allows(s, version) for s in parse_range(range_text))


def filter_satisfying(versions, range_text):
    """Return the versions (strings) that satisfy the range, in input order."""
    return [v for v in versions if satisfies(v, range_text)]


def max_satisfying(versions, range_text):
    """Return the highest version string satisfying the range, or None."""
    matches = [Version.parse(v) for v in filter_satisfying(versions, range_text)]
    return str(max(matches)) if matches else None
