"""Incrementing versions."""

from .version import Version


def bump_major(version):
    """Increment the major number; a x.0.0 prerelease just drops the tag."""
    if version.is_prerelease() and version.minor == 0 and version.patch == 0:
        return Version(version.major, 0, 0)
    return Version(version.major + 1, 0, 0)


def bump_minor(version):
    """Increment the minor number; a x.y.0 prerelease just drops the tag."""
    if version.is_prerelease() and version.patch == 0:
        return Version(version.major, version.minor, 0)
    return Version(version.major, version.minor + 1, 0)


def bump_patch(version):
    """Increment the patch number; a prerelease just drops the tag."""
    if version.is_prerelease():
        return Version(version.major, version.minor, version.patch)
    return Version(version.major, version.minor, version.patch + 1)


def bump_prerelease(version, tag="rc"):
    """Increment the prerelease counter, starting a new patch prerelease if needed."""
    if not version.is_prerelease():
        return Version(version.major, version.minor, version.patch + 1, (tag, "0"))
    parts = list(version.prerelease)
    if parts[0] != tag:
        return Version(version.major, version.minor, version.patch, (tag, "0"))
    if parts[-1].isdigit():
        parts[-1] = str(int(parts[-1]) + 1)
    else:
        parts.append("0")
    return Version(version.major, version.minor, version.patch, parts)


def bump(version, part, tag="rc"):
    """Bump the named part: 'major', 'minor', 'patch' or 'prerelease'."""
    if isinstance(version, str):
        version = Version.parse(version)
    if part == "major":
        return bump_major(version)
    if part == "minor":
        return bump_minor(version)
    if part == "patch":
        return bump_patch(version)
    if part == "prerelease":
        return bump_prerelease(version, tag)
    raise ValueError("unknown part: %r" % part)

