import pytest

from semver import Version, bump, bump_major, bump_minor, bump_patch, bump_prerelease, parse


def test_bump_patch():
    assert str(bump_patch(parse("1.2.3"))) == "1.2.4"


def test_bump_patch_of_prerelease_drops_tag():
    assert str(bump_patch(parse("1.2.4-rc.1"))) == "1.2.4"


def test_bump_minor_resets_patch():
    assert str(bump_minor(parse("1.2.3"))) == "1.3.0"


def test_bump_minor_of_minor_prerelease():
    assert str(bump_minor(parse("1.3.0-beta"))) == "1.3.0"


def test_bump_minor_of_patch_prerelease():
    assert str(bump_minor(parse("1.3.1-beta"))) == "1.4.0"


def test_bump_major_resets_minor_and_patch():
    assert str(bump_major(parse("1.2.3"))) == "2.0.0"


def test_bump_major_of_major_prerelease():
    assert str(bump_major(parse("2.0.0-rc.2"))) == "2.0.0"


def test_bump_major_of_minor_prerelease():
    assert str(bump_major(parse("2.1.0-rc.2"))) == "3.0.0"


def test_bump_drops_build_metadata():
    assert str(bump_patch(parse("1.0.0+build.9"))) == "1.0.1"


def test_bump_prerelease_from_release():
    assert str(bump_prerelease(parse("1.2.3"))) == "1.2.4-rc.0"


def test_bump_prerelease_increments_counter():
    assert str(bump_prerelease(parse("1.2.4-rc.0"))) == "1.2.4-rc.1"
    assert str(bump_prerelease(parse("1.2.4-rc.9"))) == "1.2.4-rc.10"
    assert str(bump_prerelease(parse("1.2.4-rc.x.3"))) == "1.2.4-rc.x.4"


def test_bump_prerelease_appends_counter():
    assert str(bump_prerelease(parse("1.2.4-rc"))) == "1.2.4-rc.0"


def test_bump_prerelease_switches_tag():
    assert str(bump_prerelease(parse("1.2.4-alpha.3"), "beta")) == "1.2.4-beta.0"


def test_bump_dispatch_accepts_strings():
    assert str(bump("0.9.9", "minor")) == "0.10.0"
    assert str(bump("0.9.9", "major")) == "1.0.0"
    assert str(bump("0.9.9", "patch")) == "0.9.10"
    assert str(bump("0.9.9", "prerelease", "dev")) == "0.9.10-dev.0"


def test_bump_dispatch_accepts_version():
    assert bump(Version(1, 0, 0), "patch") == Version(1, 0, 1)


def test_bump_unknown_part():
    with pytest.raises(ValueError):
        bump("1.0.0", "micro")
