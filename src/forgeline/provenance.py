"""Atomic writes, content digests and the manifest every artifact carries.

A stage never leaves a half-written file under its final name: it writes to a temp file in
the same directory and renames it (atomic on POSIX). The manifest is written last, so an
artifact with a manifest is an artifact that finished.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import platform
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

@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, owned: Iterable[str] = (MANIFEST_NAME,)) -> Iterator[Path]:
    """Yield a temp folder beside `path`; when the block succeeds it replaces `path` whole.

    An existing `path` is replaced only if it holds one of the `owned` names (it is an earlier
    run's output), so a mistyped --out never deletes someone's folder.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if path.exists():
            names = {p.name for p in path.iterdir()}
            if names and not set(owned) & names:
                raise FileExistsError(f"{path} exists and is not an output of this stage "
                                      f"(none of {sorted(owned)} in it); not replacing it")
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        return record
