"""Snapshot identity: base_commit is the git commit git itself makes of the snapshot, and the
SWE-smith names round-trip to the snapshot folder."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forgeline.sandbox.snapshot import image_name, snapshot_commit, snapshot_files
from forgeline.tasks.repos import RepoSnapshot, swesmith_repo
from forgeline.tasks.schema import instance_id, repo_key

DATA = Path(__file__).resolve().parents[1] / "data" / "repos"


def git_commit(snapshot: Path, tmp: Path) -> str:
    """What envs/repo.Dockerfile does to /testbed, with git: the commit id of the baseline."""
    work = tmp / "work"
    for path in snapshot_files(snapshot):
        target = work / path.relative_to(snapshot)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    env = {**os.environ, "GIT_AUTHOR_NAME": "forgeline", "GIT_AUTHOR_EMAIL": "forgeline@localhost",
           "GIT_COMMITTER_NAME": "forgeline", "GIT_COMMITTER_EMAIL": "forgeline@localhost",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
    for cmd in (["init", "-q"], ["-c", "commit.gpgsign=false", "add", "-A", "-f"],
                ["-c", "commit.gpgsign=false", "commit", "-q", "-m", "baseline", "--allow-empty"]):
        subprocess.run(["git", *cmd], cwd=work, env=env, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_commit_is_gits_on_tricky_trees(tmp_path):
    snap = tmp_path / "snap"
    files = {"a.py": "x = 1\n", "a/b.py": "", "a-b/c.py": "y\n", "a.b/d.txt": "z",
             "tests/test_a.py": "def test(): pass\n", ".gitignore": "*.py\nignored/\n",
             "ignored/kept.py": "kept = True\n", "run.sh": "#!/bin/sh\necho hi\n"}
    for rel, text in files.items():
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).write_text(text)
    (snap / "run.sh").chmod(0o755)
    assert snapshot_commit(snap) == git_commit(snap, tmp_path)


@pytest.mark.parametrize("name", ["ledgerkit", "semver"])
def test_commit_is_gits_on_the_embedded_repositories(name, tmp_path):
    assert snapshot_commit(DATA / name) == git_commit(DATA / name, tmp_path)


def test_swesmith_names_round_trip_to_the_folder(tmp_path):
    snap = RepoSnapshot.load(DATA, "ledgerkit")
    c8 = snap.commit[:8]
    assert snap.repo == f"swesmith/forgeline__ledgerkit.{c8}" == swesmith_repo("forgeline", "ledgerkit", snap.commit)
    assert snap.repo_name == f"forgeline__ledgerkit.{c8}"
    assert snap.image == image_name("forgeline", "ledgerkit", snap.commit)
    assert snap.image.startswith("forgeline/swesmith.") and snap.image.endswith(f".forgeline_1776_ledgerkit.{c8}")
    assert repo_key(snap.repo) == "ledgerkit"
    assert instance_id(snap.repo_name, "func_pm_op_swap", "ab" * 32).startswith(f"{snap.repo_name}.func_pm_op_swap__abab")
    # a folder that carries its owner, as upstream names its repositories
    (tmp_path / "pypi__semver" / "tests").mkdir(parents=True)
    other = RepoSnapshot.load(tmp_path, "pypi__semver")
    assert other.repo == f"swesmith/pypi__semver.{other.commit[:8]}" and repo_key(other.repo) == "pypi__semver"
    assert other.image.endswith(f".pypi_1776_semver.{other.commit[:8]}")
    # the older and GitHub-style forms still name the folder
    assert repo_key("ledgerkit") == repo_key("someone/ledgerkit") == "ledgerkit"
