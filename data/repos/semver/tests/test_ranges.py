import pytest

from semver import (
    InvalidRange,
    expand_caret,
    expand_tilde,
    filter_satisfying,
    max_satisfying,
    parse_comparator,
    parse_range,
    satisfies,
)


def _strs(comparators):
    return [c.operator + str(c.version) for c in comparators]


def test_comparator_operators():
    assert satisfies("1.2.3", ">=1.2.3") is True
    assert satisfies("1.2.3", ">1.2.3") is False
    assert satisfies("1.2.4", ">1.2.3") is True
    assert satisfies("1.2.2", "<=1.2.3") is True
    assert satisfies("1.2.4", "<=1.2.3") is False
    assert satisfies("1.2.3", "<=1.2.3") is True
    assert satisfies("1.2.3", "<1.2.3") is False
    assert satisfies("1.2.3", "=1.2.3") is True
    assert satisfies("1.2.3", "1.2.3") is True
    assert satisfies("1.2.4", "1.2.3") is False
    assert satisfies("1.2.3", "v1.2.3") is True


def test_expand_caret_major():
    assert _strs(expand_caret([1, 2, 3], ())) == [">=1.2.3", "<2.0.0"]


def test_expand_caret_zero_major():
    assert _strs(expand_caret([0, 2, 3], ())) == [">=0.2.3", "<0.3.0"]


def test_expand_caret_zero_minor():
    assert _strs(expand_caret([0, 0, 3], ())) == [">=0.0.3", "<0.0.4"]


def test_expand_caret_partial():
    assert _strs(expand_caret([0, 0, None], ())) == [">=0.0.0", "<0.1.0"]
    assert _strs(expand_caret([0, None, None], ())) == [">=0.0.0", "<1.0.0"]


def test_expand_tilde():
    assert _strs(expand_tilde([1, 2, 3], ())) == [">=1.2.3", "<1.3.0"]
    assert _strs(expand_tilde([1, None, None], ())) == [">=1.0.0", "<2.0.0"]


def test_parse_comparator_x_range():
    assert _strs(parse_comparator("1.2.x")) == [">=1.2.0", "<1.3.0"]
    assert _strs(parse_comparator("2")) == [">=2.0.0", "<3.0.0"]


def test_parse_comparator_wildcard_with_operator():
    assert _strs(parse_comparator(">1.2")) == [">=1.3.0"]
    assert _strs(parse_comparator("<=1")) == ["<2.0.0"]
    assert _strs(parse_comparator("<1.2")) == ["<1.2.0"]
    assert _strs(parse_comparator(">=1.x")) == [">=1.0.0"]


def test_parse_comparator_star_is_unbounded():
    assert parse_comparator("*") == []
    assert parse_comparator("^*") == []
    assert parse_comparator(">=x") == []


def test_parse_comparator_wildcard_truncates_rest():
    assert _strs(parse_comparator("1.x.3")) == [">=1.0.0", "<2.0.0"]
    assert _strs(parse_comparator("^1.x")) == [">=1.0.0", "<2.0.0"]


@pytest.mark.parametrize("bad", ["1.2.3.4", ">=abc", "^", "1.y"])
def test_parse_comparator_invalid(bad):
    with pytest.raises(InvalidRange):
        parse_comparator(bad)


def test_parse_range_alternatives():
    sets = parse_range(">=1.0.0 <2.0.0 || 3.x")
    assert [_strs(s) for s in sets] == [[">=1.0.0", "<2.0.0"], [">=3.0.0", "<4.0.0"]]


def test_parse_range_hyphen():
    assert [_strs(s) for s in parse_range("1.2 - 2.3.4")] == [[">=1.2.0", "<=2.3.4"]]
    assert [_strs(s) for s in parse_range("1.2.3 - 2")] == [[">=1.2.3", "<3.0.0"]]
    assert [_strs(s) for s in parse_range("0.0 - 1.2.3")] == [[">=0.0.0", "<=1.2.3"]]
    assert [_strs(s) for s in parse_range("1.5.0 - *")] == [[">=1.5.0"]]


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        ("1.9.9", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("1.2.2", "^1.2.3", False),
        ("0.2.9", "^0.2.3", True),
        ("0.1.9", "^0.1.3", True),
        ("0.3.0", "^0.2.3", False),
        ("0.0.4", "^0.0.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("5.0.0", "*", True),
        ("2.5.0", "<2.0.0 || >=2.5.0", True),
        ("2.4.9", "<2.0.0 || >=2.5.0", False),
        ("1.5.0", "1.2.3 - 1.5.0", True),
        ("1.5.1", "1.2.3 - 1.5.0", False),
        ("3.0.0", "^1.x", False),
    ],
)
def test_satisfies_table(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_prerelease_excluded_by_default():
    assert satisfies("1.5.0-rc.1", "^1.2.3") is False
    assert satisfies("2.0.0-rc.1", "<2.0.0") is False


def test_prerelease_allowed_on_same_core():
    assert satisfies("1.2.3-beta.3", "^1.2.3-beta.2") is True
    assert satisfies("1.2.3-beta.1", "^1.2.3-beta.2") is False
    assert satisfies("1.2.4-beta.3", "^1.2.3-beta.2") is False


def test_satisfies_invalid_version_is_false():
    assert satisfies("not.a.version", "*") is False


def test_filter_satisfying_keeps_order():
    versions = ["1.3.0", "0.9.0", "1.0.0", "2.0.0", "1.2.5"]
    assert filter_satisfying(versions, "~1.2 || 1.3.x") == ["1.3.0", "1.2.5"]


def test_max_satisfying():
    versions = ["1.2.3", "1.10.0", "1.9.1", "2.0.0", "1.11.0-rc.1"]
    assert max_satisfying(versions, "^1.0.0") == "1.10.0"


def test_max_satisfying_none():
    assert max_satisfying(["1.0.0", "1.1.0"], ">=2") is None
    assert max_satisfying([], "*") is None
