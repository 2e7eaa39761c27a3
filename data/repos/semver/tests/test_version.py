import pytest

from semver import (
    InvalidVersion,
    Version,
    compare_identifiers,
    compare_prerelease,
    is_valid,
    parse,
    sort_versions,
)


def test_parse_core():
    v = parse("1.2.3")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ()
    assert v.build == ()


def test_parse_prerelease_and_build():
    v = parse("2.0.0-rc.1+build.5")
    assert v.prerelease == ("rc", "1")
    assert v.build == ("build", "5")


def test_parse_strips_v_prefix():
    assert str(parse("v3.4.5")) == "3.4.5"


def test_parse_hyphen_inside_prerelease():
    assert parse("1.0.0-x-y-z.1").prerelease == ("x-y-z", "1")


def test_str_round_trip():
    assert str(parse("1.0.0-alpha.beta+exp.sha.5114f85")) == "1.0.0-alpha.beta+exp.sha.5114f85"


@pytest.mark.parametrize(
    "text",
    ["1.2", "1.2.3.4", "01.2.3", "1.2.3-01", "1.2.3-", "1.2.3-a..b", "a.b.c", "1.2.3+",
     "1.2.3-a$b"],
)
def test_invalid_versions(text):
    with pytest.raises(InvalidVersion):
        parse(text)


def test_build_allows_leading_zero():
    assert parse("1.2.3+001").build == ("001",)


def test_version_defaults():
    assert str(Version(3)) == "3.0.0"
    assert Version(2, 1) == parse("2.1.0")


def test_negative_numbers_rejected():
    with pytest.raises(InvalidVersion):
        Version(1, -1, 0)


def test_is_valid():
    assert is_valid("0.0.0") is True
    assert is_valid("1.2") is False


def test_is_prerelease():
    assert parse("1.0.0-beta").is_prerelease() is True
    assert parse("1.0.0").is_prerelease() is False


def test_compare_core_parts():
    assert parse("1.2.3") < parse("1.2.4")
    assert parse("1.2.3") < parse("1.3.0")
    assert parse("1.9.9") < parse("2.0.0")
    assert parse("1.10.0") > parse("1.9.0")
    assert parse("1.2.3").compare(parse("1.3.0")) == -1
    assert parse("1.3.0").compare(parse("1.2.3")) == 1


def test_compare_equal_ignores_build():
    assert parse("1.2.3+a") == parse("1.2.3+b")
    assert parse("1.2.3").compare(parse("1.2.3")) == 0
    assert (parse("1.2.3") < parse("1.2.3+b")) is False
    assert parse("1.2.3") <= parse("1.2.3+b")


def test_hash_ignores_build():
    assert len({parse("1.0.0+a"), parse("1.0.0+b"), parse("1.0.0")}) == 1


def test_prerelease_lower_than_release():
    assert parse("1.0.0-alpha") < parse("1.0.0")
    assert parse("1.0.0").compare(parse("1.0.0-rc.9")) == 1


def test_compare_identifiers_numeric_before_alpha():
    assert compare_identifiers("1", "alpha") == -1
    assert compare_identifiers("beta", "2") == 1


def test_compare_identifiers_numeric_values():
    assert compare_identifiers("2", "11") == -1
    assert compare_identifiers("11", "2") == 1
    assert compare_identifiers("7", "7") == 0


def test_compare_identifiers_lexical():
    assert compare_identifiers("alpha", "beta") == -1
    assert compare_identifiers("rc", "beta") == 1


def test_compare_prerelease_length():
    assert compare_prerelease(("alpha",), ("alpha", "1")) == -1
    assert compare_prerelease(("alpha", "1"), ("alpha",)) == 1
    assert compare_prerelease(("a", "1"), ("a", "1")) == 0


def test_compare_prerelease_empty():
    assert compare_prerelease((), ()) == 0
    assert compare_prerelease((), ("a",)) == 1
    assert compare_prerelease(("a",), ()) == -1


def test_spec_precedence_chain():
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    versions = [parse(t) for t in chain]
    for lower, higher in zip(versions, versions[1:]):
        assert lower < higher


def test_sort_versions():
    assert sort_versions(["1.10.0", "1.2.0", "1.2.0-rc.1", "0.9.9"]) == [
        "0.9.9",
        "1.2.0-rc.1",
        "1.2.0",
        "1.10.0",
    ]


def test_sort_versions_reverse():
    assert sort_versions(["1.0.0", "2.0.0", "1.5.0"], reverse=True) == ["2.0.0", "1.5.0", "1.0.0"]


def test_sort_versions_empty():
    assert sort_versions([]) == []
