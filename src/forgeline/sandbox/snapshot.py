"""A repository snapshot as the sandbox sees it: its files, its commit in its image, the image's name.

A snapshot is a folder (data/repos/NAME and the like): the package and tests/ at its root. It
becomes a git repository in its image (envs/repo.Dockerfile: /testbed, one baseline commit with
a fixed author, date and message), and `snapshot_commit` computes that commit's id from the
files alone, so a task's `base_commit` is a real commit of the repository it runs in.

A folder `NAME` is the repository `forgeline/NAME`, a folder `OWNER__NAME` is `OWNER/NAME`; its
image is `forgeline/swesmith.<arch>.OWNER_1776_NAME.<commit8>` (SWE-smith's `swebench/...`
pattern under forgeline's own namespace: these images are built here, not pulled). The task
names built on these (`repo`, `instance_id`) are in forgeline.tasks.repos.
"""
from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import Sequence

from forgeline.sandbox.base import TaskEnv

DEFAULT_OWNER = "forgeline"  # the owner of a snapshot folder named without one (`NAME`)
IMAGE_ORG = "forgeline"
# The baseline commit of /testbed (envs/repo.Dockerfile sets the same identity and date).
GIT_IDENTITY = b"forgeline <forgeline@localhost> 946684800 +0000"
GIT_MESSAGE = b"baseline\n"

IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".git"}
# A src/ layout: the packages live under src/ and import by their own names, because every
# backend puts the session's src/ on PYTHONPATH (envs/repo.Dockerfile: /testbed/src; the process
# backend: its copy's src/).
SRC_DIR = "src"


def snapshot_files(root: Path) -> list[Path]:
    """Files that make up a repo snapshot, sorted by relative path (no caches, no .pyc)."""
    return sorted(
        (p for p in root.rglob("*")
         if p.is_file() and p.suffix != ".pyc" and not IGNORED_PARTS & set(p.relative_to(root).parts)),
        key=lambda p: p.relative_to(root).as_posix())


def import_parts(parts: Sequence[str]) -> tuple[str, ...]:
    """A snapshot path's parts as Python imports them: ('src', 'pkg', 'm.py') -> ('pkg', 'm.py')
    in a src/ layout; any other path unchanged."""
    return tuple(parts[1:]) if len(parts) > 1 and parts[0] == SRC_DIR else tuple(parts)


def src_layout(root: Path) -> bool:
    """Whether the snapshot at `root` has a src/ layout: a src/ folder, which the image's
    PYTHONPATH=/testbed/src makes importable (a no-op in an image without one)."""
    return (Path(root) / SRC_DIR).is_dir()


def _git_object(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" %d\0" % len(body) + body).digest()


def snapshot_commit(root: Path) -> str:
    """The git commit id of the snapshot's baseline commit in its image (40 hex): every snapshot
    file as a blob (100755 when executable, else 100644), trees as git sorts them, and a commit
    with GIT_IDENTITY and GIT_MESSAGE. tests/test_repos.py checks it against git itself."""
    tree: dict = {}
    for path in snapshot_files(root):
        *dirs, name = path.relative_to(root).parts
        node = tree
        for d in dirs:
            node = node.setdefault(d, {})
        mode = b"100755" if os.access(path, os.X_OK) else b"100644"
        node[name] = (mode, _git_object(b"blob", path.read_bytes()))

    def write(node: dict) -> bytes:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):  # git orders a tree as if its name ended in "/"
                entries.append((name.encode() + b"/", b"40000", name.encode(), write(value)))
            else:
                entries.append((name.encode(), value[0], name.encode(), value[1]))
        body = b"".join(mode + b" " + name + b"\0" + sha for _, mode, name, sha in sorted(entries))
        return _git_object(b"tree", body)

    commit = (b"tree " + write(tree).hex().encode() + b"\nauthor " + GIT_IDENTITY
              + b"\ncommitter " + GIT_IDENTITY + b"\n\n" + GIT_MESSAGE)
    return _git_object(b"commit", commit).hex()


def split_folder(folder: str) -> tuple[str, str]:
    """(owner, name) of a snapshot folder: `OWNER__NAME` or a bare `NAME` (owner forgeline)."""
    owner, sep, name = folder.partition("__")
    return (owner, name) if sep and owner and name else (DEFAULT_OWNER, folder)


def image_arch() -> str:
    """SWE-smith's architecture word in image names."""
    return "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"


def image_name(owner: str, name: str, commit: str) -> str:
    """One image per repository snapshot, SWE-smith's pattern (lowercase, as docker requires)."""
    return f"{IMAGE_ORG}/swesmith.{image_arch()}.{owner}_1776_{name}.{commit[:8]}".lower()


def snapshot_dir(root: str | Path, name: str) -> Path:
    """The folder of snapshot `name` under `root`; FileNotFoundError when it is not one."""
    path = Path(root) / name
    if not (path / "tests").is_dir():
        raise FileNotFoundError(f"{path}: not a repository snapshot (expected {path}/tests/); "
                                f"check repos.root and the repo lists in params.yaml")
    return path


def snapshot_env(root: str | Path, name: str) -> TaskEnv:
    """The environment of snapshot `name` under `root`: its folder, its commit and its image."""
    path = snapshot_dir(root, name)
    commit = snapshot_commit(path)
    return TaskEnv(name, path, commit, image_name(*split_folder(name), commit))
