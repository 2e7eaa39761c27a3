"""The real DAG through a real Slurm cluster (scripts/slurm.sh) with profiles/slurm.

Part of the tiny pipeline (up to the split) is submitted job by job with sbatch; the test checks
that every job really ran under Slurm (Snakemake's per-job Slurm logs and Slurm's own job
completion log) and that the artifacts are byte-identical to a local `snakemake --cores 2` run of
the same project. Without a cluster the tests skip here (root: the fixture starts one first), but
FAIL in CI (CI=true must run them).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import tiny_project as tp

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
IN_CI = os.environ.get("CI", "").lower() == "true"
SCRIPT = tp.ROOT / "scripts" / "slurm.sh"
SLURM_CONF = Path("/etc/slurm/slurm.conf")
JOBCOMP_LOG = Path("/var/log/slurm/jobcomp.log")
TARGET = "results/split/split.json"
# The whole Slurm run; SIGINT makes Snakemake cancel its Slurm jobs before it exits.
RUN_TIMEOUT_S = int(os.environ.get("FORGELINE_SLURM_TIMEOUT_S", "1200"))
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
JOBCOMP = re.compile(r"JobId=(\d+) .*?JobState=(\S+) .*?WorkDir=(\S+)")


def planned_jobs(project: Path, target: str) -> dict[str, int]:
    """rule -> job count of what `snakemake -n` would run for `target` (its Job stats table)."""
    out = tp.run(project, "snakemake", "-n", "--cores", "2", target).stdout
    table = out.split("Job stats:", 1)[1].splitlines()
    counts = {}
    for line in table[3:]:  # after "job  count" and the dashes
        name, _, count = line.strip().rpartition(" ")
        if name.strip() == "total" or not count.isdigit():
            break
        counts[name.strip()] = int(count)
    return counts


def unavailable(reason: str):
    """Skip locally; in CI a missing cluster is a failure, not a silent skip."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: slurm tests must run)", pytrace=False)
    pytest.skip(reason)


def cluster_up() -> bool:
    # No Slurm client may run without slurm.conf (it would look the controller up in DNS).
    if not SLURM_CONF.is_file() or shutil.which("sinfo") is None:
        return False
    return subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True,
                          timeout=60).returncode == 0


@pytest.fixture(scope="module")
def slurm():
    """A single-node cluster; started (as root) with scripts/slurm.sh if none answers.

    Left running afterwards: with Slurm installed and its controller down, every later
    `snakemake` call would wait ~10 s on the plugin's `scontrol show config`.
    """
    if not cluster_up():
        if os.geteuid() != 0:
            unavailable("no Slurm cluster, and not root to start one: "
                        "`sudo bash scripts/slurm.sh start`")
        res = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                             timeout=900)
        if res.returncode != 0 or not cluster_up():
            unavailable(f"scripts/slurm.sh start failed: {res.stderr.strip()[-1500:]}")


@pytest.fixture(scope="module")
def runs(slurm, tmp_path_factory):
    """(project built through Slurm, same project built locally, Snakemake's Slurm output,
    the jobs a dry run planned)."""
    base = tmp_path_factory.mktemp("slurm")
    (base / "slurm").mkdir()
    (base / "local").mkdir()
    remote = tp.make_project(base / "slurm")
    local = tp.make_project(base / "local")
    planned = planned_jobs(remote, TARGET)
    # Another job on the 2-CPU node would leave this run's jobs pending until the timeout.
    foreign = queue()
    if foreign:
        pytest.fail("the Slurm queue is not empty; this run's jobs would wait behind:\n"
                    + "\n".join(foreign) + "\nscancel them, or `bash scripts/slurm.sh stop && "
                    "bash scripts/slurm.sh start` (a controller it starts has an empty queue)",
                    pytrace=False)
    cmd = ["timeout", "-s", "INT", "-k", "60", str(RUN_TIMEOUT_S),
           "snakemake", "--profile", "profiles/slurm", TARGET]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=remote, env=tp.env(remote), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # Meanwhile the same DAG locally: the Slurm run mostly waits on polling.
        tp.run(local, "snakemake", "--cores", "2", TARGET)
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S + 120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Snakemake cancels its Slurm jobs
            proc.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, (f"Slurm run failed ({proc.returncode}) after {elapsed:.0f}s:\n"
                                  + out[-8000:] + "\nqueue at the end:\n" + "\n".join(queue()))
    return remote, local, out, planned


def test_every_job_ran_through_slurm(runs):
    remote, _, out, planned = runs
    # the pool's repositories and the SFT repository (its oracle trajectories feed SFT)
    assert planned.get("split") == 1 and planned.get("validate") == len(tp.TINY_REPOS) + 1, planned
    submitted = {int(jobid): Path(log) for jobid, log in SUBMITTED.findall(out)}
    per_rule: dict[str, int] = {}
    for log in submitted.values():
        rule = next(p for p in log.parts if p.startswith("rule_"))[len("rule_"):]
        per_rule[rule] = per_rule.get(rule, 0) + 1
    assert per_rule == planned, out[-4000:]  # every planned job was an sbatch job
    # Snakemake's per-job Slurm log (kept: slurm-keep-successful-logs) shows the job step ran
    for jobid, log in submitted.items():
        assert log.is_relative_to(remote / ".snakemake" / "slurm_logs"), log
        text = log.read_text()
        assert "localrule " in text and "Finished jobid" in text, f"job {jobid}:\n{text[-2000:]}"
    # and Slurm itself recorded each job as COMPLETED, in this project's directory
    states = slurm_states(remote, set(submitted))
    assert states == {jobid: "COMPLETED" for jobid in submitted}


def queue() -> list[str]:
    """Jobs Slurm holds pending or running: 'id state elapsed workdir (reason)' each."""
    out = subprocess.run(["squeue", "--noheader", "--states=PENDING,RUNNING,CONFIGURING",
                          "--format=%i %T %M %Z (%r)"],
                         capture_output=True, text=True, timeout=60).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def slurm_states(project: Path, jobids: set[int]) -> dict[int, str]:
    """Slurm's final state of `jobids` run in `project`: the jobcomp log, else squeue."""
    states: dict[int, str] = {}
    if JOBCOMP_LOG.is_file():
        for jobid, state, workdir in JOBCOMP.findall(JOBCOMP_LOG.read_text()):
            if int(jobid) in jobids and Path(workdir) == project:
                states[int(jobid)] = state  # the last line wins (ids restart with a new state dir)
    if set(states) != jobids:  # no jobcomp log (a cluster not made by scripts/slurm.sh)
        out = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T|%Z"],
                             capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            jobid, state, workdir = line.strip().split("|", 2)
            if jobid.isdigit() and int(jobid) in jobids and Path(workdir) == project:
                states[int(jobid)] = state
    return states


def test_slurm_artifacts_equal_the_local_run(runs):
    remote, local, _, _ = runs
    digests = tp.artifact_digests(remote)
    assert "results/split/split.json" in digests
    assert {f"results/validated/{repo}.jsonl" for repo in tp.TINY_REPOS} <= set(digests)
    assert digests == tp.artifact_digests(local)
    # the manifests written on the Slurm node check out too
    tp.run(remote, "forgeline", "verify", "--no-touch", "--partial")  # built up to the split


def test_rerun_through_the_profile_does_nothing(runs):
    remote, _, _, _ = runs
    out = tp.run(remote, "timeout", "-s", "INT", "300", "snakemake", "--profile", "profiles/slurm",
                 "-n", TARGET).stdout
    assert "Nothing to be done" in out, out[-3000:]
