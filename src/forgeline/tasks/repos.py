"""The embedded repositories in data/repos and the commit-like hash that pins each snapshot."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from forgeline.sandbox.base import TaskEnv

IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".git"}


def snapshot_files(root: Path) -> list[Path]:
    """Files that make up a repo snapshot, sorted by relative path (no caches, no .pyc)."""
    return sorted(
        (p for p in root.rglob("*")
         if p.is_file() and p.suffix != ".pyc" and not IGNORED_PARTS & set(p.relative_to(root).parts)),
        key=lambda p: p.relative_to(root).as_posix())


def snapshot_commit(root: Path) -> str:
    """A 40-hex content hash of the snapshot, in the role of a git commit id: `base_commit`."""
    h = hashlib.sha1()
    for path in snapshot_files(root):
        data = path.read_bytes()
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(hashlib.sha1(data).digest())
    return h.hexdigest()


def image_name(repo: str, commit: str) -> str:
    """One image per repository snapshot (lowercase, as docker requires)."""
    return f"forgeline/{repo.lower()}:{commit[:8]}"


@dataclass(frozen=True)
class RepoSnapshot:
    name: str
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
    def image(self) -> str:
        return image_name(self.name, self.commit)

    def env(self) -> TaskEnv:
        return TaskEnv(self.name, self.path, self.commit, self.image)

    def source_files(self) -> list[Path]:
        """Library modules the bug generator may mutate (never the tests)."""
        return [p for p in snapshot_files(self.path)
                if p.suffix == ".py" and p.relative_to(self.path).parts[0] != "tests"]
