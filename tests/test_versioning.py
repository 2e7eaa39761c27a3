"""Versioned artifacts with real DVC, real Snakemake, a tiny project in a real git repository.

origin: git init, dvc init, a local remote, `forgeline export-dvc`, `dvc repro`,
`dvc push --run-cache`, commit, tag v1. Then fresh clones at the tag: `dvc pull` +
`forgeline verify` gives the same bytes and leaves Snakemake nothing to do; a corrupted or
deleted artifact is named; the CI recipe (pull the run-cache, repro, metrics diff) restores
instead of recomputing. The same run tagged v1-s3 with an S3 remote (moto's server on loopback,
scripts/services.sh): push, pull, verify and the run-cache through the object store. Sweeps:
`dvc exp run -S` (direct and queued) on a clone, compared by `dvc exp show`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

import tiny_project as tp
from forgeline.workflow.verify import Problem, check, compare, unlisted

pytestmark = pytest.mark.slow
TAG = "v1"


def env(project: Path) -> dict[str, str]:
    # DVC must not phone home (usage analytics, update check): loopback only. No AWS setting of
    # the machine leaks in, and botocore, finding no key, must not ask the instance-metadata
    # address (off loopback) for one.
    outer = {k: v for k, v in tp.env(project).items() if not k.startswith("AWS_")}
    no_file = str(project / ".no-aws-config")
    return {**outer, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "forgeline-test",
            "GIT_AUTHOR_EMAIL": "test@localhost", "GIT_COMMITTER_NAME": "forgeline-test",
            "GIT_COMMITTER_EMAIL": "test@localhost", "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": no_file, "AWS_SHARED_CREDENTIALS_FILE": no_file}


def sh(project: Path, *cmd: str, check: bool = True,
       extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=project, env={**env(project), **(extra_env or {})},
                          capture_output=True, text=True, timeout=900)
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


def clone(origin: Path, dest: Path, pull: bool = True, tag: str = TAG,
          extra_env: dict[str, str] | None = None) -> Path:
    """A fresh clone at the tag (its own empty DVC cache), with the tagged artifacts pulled."""
    subprocess.run(["git", "clone", "-q", "--branch", tag, str(origin), str(dest)], check=True,
                   capture_output=True)
    if pull:
        sh(dest, "dvc", "pull", extra_env=extra_env)
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
    assert_pulled_run_verifies(clone(origin, tmp_path / "clone"), origin)


def assert_pulled_run_verifies(project: Path, origin: Path) -> None:
    """The pulled tree is origin's, byte for byte; verify passes and Snakemake has nothing to do."""
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
    assert_repro_restores_from_run_cache(project, origin)


def assert_repro_restores_from_run_cache(project: Path, origin: Path) -> None:
    """With dvc.lock and results/ gone, `dvc repro` checks every stage's outputs out of the
    run-cache pulled into `project`: no stage command runs (each writes its log under logs/,
    which is no output), and the tree and dvc.lock are origin's."""
    (project / "dvc.lock").unlink()
    shutil.rmtree(project / "results")
    out = sh(project, "dvc", "repro").stdout
    assert re.findall(r"Running stage '([^']+)'", out) == ["code"], out[-3000:]
    restored = set(re.findall(r"Stage '([\w-]+)' is cached - skipping run", out))
    assert restored == set(stage_names(project)) - {"code"}, out[-3000:]
    assert not (project / "logs").exists(), sorted(map(str, (project / "logs").rglob("*")))[:20]
    assert tp.artifact_digests(project) == tp.artifact_digests(origin)
    assert yaml.safe_load((project / "dvc.lock").read_text()) == \
        yaml.safe_load((origin / "dvc.lock").read_text())


# -- the tagged run on an object store: S3 protocol, moto's server on loopback ----------------

S3_TAG = "v1-s3"
# The store checks no signature, but botocore signs every request and needs a key: it comes from
# the environment only (docs/running.md#remotes); .dvc/config names the store, never a key.
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "forgeline-test", "AWS_SECRET_ACCESS_KEY": "forgeline-test-secret"}
CREDENTIAL_OPTIONS = ("access_key_id", "secret_access_key", "session_token", "credentialpath",
                      "profile")


@pytest.fixture(scope="module")
def s3_bucket(s3_endpoint):
    """(filesystem, bucket): a bucket of this module's own, removed afterwards (the store keeps
    everything in memory)."""
    import s3fs
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                           secret=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    bucket = f"forgeline-test-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield fs, bucket
    fs.rm(bucket, recursive=True)


@pytest.fixture(scope="module")
def s3_origin(origin, s3_endpoint, s3_bucket) -> Path:
    """origin's run with the bucket as its only DVC remote, committed and tagged v1-s3, pushed with
    its run-cache: a tagged run as a colleague on another machine pulls it."""
    _, bucket = s3_bucket
    sh(origin, "dvc", "remote", "add", "-d", "s3", f"s3://{bucket}/forgeline")
    sh(origin, "dvc", "remote", "modify", "s3", "endpointurl", s3_endpoint)
    sh(origin, "dvc", "remote", "remove", "store")  # nothing can come from the folder
    sh(origin, "git", "commit", "-q", "-am", "remote: the S3 store")
    sh(origin, "git", "tag", S3_TAG)
    sh(origin, "dvc", "push", "--run-cache", extra_env=S3_CREDENTIALS)
    return origin


def test_s3_store_holds_every_output_and_the_run_cache_and_config_no_key(s3_origin, s3_bucket):
    fs, bucket = s3_bucket
    lock = yaml.safe_load((s3_origin / "dvc.lock").read_text())["stages"]
    cached = {o["md5"] for name, stage in lock.items() if name != "code" for o in stage["outs"]}
    # DVC 3's layout: files/md5/<2 hex>/<30 hex>[.dir]
    stored = {f"{Path(p).parent.name}{Path(p).name}" for p in fs.find(f"{bucket}/forgeline/files/md5")}
    assert cached and cached <= stored, sorted(cached - stored)[:5]
    # runs/<2 hex>/<stage key>/<run>: one key per stage whose outputs are cached (all but code)
    runs = {Path(p).parent.name for p in fs.find(f"{bucket}/forgeline/runs")}
    assert len(runs) == len(lock) - 1, (len(runs), len(lock))
    config = sh(s3_origin, "git", "show", f"{S3_TAG}:.dvc/config").stdout
    assert f"url = s3://{bucket}/forgeline" in config and "endpointurl = http://127.0.0.1:" in config
    assert not [o for o in CREDENTIAL_OPTIONS if o in config], config
    # nor in the machine's own config (`dvc remote remove` leaves an empty one): the push took
    # the key from the environment
    local = s3_origin / ".dvc/config.local"
    assert not local.exists() or not local.read_text().strip(), local.read_text()


def test_s3_clone_pulls_with_a_key_from_the_environment_and_verifies(s3_origin, tmp_path):
    project = clone(s3_origin, tmp_path / "clone", pull=False, tag=S3_TAG)
    remotes = sh(project, "dvc", "remote", "list").stdout.splitlines()
    assert [line.split()[0] for line in remotes if line.strip()] == ["s3"], remotes
    # no key in the environment: botocore finds none and nothing is pulled
    proc = sh(project, "dvc", "pull", check=False)
    assert proc.returncode != 0 and "Unable to locate credentials" in proc.stderr, proc.stderr[-2000:]
    assert tp.artifact_digests(project) == {}
    sh(project, "dvc", "pull", extra_env=S3_CREDENTIALS)
    assert_pulled_run_verifies(project, s3_origin)


def test_s3_run_cache_restores_stages_instead_of_running_them(s3_origin, tmp_path):
    """CI's recipe against the store: `dvc pull --run-cache`, then `dvc repro` restores."""
    project = clone(s3_origin, tmp_path / "ci", pull=False, tag=S3_TAG)
    sh(project, "dvc", "pull", "--run-cache", extra_env=S3_CREDENTIALS)
    assert_repro_restores_from_run_cache(project, s3_origin)


# -- sweeps: experiments on the same DAG ------------------------------------------------------

def test_sweep_experiments_list_their_params_and_the_evaluation_metrics(origin, tmp_path):
    """`dvc exp run -S` (direct, and queued + --run-all) on the tagged run: each experiment
    reruns what the changed key feeds (the evaluation) and `dvc exp show` compares the params
    and the paired evaluation's numbers beside the baseline's."""
    project = clone(origin, tmp_path / "sweep")
    baseline = yaml.safe_load((project / "params.yaml").read_text())["evaluation"]["confidence"]
    sh(project, "dvc", "exp", "run", "-n", "conf-090", "-S", "evaluation.confidence=0.9")
    sh(project, "dvc", "exp", "run", "--queue", "-n", "conf-080", "-S", "evaluation.confidence=0.8")
    try:
        sh(project, "dvc", "exp", "run", "--run-all")
    finally:
        sh(project, "dvc", "queue", "stop", check=False)  # no queue worker outlives the test
    shown = json.loads(sh(project, "dvc", "exp", "show", "--json").stdout)
    base = next(rev for rev in shown if rev["rev"] != "workspace")
    runs = {"baseline": base["data"], **{e["name"]: e["revs"][0]["data"] for e in base["experiments"]}}
    assert set(runs) == {"baseline", "conf-090", "conf-080"}, [e["name"] for e in base["experiments"]]
    confidence = {name: data["params"]["params.yaml"]["data"]["evaluation"]["confidence"]
                  for name, data in runs.items()}
    assert confidence == {"baseline": baseline, "conf-090": 0.9, "conf-080": 0.8}
    metrics = {name: data["metrics"]["results/eval/tables/metrics.json"]["data"]
               for name, data in runs.items()}
    for name, panels in metrics.items():
        assert set(panels) == {"test", "heldout"}, panels
        for panel in panels.values():
            assert {"success_rate", "ci_low", "ci_high", "n"} <= set(panel["ppo"])
            assert {"wins", "losses", "mcnemar_p"} <= set(panel["ppo_vs_base"])
            assert panel["base"]["confidence"] == confidence[name]
    # a narrower confidence, a narrower Wilson interval: the metric moved with the param
    high = {name: panels["test"]["base"]["ci_high"] for name, panels in metrics.items()}
    assert high["conf-080"] < high["conf-090"] < high["baseline"], high
    # the same DAG: what the key does not feed is the tagged run's, byte for byte
    split = {name: data["deps"]["results/split/test.jsonl"]["hash"] for name, data in runs.items()}
    assert len(set(split.values())) == 1, split


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
