"""Versioned artifacts with real DVC, real Snakemake, a tiny project in a real git repository.

origin: git init, dvc init, a local remote, `forgeline export-dvc`, `dvc repro`,
`dvc push --run-cache`, commit, tag v1. Then fresh clones at the tag: `dvc pull` +
`forgeline verify` gives the same bytes and leaves Snakemake nothing to do; a corrupted or
deleted artifact is named; the CI recipe (pull the run-cache, repro, metrics diff) restores
instead of recomputing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import tiny_project as tp
from forgeline.workflow.verify import Problem, check, compare, unlisted

pytestmark = pytest.mark.slow
TAG = "v1"


def env(project: Path) -> dict[str, str]:
    # DVC must not phone home (usage analytics, update check): loopback only
    return {**tp.env(project), "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "forgeline-test",
            "GIT_AUTHOR_EMAIL": "test@localhost", "GIT_COMMITTER_NAME": "forgeline-test",
            "GIT_COMMITTER_EMAIL": "test@localhost"}


def sh(project: Path, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=project, env=env(project), capture_output=True,
                          text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def stage_names(project: Path) -> list[str]:
    return list(yaml.safe_load((project / "dvc.yaml").read_text())["stages"])


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    """The tiny project built with `dvc repro`, pushed to a local remote, committed, tagged."""
    base = tmp_path_factory.mktemp("versioning")
    (base / "origin").mkdir()
    project = tp.make_project(base / "origin")
    shutil.copy2(tp.ROOT / ".gitignore", project / ".gitignore")  # the real one: results/ ignored
    sh(project, "git", "init", "-q", "-b", "main")
    sh(project, "dvc", "init", "-q")
    shutil.copy2(tp.ROOT / ".dvcignore", project / ".dvcignore")  # the real one
    sh(project, "dvc", "config", "core.analytics", "false")
    sh(project, "dvc", "config", "core.check_update", "false")
    sh(project, "dvc", "remote", "add", "-d", "store", str(base / "remote"))
    sh(project, "forgeline", "export-dvc")
    sh(project, "dvc", "repro")
    sh(project, "dvc", "push", "--run-cache")
    sh(project, "git", "add", "-A")
    sh(project, "git", "commit", "-q", "-m", "tiny run v1")
    sh(project, "git", "tag", TAG)
    return project


def clone(origin: Path, dest: Path, pull: bool = True) -> Path:
    """A fresh clone at the tag (its own empty DVC cache), with the tagged artifacts pulled."""
    subprocess.run(["git", "clone", "-q", "--branch", TAG, str(origin), str(dest)], check=True,
                   capture_output=True)
    if pull:
        sh(dest, "dvc", "pull")
    return dest


# -- the origin: built, pushed, tagged --------------------------------------------------------

def test_origin_tracks_every_artifact_and_keeps_results_out_of_git(origin):
    tracked = sh(origin, "git", "ls-files").stdout.split()
    assert "dvc.lock" in tracked and "dvc.yaml" in tracked and "src/forgeline/cli.py" in tracked
    assert not [f for f in tracked if f.startswith(("results/", "logs/"))]
    lock = yaml.safe_load((origin / "dvc.lock").read_text())["stages"]
    outs = {o["path"] for stage in lock.values() for o in stage["outs"]}
    assert unlisted(sorted(tp.artifact_digests(origin)), outs) == []  # a file, or in a dir out
    assert set(lock) == set(stage_names(origin))


def test_second_repro_does_nothing_and_status_is_clean(origin):
    out = sh(origin, "dvc", "repro").stdout
    assert "Running stage" not in out, out[-3000:]
    assert "didn't change, skipping" in out or "up to date" in out
    assert "up to date" in sh(origin, "dvc", "status").stdout


# -- a tagged run: pull + verify --------------------------------------------------------------

def test_pulled_tag_verifies_and_snakemake_has_nothing_to_do(origin, tmp_path):
    project = clone(origin, tmp_path / "clone")
    assert tp.artifact_digests(project) == tp.artifact_digests(origin)
    proc = sh(project, "forgeline", "verify")
    assert "MISMATCH" not in proc.stdout
    manifests = len(stage_names(project)) - 1  # one per job; the stage `code` writes stamps
    assert re.search(rf"verify: \d+ artifacts of {manifests} manifests match", proc.stderr), \
        proc.stderr
    plan = sh(project, "snakemake", "-n", "--cores", "1").stdout
    assert "Nothing to be done" in plan, plan[-3000:]
    # touching changed no bytes: DVC agrees the workspace is the tagged one
    assert "up to date" in sh(project, "dvc", "status").stdout


def test_verify_names_a_corrupted_byte_and_a_deleted_artifact(origin, tmp_path):
    project = clone(origin, tmp_path / "clone")
    corrupted = project / "results/validated/beta.jsonl"
    data = bytearray(corrupted.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte, same size
    corrupted.write_bytes(bytes(data))
    proc = sh(project, "forgeline", "verify", check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("MISMATCH")]
    assert lines == [
        "MISMATCH results/validated/beta.jsonl: sha256 differs "
        f"(manifest {manifest_sha(project, 'results/validated/beta.jsonl')[:12]}…, on disk "
        f"{tp.artifact_digests(project)['results/validated/beta.jsonl'][:12]}…) "
        "[results/validated/beta.manifest.json]"], proc.stdout
    assert "results/validated/beta.jsonl" in proc.stderr  # the summary line names it too

    # DVC repairs it; then delete another one
    sh(project, "dvc", "checkout", "--force")
    sh(project, "forgeline", "verify", "--no-touch")
    (project / "results/split/test.jsonl").unlink()
    proc = sh(project, "forgeline", "verify", check=False)
    assert proc.returncode != 0
    assert proc.stdout.splitlines() == [
        "MISMATCH results/split/test.jsonl: missing [results/split/manifest.json]"], proc.stdout


def test_verify_names_deleted_directory_stages_and_an_edited_manifest(origin, tmp_path):
    """A directory output keeps its manifest inside: deleting it deletes its own record. The DAG's
    outputs (dvc.yaml) name it; dvc.lock names an edited manifest. A failed check touches nothing
    (no Snakemake call: .snakemake/ is never created in the fresh clone)."""
    project = clone(origin, tmp_path / "clone")
    for folder in ("results/adapter", "results/policy/sft"):
        shutil.rmtree(project / folder)
        proc = sh(project, "forgeline", "verify", check=False)
        assert proc.returncode != 0, proc.stderr[-2000:]
        assert any(line.startswith(f"MISMATCH {folder}: missing") for line in proc.stdout.splitlines()), \
            proc.stdout
        assert folder in proc.stderr
        assert not (project / ".snakemake").exists()
        sh(project, "dvc", "checkout", "--force")
    report = project / "results/report/manifest.json"
    record = json.loads(report.read_text())
    record["params"] = {**record.get("params", {}), "edited": True}  # its outputs still match
    report.write_text(json.dumps(record, indent=2))
    proc = sh(project, "forgeline", "verify", check=False)
    assert proc.returncode != 0
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == \
        ["MISMATCH results/report/manifest.json"], proc.stdout
    assert "dvc.lock" in proc.stdout and not (project / ".snakemake").exists()
    sh(project, "dvc", "checkout", "--force")
    sh(project, "forgeline", "verify")


def test_partial_pull_verifies_with_partial_only(origin, tmp_path):
    """`dvc pull --with-deps split`: the stages up to the split. verify fails (stages missing)
    unless --partial, which lists the rest as not pulled and touches only what is there."""
    project = clone(origin, tmp_path / "partial", pull=False)
    sh(project, "dvc", "pull", "--with-deps", "split")
    proc = sh(project, "forgeline", "verify", check=False)
    assert proc.returncode != 0 and "MISMATCH results/report/report.html: missing: stage report " \
        "is not in the tree" in proc.stdout, proc.stdout[-3000:]
    proc = sh(project, "forgeline", "verify", "--partial")
    assert "not pulled (--partial)" in proc.stderr and "report" in proc.stderr, proc.stderr
    plan = sh(project, "snakemake", "-n", "--cores", "1", "results/split/split.json").stdout
    assert "Nothing to be done" in plan, plan[-3000:]
    # a pulled stage half deleted is a failure even with --partial
    (project / "results/split/val.jsonl").unlink()
    proc = sh(project, "forgeline", "verify", "--partial", check=False)
    assert proc.returncode != 0 and "MISMATCH results/split/val.jsonl: missing" in proc.stdout


def manifest_sha(project: Path, rel: str) -> str:
    for manifest in (project / "results").rglob("*manifest.json"):
        for out in json.loads(manifest.read_text())["outputs"]:
            if out["path"] == rel:
                return out["sha256"]
    raise KeyError(rel)


# -- the CI recipe ----------------------------------------------------------------------------

def test_ci_recipe_pull_run_cache_then_repro_restores_instead_of_recomputing(origin, tmp_path):
    project = clone(origin, tmp_path / "ci", pull=False)
    # as written in docs/running.md: pull (outputs + run-cache), repro, metrics diff
    sh(project, "dvc", "pull", "--run-cache")
    out = sh(project, "dvc", "repro").stdout
    # only `code` runs: it writes the stamps of the stages' code (not cached: milliseconds)
    assert re.findall(r"Running stage '([^']+)'", out) == ["code"], out[-3000:]
    shown = json.loads(sh(project, "dvc", "metrics", "show", "--json").stdout)
    files = {f for rev in shown.values() for f in rev.get("data", {})}
    assert {"results/tasks/funnel.json", "results/eval/tables/metrics.json"} <= files, shown
    same = sh(project, "dvc", "metrics", "diff", "--md", TAG).stdout
    assert [r for r in same.splitlines() if r.startswith("|")][2:] == [], same  # a header, no row
    # a run whose funnel moved: the diff against the tag names the metric, old and new value
    funnel = project / "results/tasks/funnel.json"
    data = json.loads(funnel.read_text())
    key, value = next((k, v) for k, v in data["totals"].items() if isinstance(v, int))
    funnel.write_text(json.dumps({**data, "totals": {**data["totals"], key: value + 1000}}))
    diff = sh(project, "dvc", "metrics", "diff", "--md", TAG).stdout
    assert f"totals.{key}" in diff and str(value + 1000) in diff, diff
    sh(project, "dvc", "checkout", "--force", "results/tasks/funnel.json")
    # a stale dvc.lock (e.g. a branch that regenerated dvc.yaml): every stage's run is in the
    # pulled run-cache, so repro checks the outputs out instead of running the commands
    (project / "dvc.lock").unlink()
    shutil.rmtree(project / "results")
    out = sh(project, "dvc", "repro").stdout
    assert re.findall(r"Running stage '([^']+)'", out) == ["code"], out[-3000:]
    restored = set(re.findall(r"Stage '([\w-]+)' is cached - skipping run", out))
    assert restored == set(stage_names(project)) - {"code"}, out[-3000:]
    assert tp.artifact_digests(project) == tp.artifact_digests(origin)
    assert yaml.safe_load((project / "dvc.lock").read_text()) == \
        yaml.safe_load((origin / "dvc.lock").read_text())


# -- the repository's own DVC setup and verify's pure parts ------------------------------------

def test_repository_has_a_default_local_remote_outside_git():
    out = sh(tp.ROOT, "dvc", "remote", "list").stdout
    default = sh(tp.ROOT, "dvc", "remote", "default").stdout.strip()
    urls = dict(line.split()[:2] for line in out.splitlines() if line.strip())
    assert Path(urls[default]) == tp.ROOT / "dvc-remote", out  # relative in .dvc/config
    config = (tp.ROOT / ".dvc/config").read_text()
    assert re.search(r"analytics\s*=\s*false", config) and re.search(r"check_update\s*=\s*false",
                                                                     config)
    ignored = subprocess.run(["git", "check-ignore", "-q", "dvc-remote/files/md5/00/x"],
                             cwd=tp.ROOT).returncode
    assert ignored == 0, "dvc-remote/ must be git-ignored"


def test_compare_reports_missing_size_and_sha():
    rec = {"path": "r/a", "bytes": 3, "sha256": "a" * 64}
    assert compare(rec, None) == "missing"
    assert compare(rec, dict(rec)) is None
    what = compare(rec, {**rec, "bytes": 4, "sha256": "b" * 64})
    assert what.startswith("size differs (manifest 3 bytes, on disk 4 bytes); sha256 differs")
    assert compare({**rec, "kind": "dir", "files": 2}, rec).startswith("is a file")


def test_unlisted_files_and_files_inside_listed_dirs():
    listed = {"results/a.jsonl", "results/model"}
    present = ["results/a.jsonl", "results/b.jsonl", "results/model/w.bin"]
    assert unlisted(present, listed) == ["results/b.jsonl"]


def test_check_on_a_handmade_tree(tmp_path):
    from forgeline.provenance import Manifest
    results = tmp_path / "results"
    (results / "d").mkdir(parents=True)
    (results / "a.txt").write_text("alpha\n")
    (results / "d" / "w.bin").write_bytes(b"\x00\x01")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        Manifest(stage="t").write("results/manifest.json", outputs=["results/a.txt", "results/d"])
    finally:
        os.chdir(cwd)
    (results / "d" / ".snakemake_timestamp").touch()  # Snakemake's marker is not the artifact
    problems, manifests, verified = check(tmp_path, Path("results"))
    assert (problems, len(manifests), verified) == ([], 1, 2)
    (results / "d" / "w.bin").write_bytes(b"\x00\x02")
    (results / "stray.txt").write_text("?")
    problems, _, verified = check(tmp_path, Path("results"))
    assert verified == 1
    assert [p.path for p in problems] == ["results/d", "results/stray.txt"]
    assert isinstance(problems[0], Problem) and "sha256 differs" in problems[0].what
