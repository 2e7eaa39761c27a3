"""Repository snapshots (data/repos and the like), their git commit and their SWE-smith names.

A snapshot is a folder: the package and tests/ at its root. It becomes a git repository in its
image (envs/repo.Dockerfile: /testbed, one baseline commit with a fixed author, date and
message), and `snapshot_commit` computes that commit's id from the files alone, so
`base_commit` is a real commit of the repository the task runs in.

Names follow SWE-smith: a folder `NAME` is the repository `forgeline/NAME`, a folder
`OWNER__NAME` is `OWNER/NAME`; tasks name it `swesmith/OWNER__NAME.<commit8>` (repo),
`OWNER__NAME.<commit8>.<bug_type>__<hash8>` (instance_id), and its image is
`forgeline/swesmith.<arch>.OWNER_1776_NAME.<commit8>` (SWE-smith's `swebench/...` pattern under
forgeline's own namespace: these images are built here, not pulled).
"""
from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from forgeline.sandbox.base import TaskEnv
from forgeline.tasks.schema import DEFAULT_OWNER

IMAGE_ORG = "forgeline"
# The baseline commit of /testbed (envs/repo.Dockerfile sets the same identity and date).
GIT_IDENTITY = b"forgeline <forgeline@localhost> 946684800 +0000"
GIT_MESSAGE = b"baseline\n"

IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".git"}


def snapshot_files(root: Path) -> list[Path]:
    """Files that make up a repo snapshot, sorted by relative path (no caches, no .pyc)."""
    return sorted(
        (p for p in root.rglob("*")
         if p.is_file() and p.suffix != ".pyc" and not IGNORED_PARTS & set(p.relative_to(root).parts)),
        key=lambda p: p.relative_to(root).as_posix())


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


def swesmith_repo(owner: str, name: str, commit: str) -> str:
    """A task's `repo` field: SWE-smith's mirror name, `swesmith/OWNER__NAME.<commit8>`."""
    return f"swesmith/{owner}__{name}.{commit[:8]}"


@dataclass(frozen=True)
class RepoSnapshot:
    name: str  # the folder under repos.root: job names, result files
    path: Path
    commit: str

    @classmethod
    def load(cls, root: str | Path, name: str) -> "RepoSnapshot":
        path = Path(root) / name
        if not (path / "tests").is_dir():
            raise FileNotFoundError(f"{path}: not a repository snapshot (expected {path}/tests/); "
                                    f"check repos.root and the repo lists in params.yaml")
        return cls(name, path, snapshot_commit(path))

    @property
    def repo_name(self) -> str:
        """SWE-smith's `OWNER__NAME.<commit8>`: the prefix of every instance_id of this snapshot."""
        owner, name = split_folder(self.name)
        return f"{owner}__{name}.{self.commit[:8]}"

    @property
    def repo(self) -> str:
        """The `repo` field of this snapshot's tasks."""
        return swesmith_repo(*split_folder(self.name), self.commit)

    @property
    def image(self) -> str:
        return image_name(*split_folder(self.name), self.commit)

    def env(self) -> TaskEnv:
        return TaskEnv(self.name, self.path, self.commit, self.image)

    def source_files(self) -> list[Path]:
        """Library modules the bug generator may mutate: the .py files inside the snapshot's
        packages, i.e. top-level folders with an __init__.py, at the root or under src/ (so not
        setup.py, noxfile.py, docs/conf.py or scripts of an sdist), and only files whose fix
        the verifier grades (`verify.admissible`: never a test, conftest.py, __main__.py, ...)."""
        from forgeline.sandbox.verify import admissible  # verify imports this module

        files = snapshot_files(self.path)
        names = frozenset(p.relative_to(self.path).as_posix() for p in files)
        out = []
        for p in files:
            parts = p.relative_to(self.path).parts
            top = parts[:2] if parts[0] == "src" else parts[:1]
            if (p.suffix == ".py" and len(parts) > len(top)
                    and (self.path.joinpath(*top) / "__init__.py").is_file()
                    and admissible("/".join(parts), frozenset(), names) is None):
                out.append(p)
        return out
