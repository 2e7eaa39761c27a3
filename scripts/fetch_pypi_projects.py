"""Real repositories for the task front: open-source Python projects as their PyPI sdists.

    .venv/bin/python scripts/fetch_pypi_projects.py [--out data/pypi] [--only FOLDER ...]

Each project in PROJECTS is fetched as its sdist, pinned by version AND sha256 (`pip download
--no-deps --no-binary :all: --require-hashes`; pip refuses a file with another hash before it
runs anything of it, and this script checks the hash again), cached under .forgeline/sdists/,
and unpacked into OUT/<OWNER>__<NAME>/ (SWE-smith's folder naming: the GitHub owner and name)
with the sdist's top folder stripped: the snapshot IS the sdist, nothing added but, for a
project whose tests need third-party packages, the pinned lock file of those
(forgeline-requirements.txt, installed into the project's image by `forgeline image`). A
folder is rewritten from scratch on every run, so it never holds anything from before.

Every project here ships its tests at tests/ in the sdist and its suite passes offline with the
base image's pytest 7.2 on Python 3.11 (checked 2026-12-03). configs/pypi.yaml runs the task
front on them: bench/README.md ("The task front on PyPI projects") has the results.

pip prepares an sdist's metadata after the hash check, so the project's build backend (or
setup.py) runs on this machine in pip's isolated build environment; the tests never do.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from forgeline.sandbox.images import LOCK_FILE  # noqa: E402
from forgeline.tasks.repos import RepoSnapshot  # noqa: E402

CACHE = ROOT / ".forgeline" / "sdists"


@dataclass(frozen=True)
class Project:
    folder: str                   # OWNER__NAME (GitHub), the snapshot's folder and repo name
    dist: str                     # the PyPI distribution
    version: str
    sdist: str                    # the file name on PyPI
    sha256: str                   # of that file
    # the test dependencies: (distribution, version, sha256 of its py3 wheel), installed --no-deps
    test_deps: tuple[tuple[str, str, str], ...] = field(default=())
    why: str = ""


PROJECTS = [
    Project("un33k__python-slugify", "python-slugify", "9.2.0", "python_slugify-9.2.0.tar.gz",
            "cee32948083476013804de1667724fb1362dacb71e47b1d5d92adf8db6ee3298",
            (("text-unidecode", "1.3", "1311f10e8b895935241623731c2ba64f4c455287888b18189350b67134a822e8"),),
            why="needs a third-party package (text-unidecode); tests call `python -m slugify`"),
    Project("python-humanize__humanize", "humanize", "4.17.0", "humanize-4.17.0.tar.gz",
            "1d6a36c453dbfbb3f0b34601d2e0b4ce5d48d780305cd45714843f0068fde6ac",
            (("freezegun", "1.5.5", "cd557f4a75cf074e84bc374249b9dd491eaeacd61376b9eb3c423282211619d2"),
             ("python-dateutil", "4.0.0", "a5e246f79eb80475e691bf93862cead98decd8a498cf53ba0516fcdc0f50dc1c"),
             ("six", "1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274")),
            why="src/ layout; freezegun (+ dateutil, six); 623 of 893 test ids contain spaces; "
                "tests/test_benchmarks.py needs pytest-benchmark's fixture (errors, never graded)"),
    Project("more-itertools__more-itertools", "more-itertools", "11.2.1", "more_itertools-11.2.1.tar.gz",
            "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
            why="several thousand lines (more.py alone ~5,000); 765 tests, ~10 s"),
    Project("tkem__cachetools", "cachetools", "8.0.2", "cachetools-8.0.2.tar.gz",
            "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
            why="src/ layout; 476 tests in 0.5 s"),
    Project("python-semver__python-semver", "semver", "3.1.2", "semver-3.1.2.tar.gz",
            "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf",
            why="src/ layout; 516 tests, 7 ids with spaces; a .gitignore in the sdist"),
    Project("r1chardj0n3s__parse", "parse", "1.22.4", "parse-1.22.4.tar.gz",
            "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5",
            why="one package module of ~1,000 lines; 110 tests"),
]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def lock_text(project: Project) -> str:
    """forgeline-requirements.txt of a project: one pinned, hashed line per test dependency."""
    head = (f"# Test dependencies of {project.dist} {project.version} (scripts/fetch_pypi_projects.py):\n"
            "# wheels fetched on the host and installed offline into the image, --no-deps.\n")
    return head + "".join(f"{name}=={version} \\\n    --hash=sha256:{sha}\n"
                          for name, version, sha in project.test_deps)


def fetch_sdist(project: Project, cache: Path = CACHE, pip: list[str] | None = None) -> Path:
    """The sdist in the cache, downloaded if absent; SystemExit on any sha256 but the pinned one."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / project.sdist
    if not path.is_file():
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            req = Path(tmp) / "requirements.txt"
            req.write_text(f"{project.dist}=={project.version} --hash=sha256:{project.sha256}\n")
            cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--no-deps", "--no-binary", ":all:",
                   "--require-hashes", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
                   "-r", str(req), "-d", str(Path(tmp) / "out")]
            res = subprocess.run(cmd, capture_output=True, text=True)
            got = Path(tmp) / "out" / project.sdist
            if res.returncode != 0 or not got.is_file():
                raise SystemExit(f"{project.dist}=={project.version}: pip download failed "
                                 f"({res.returncode}):\n{(res.stderr or res.stdout).strip()[-2000:]}")
            shutil.move(str(got), path.with_suffix(".partial"))
            path.with_suffix(".partial").rename(path)
    digest = sha256_of(path)
    if digest != project.sha256:
        raise SystemExit(f"{path}: sha256 {digest} is not the pinned {project.sha256}; refusing it "
                         "(delete the file to fetch it again, or fix the pin in PROJECTS)")
    return path


def unpack(sdist: Path, dest: Path) -> None:
    """The sdist's files into `dest` (its top folder stripped); only regular files and folders."""
    with tarfile.open(sdist) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise SystemExit(f"{sdist}: expected one top folder, found {sorted(tops)}")
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as tmp:
            for m in members:
                if not (m.isfile() or m.isdir()):
                    raise SystemExit(f"{sdist}: {m.name} is neither a file nor a folder; refusing it")
                # checked here too: Debian 12's Python 3.11.2 has no extraction filters (3.11.4+)
                if m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise SystemExit(f"{sdist}: {m.name} leaves the sdist's folder; refusing it")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")  # no absolute paths, no `..`, no devices
            else:
                tar.extractall(tmp)  # every member checked above: a file or folder inside tmp
            shutil.rmtree(dest, ignore_errors=True)
            shutil.move(str(Path(tmp) / tops.pop()), dest)


def make_snapshot(project: Project, out: Path, cache: Path = CACHE) -> RepoSnapshot:
    """OUT/<folder>/: the sdist's files, plus the lock file when there are test dependencies."""
    sdist = fetch_sdist(project, cache)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / project.folder
    unpack(sdist, dest)
    if not (dest / "tests").is_dir():
        raise SystemExit(f"{project.sdist}: no tests/ at its root; this project cannot be a snapshot")
    if (dest / LOCK_FILE).exists():
        raise SystemExit(f"{project.sdist} ships its own {LOCK_FILE}; refusing to overwrite it")
    if project.test_deps:
        (dest / LOCK_FILE).write_text(lock_text(project))
    return RepoSnapshot.load(out, project.folder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "pypi", help="snapshot folders (default: data/pypi)")
    ap.add_argument("--only", nargs="*", help="folders of PROJECTS to fetch (default: all)")
    args = ap.parse_args(argv)
    chosen = [p for p in PROJECTS if not args.only or p.folder in args.only]
    unknown = set(args.only or ()) - {p.folder for p in PROJECTS}
    if unknown:
        raise SystemExit(f"not in PROJECTS: {sorted(unknown)}")
    for project in chosen:
        snap = make_snapshot(project, args.out)
        sources = snap.source_files()
        lines = sum(len(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in sources)
        print(f"{project.folder:34} {project.dist}=={project.version}  commit {snap.commit[:8]}  "
              f"{len(sources)} source files, {lines} lines  deps: "
              f"{', '.join(f'{n}=={v}' for n, v, _ in project.test_deps) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
