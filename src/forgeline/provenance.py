"""Atomic writes, content digests and the manifest every artifact carries.

A stage never leaves a half-written file under its final name: it writes to a temp file in
the same directory and renames it (atomic on POSIX). The manifest is written last, so an
artifact with a manifest is an artifact that finished.
"""
from __future__ import annotations

import contextlib
import errno
import gc
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

from forgeline.codedeps import stage_digest

PACKAGE_ROOT = Path(__file__).resolve().parent
MANIFEST_NAME = "manifest.json"
# Libraries whose versions change what an artifact contains.
TRACKED_LIBRARIES = ("torch", "transformers", "peft", "tokenizers", "snakemake", "dvc", "docker")


# -- digests -------------------------------------------------------------------------------

def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def canonical_json(obj: Any) -> str:
    """One serialization per value: sorted keys, no whitespace, UTF-8 kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tree_digest(root: str | os.PathLike,
                ignore: Iterable[str] = ("__pycache__", ".pytest_cache", ".snakemake_timestamp")) -> str:
    """sha256 over the sorted lines `relpath\\0sha256(file)\\n` of every file below root."""
    root = Path(root)
    lines = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if not path.is_file() or any(part in ignore for part in rel.parts) or path.suffix == ".pyc":
            continue
        lines.append(f"{rel.as_posix()}\0{sha256_file(path)}\n")
    # sorted as strings (Harbor's task digest), not as Path objects ('a-b' vs 'a/b' differ)
    return sha256_bytes("".join(sorted(lines)).encode())


# -- atomic writes -------------------------------------------------------------------------
#
# Every temp name says who owns it: `~HOST~PID~START~`, START being the owner's start time
# (clock ticks since boot, /proc/PID/stat field 22; 0 where there is no /proc), so a PID reused
# by another process is not taken for the owner. A temp whose owner is gone from this host is
# the leftover of a killed write: the next write into its folder removes it (once per process
# and folder), and so does `forgeline verify --sweep`. A temp of another host's process is never
# removed here: this host cannot tell whether it still runs (a Slurm job on another node).

FAULT_ENV = "FORGELINE_FAULT"
_OWNER_TAG = re.compile(r"~(?P<host>[A-Za-z0-9._-]+)~(?P<pid>[0-9]+)~(?P<start>[0-9]+)~")
_RENAME_EXCHANGE = 2  # renameat2(2) flag: swap two paths atomically
_swept: set[tuple[int, str]] = set()  # (pid, folder) already swept by this process
_tags: dict[int, str] = {}


def fault_point(point: str, name: str | os.PathLike) -> None:
    """Test hook of the fault-injection tests (tests/test_crash.py, bench/crash_reliability.py).

    With FORGELINE_FAULT=POINT:NAME in the environment, the process SIGKILLs itself on reaching
    POINT for an output whose path ends with NAME; with FORGELINE_FAULT=POINT:NAME:run it SIGKILLs
    its whole process group (Snakemake and every running job: a power loss). Points: file.open,
    file.written, file.renamed (atomic_path), dir.open, dir.built, dir.aside, dir.replaced
    (atomic_dir), sandbox.ready (a process sandbox's temp copy, NAME = the repository).
    Unset (every real run) it costs one environment lookup."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    want_point, _, rest = spec.partition(":")
    want_name, _, scope = rest.partition(":")
    name = Path(name).as_posix()
    if want_point == point and (name == want_name or name.endswith("/" + want_name)):
        if scope == "run":
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[1].split()  # the command name may hold spaces and ')'
    return fields[0].decode(), int(fields[19])


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", platform.node()) or "localhost"


def owner_tag() -> str:
    """`~HOST~PID~START~` of this process, the part of a temp name that names its owner."""
    pid = os.getpid()  # per call: a forked child is an owner of its own
    if pid not in _tags:
        stat = _proc_stat(pid)
        _tags[pid] = f"~{_host()}~{pid}~{stat[1] if stat else 0}~"
    return _tags[pid]


def owner_of(name: str) -> tuple[str, int, str] | None:
    """(host, pid, state) of the owner a temp name records, or None for a name without one.
    state: "running" (this host, alive), "gone" (this host, exited, a zombie, or its PID now
    another process's) or "elsewhere" (another host: unknown here)."""
    m = _OWNER_TAG.search(name)
    if m is None:
        return None
    host, pid, start = m["host"], int(m["pid"]), int(m["start"])
    if host != _host():
        return host, pid, "elsewhere"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return host, pid, "gone"
    except PermissionError:  # alive, another user's
        pass
    stat = _proc_stat(pid)
    if stat is not None and (stat[0] == "Z" or (start and stat[1] != start)):
        return host, pid, "gone"
    return host, pid, "running"


def is_write_temp(name: str) -> bool:
    """Is this file name a temp of atomic_path/atomic_dir (`.NAME~owner~random.tmp`)?"""
    return name.startswith(".") and name.endswith(".tmp") and _OWNER_TAG.search(name) is not None


MANIFEST_INDEX = Path(".forgeline/manifests")


def index_manifest(path: str | os.PathLike) -> None:
    """Record a manifest's sha256 outside results/, under MANIFEST_INDEX in the working directory
    (where the stages run), once it has its final name: `forgeline verify` then catches an
    edited manifest without a dvc.lock. One inside an atomic_dir temp is indexed after the swap;
    one outside the working directory is not indexed."""
    path = Path(os.path.abspath(path))
    cwd = Path.cwd()
    if not path.is_relative_to(cwd) or any(is_write_temp(part) for part in path.parts):
        return
    rel = path.relative_to(cwd).as_posix()
    write_text(cwd / MANIFEST_INDEX / f"{rel}.sha256", sha256_file(path) + "\n")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sweep_leftovers(folder: str | os.PathLike, prefix: str = ".", suffix: str = ".tmp") -> list[Path]:
    """Remove the temps in `folder` (names with an owner tag, `prefix` and `suffix`) whose owner
    is gone from this host; returns what was removed. Temps of running owners and of other
    hosts stay."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in sorted(names):
        if name.startswith(prefix) and name.endswith(suffix) and \
                (owner := owner_of(name)) is not None and owner[2] == "gone":
            _remove(Path(folder) / name)
            removed.append(Path(folder) / name)
    return removed


def _sweep_once(folder: str | os.PathLike, prefix: str = ".", suffix: str = ".tmp") -> None:
    key = (os.getpid(), os.path.abspath(folder))
    if key not in _swept:
        _swept.add(key)
        sweep_leftovers(folder, prefix, suffix)


def sweep_temp_dirs() -> None:
    """Remove the `forgeline-*` temp dirs (owned_tempdir) of processes gone from this host: the
    leftovers of SIGKILLed jobs. Once per process; sandboxes call it when they start."""
    _sweep_once(tempfile.gettempdir(), prefix="forgeline-", suffix="")


def owned_tempdir(stem: str) -> tempfile.TemporaryDirectory:
    """A TemporaryDirectory `STEM~owner~random` in the system temp folder (sandbox copies,
    scratch), after sweep_temp_dirs(). `stem` starts with `forgeline-`."""
    sweep_temp_dirs()
    return tempfile.TemporaryDirectory(prefix=stem + owner_tag())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_once(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{owner_tag()}", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        fault_point("file.open", path)
        yield tmp
        os.chmod(tmp, 0o644)
        fault_point("file.written", path)
        os.replace(tmp, path)
        fault_point("file.renamed", path)
    finally:
        tmp.unlink(missing_ok=True)


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where
    the system or file system cannot (then nothing changed)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def replace_by_renames(new: Path, path: Path) -> Path:
    """Replace the folder `path` with `new` by two renames (where `exchange` cannot): `path`
    moves aside to an owned temp name, `new` takes its place. Returns the aside, for the
    caller to delete. A kill between the renames leaves no `path` and the aside (a leftover
    the next write sweeps), never a mix of the two trees."""
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}{owner_tag()}", suffix=".tmp", dir=path.parent))
    os.rmdir(aside)
    os.rename(path, aside)
    fault_point("dir.aside", path)
    os.rename(new, path)
    return aside


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, owned: Iterable[str] = (MANIFEST_NAME,)) -> Iterator[Path]:
    """Yield a temp folder beside `path`; when the block succeeds it replaces `path` whole.

    An existing `path` is replaced only if it holds one of the `owned` names (it is an earlier
    run's output), so a mistyped --out never deletes someone's folder. The replacement is one
    atomic swap (`exchange`): at every instant `path` is the old tree or the new one, whole;
    the old one then sits under the temp name until it is deleted (a kill there leaves it as a
    leftover). Where the file system cannot swap, `replace_by_renames`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_once(path.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}{owner_tag()}", suffix=".tmp", dir=path.parent))
    old = tmp
    try:
        fault_point("dir.open", path)
        yield tmp
        os.chmod(tmp, 0o755)
        fault_point("dir.built", path)
        if path.exists() or path.is_symlink():
            names = {p.name for p in path.iterdir()} if path.is_dir() else {path.name}
            if names and not set(owned) & names:
                raise FileExistsError(f"{path} exists and is not an output of this stage "
                                      f"(none of {sorted(owned)} in it); not replacing it")
            if not exchange(tmp, path):  # else tmp now holds the old tree
                old = replace_by_renames(tmp, path)
        else:  # (under Snakemake always: it deletes a job's outputs before the job starts)
            os.rename(tmp, path)
        fault_point("dir.replaced", path)
        if (path / MANIFEST_NAME).is_file():
            index_manifest(path / MANIFEST_NAME)
    finally:
        _remove(old)
        if old != tmp:
            _remove(tmp)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic objects (JSON records): it would rescan
    every record built so far, ~40% of the time of ingesting 60k instances."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(canonical_json(rec) + "\n")
    return Path(path)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -- code version --------------------------------------------------------------------------

def git_commit(cwd: str | os.PathLike | None = None) -> dict[str, Any]:
    cwd = cwd or PACKAGE_ROOT
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=cwd, capture_output=True, text=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def forgeline_version() -> str:
    from forgeline import __version__
    return __version__


# -- manifests -----------------------------------------------------------------------------

def file_record(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        # Snakemake drops .snakemake_timestamp into directory outputs after the job ends
        files = sorted(p for p in path.rglob("*")
                       if p.is_file() and p.name != ".snakemake_timestamp")
        return {"path": str(path), "kind": "dir", "bytes": sum(p.stat().st_size for p in files),
                "sha256": tree_digest(path), "files": len(files)}
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}


@dataclass
class Manifest:
    """How an artifact was made. Built up while a stage runs; written last, atomically."""

    stage: str
    params: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    code: str = ""  # the stage's module: the manifest records the digest of the code it runs
    notes: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    timings: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t0, 4)

    def write(self, path: str | os.PathLike, outputs: Iterable[str | os.PathLike]) -> dict:
        outputs = [Path(p) for p in outputs]
        missing = [str(p) for p in outputs if not p.exists()]
        if missing:
            raise FileNotFoundError(f"stage {self.stage}: outputs missing before manifest: {missing}")
        record = {
            "stage": self.stage,
            "command": sys.argv[:1] and [Path(sys.argv[0]).name, *sys.argv[1:]],
            "params": self.params,
            "seeds": self.seeds,
            "inputs": [file_record(p) for p in sorted(set(map(str, self.inputs)))],
            "code": {
                "forgeline": forgeline_version(),
                **git_commit(),
                "stage_digest": stage_digest(self.code) if self.code else None,
            },
            "libraries": library_versions(),
            "environment": {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED"),
                            "TZ": os.environ.get("TZ"), "host": platform.node()},
            "timings": {**self.timings, "wall_s": round(time.time() - self.started, 4)},
            "notes": self.notes,
            "outputs": [file_record(p) for p in outputs],
        }
        write_json(path, record)
        index_manifest(path)
        return record
