"""Repository snapshots as tasks name them: SWE-smith's repo and instance names, mutable sources.

A snapshot's files, its commit and its image belong to the sandbox (forgeline.sandbox.snapshot);
here they get SWE-smith's task names: a folder `OWNER__NAME` (or a bare `NAME`, owner forgeline)
at commit C is the repository `swesmith/OWNER__NAME.<C8>` (a task's `repo`), and its instances
are `OWNER__NAME.<C8>.<bug_type>__<hash8>` (instance_id).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forgeline.sandbox.base import TaskEnv
from forgeline.sandbox.snapshot import (image_name, import_parts, snapshot_commit, snapshot_dir, snapshot_files,
                                        split_folder)
from forgeline.sandbox.verify import admissible


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
        path = snapshot_dir(root, name)
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
        files = snapshot_files(self.path)
        names = frozenset(p.relative_to(self.path).as_posix() for p in files)
        out = []
        for p in files:
            parts = p.relative_to(self.path).parts
            top = parts[:len(parts) - len(import_parts(parts)) + 1]  # the package, under src/ or not
            if (p.suffix == ".py" and len(parts) > len(top)
                    and (self.path.joinpath(*top) / "__init__.py").is_file()
                    and admissible("/".join(parts), frozenset(), names) is None):
                out.append(p)
        return out
