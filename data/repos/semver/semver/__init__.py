"""semver: semantic version parsing, comparison, bumping and ranges."""

from .bump import bump, bump_major, bump_minor, bump_patch, bump_prerelease
from .ranges import Comparator, InvalidRange, expand_caret, expand_tilde
from .ranges import filter_satisfying, max_satisfying, parse_comparator, parse_range, satisfies
from .version import InvalidVersion, Version, compare_identifiers, compare_prerelease
from .version import is_valid, parse, sort_versions
