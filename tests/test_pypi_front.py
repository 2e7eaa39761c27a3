"""Real repositories as snapshots: scripts/fetch_pypi_projects.py (sdists pinned by sha256,
unpacked as they are, a lock file of their test dependencies) and what the bug generator may
mutate in such a snapshot (RepoSnapshot.source_files). No network: the sdists are made here."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import re
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT
from forgeline.sandbox import images
from forgeline.tasks.repos import RepoSnapshot


def load_script():
    spec = importlib.util.spec_from_file_location("fetch_pypi_projects", ROOT / "scripts" / "fetch_pypi_projects.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


fetch = load_script()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_source_files_are_the_packages_not_the_sdists_tooling(tmp_path):
    write(tmp_path / "proj", {
        "setup.py": "", "noxfile.py": "", "conftest.py": "", "docs/conf.py": "", "tools/check.py": "",
        "src/pkg/__init__.py": "", "src/pkg/core.py": "", "src/pkg/sub/__init__.py": "",
        "src/pkg/sub/deep.py": "", "src/pkg/tests/test_core.py": "", "src/pkg/conftest.py": "",
        "src/pkg/_version_test.py": "", "src/pkg/__main__.py": "", "src/notapkg/mod.py": "",
        "other/__init__.py": "", "other/util.py": "", "other/test_util.py": "",
        "tests/__init__.py": "", "tests/test_a.py": "", "single.py": "",
    })
    snap = RepoSnapshot.load(tmp_path, "proj")
    assert [p.relative_to(snap.path).as_posix() for p in snap.source_files()] == [
        "other/__init__.py", "other/util.py",
        "src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/sub/__init__.py", "src/pkg/sub/deep.py"]


def test_the_table_pins_every_sdist_and_wheel():
    folders = [p.folder for p in fetch.PROJECTS]
    assert len(folders) == len(set(folders)) >= 4
    for p in fetch.PROJECTS:
        assert re.fullmatch(r"[A-Za-z0-9._-]+__[A-Za-z0-9._-]+", p.folder)
        assert re.fullmatch(r"[0-9a-f]{64}", p.sha256) and p.version in p.sdist
        # the lock file it writes is one images.read_lock accepts, with exactly the table's pins
        pins = images.read_lock(fetch.lock_text(p))
        assert [(x.name, x.version, x.hashes) for x in pins] == \
            sorted((images.normalize_name(n), v, (h,)) for n, v, h in p.test_deps)
    assert any(p.test_deps for p in fetch.PROJECTS)


def sdist_bytes(top: str, files: dict[str, str], symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in files.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
        if symlink:
            info = tarfile.TarInfo(f"{top}/{symlink}")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


FILES = {"PKG-INFO": "Name: demo\nVersion: 1.0\n", "demo/__init__.py": "X = 1\n",
         "tests/test_demo.py": "from demo import X\n\n\ndef test_x():\n    assert X == 1\n"}


def demo_project(tmp_path: Path, data: bytes, deps=()) -> "fetch.Project":
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    (cache / "demo-1.0.tar.gz").write_bytes(data)
    return fetch.Project("someone__demo", "demo", "1.0", "demo-1.0.tar.gz",
                         hashlib.sha256(data).hexdigest(), tuple(deps))


def test_make_snapshot_unpacks_the_pinned_sdist_as_it_is(tmp_path):
    dep = ("six", "1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274")
    project = demo_project(tmp_path, sdist_bytes("demo-1.0", FILES), [dep])
    out = tmp_path / "pypi"
    snap = fetch.make_snapshot(project, out, tmp_path / "cache")
    assert snap.name == "someone__demo" and snap.path == out / "someone__demo"
    got = {p.relative_to(snap.path).as_posix() for p in snap.path.rglob("*") if p.is_file()}
    assert got == {*FILES, images.LOCK_FILE}
    assert [(p.name, p.version) for p in images.snapshot_lock(snap.path)] == [("six", "1.17.0")]
    # a rerun starts from scratch: nothing left over from before
    (snap.path / "stray.py").write_text("")
    again = fetch.make_snapshot(project, out, tmp_path / "cache")
    assert not (again.path / "stray.py").exists() and again.commit == snap.commit


def test_a_wrong_sha256_or_an_odd_sdist_is_refused(tmp_path):
    project = demo_project(tmp_path, sdist_bytes("demo-1.0", FILES))
    (tmp_path / "cache" / project.sdist).write_bytes(b"not the pinned bytes")
    with pytest.raises(SystemExit, match="is not the pinned"):
        fetch.fetch_sdist(project, tmp_path / "cache")
    linked = demo_project(tmp_path, sdist_bytes("demo-1.0", FILES, symlink="evil"))
    with pytest.raises(SystemExit, match="neither a file nor a folder"):
        fetch.make_snapshot(linked, tmp_path / "pypi", tmp_path / "cache")
    escaping = demo_project(tmp_path, sdist_bytes("demo-1.0", {**FILES, "../../escaped.py": ""}))
    with pytest.raises(SystemExit, match="leaves the sdist's folder"):
        fetch.make_snapshot(escaping, tmp_path / "pypi", tmp_path / "cache")
    assert not (tmp_path / "escaped.py").exists()
    no_tests = demo_project(tmp_path, sdist_bytes("demo-1.0", {"demo/__init__.py": ""}))
    with pytest.raises(SystemExit, match="no tests/"):
        fetch.make_snapshot(no_tests, tmp_path / "pypi", tmp_path / "cache")
