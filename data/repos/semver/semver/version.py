"""Version objects: parsing, formatting and precedence comparison."""

import functools


class InvalidVersion(ValueError):
    """Raised when a string is not a valid semantic version."""


def _check_identifiers(text, allow_leading_zero):
    parts = text.split(".")
    for part in parts:
        if not part:
            raise InvalidVersion("empty identifier in %r" % text)
        for char in part:
            if not (char.isalnum() or char == "-"):
                raise InvalidVersion("invalid character %r" % char)
        if not allow_leading_zero and part.isdigit() and len(part) > 1 and part[0] == "0":
            raise InvalidVersion("leading zero in %r" % part)
    return tuple(parts)


def _parse_number(text):
    if not text.isdigit():
        raise InvalidVersion("not a number: %r" % text)
    if len(text) > 1 and text[0] == "0":
        raise InvalidVersion("leading zero in %r" % text)
    return int(text)


def compare_identifiers(left, right):
    """Compare two prerelease identifiers; return -1, 0 or 1."""
    left_num = left.isdigit()
    right_num = right.isdigit()
    if left_num and right_num:
        a, b = int(left), int(right)
    elif left_num:
        return -1
    elif right_num:
        return 1
    else:
        a, b = left, right
    if a < b:
        return -1
    if a > b:
        return 1
    return 0


def compare_prerelease(left, right):
    """Compare two prerelease tuples; a release (empty tuple) ranks highest."""
    if not left and not right:
        return 0
    if not left:
        return 1
    if not right:
        return -1
    for a, b in zip(left, right):
        result = compare_identifiers(a, b)
        if result != 0:
            return result
    if len(left) < len(right):
        return -1
    if len(left) > len(right):
        return 1
    return 0


@functools.total_ordering
class Version:
    """An immutable semantic version."""

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        if major < 0 or minor < 0 or patch < 0:
            raise InvalidVersion("version numbers must be non-negative")
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = tuple(prerelease)
        self.build = tuple(build)

    @classmethod
    def parse(cls, text):
        """Parse a version string such as 'v1.2.3-rc.1+build.5'."""
        value = text.strip()
        if value[:1] in ("v", "V"):
            value = value[1:]
        build = ()
        if "+" in value:
            value, _, build_text = value.partition("+")
            build = _check_identifiers(build_text, True)
        prerelease = ()
        if "-" in value:
            value, _, pre_text = value.partition("-")
            prerelease = _check_identifiers(pre_text, False)
        numbers = value.split(".")
        if len(numbers) != 3:
            raise InvalidVersion("expected MAJOR.MINOR.PATCH in %r" % text)
        major, minor, patch = (_parse_number(n) for n in numbers)
        return cls(major, minor, patch, prerelease, build)

    @property
    def core(self):
        """Return the (major, minor, patch) tuple."""
        return (self.major, self.minor, self.patch)

    def is_prerelease(self):
        """Return True if the version has prerelease identifiers."""
        return len(self.prerelease) > 0

    def compare(self, other):
        """Compare precedence with another version; return -1, 0 or 1."""
        if self.core != other.core:
            return -1 if self.core < other.core else 1
        return compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other):
        return self.compare(other) == 0

    def __lt__(self, other):
        return self.compare(other) < 0

    def __hash__(self):
        return hash((self.core, self.prerelease))

    def __str__(self):
        text = "%d.%d.%d" % self.core
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def parse(text):
    """Parse a version string into a Version."""
    return Version.parse(text)


def is_valid(text):
    """Return True if the text parses as a semantic version."""
    try:
        Version.parse(text)
    except InvalidVersion:
        return False
    return True


def sort_versions(texts, reverse=False):
    """Sort version strings by precedence, returning strings."""
    return [str(v) for v in sorted((Version.parse(t) for t in texts), reverse=reverse)]
