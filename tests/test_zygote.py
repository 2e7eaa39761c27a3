"""A job's `forgeline` command run in a fork of a warm zygote: the same output, exit status and
files as run in its own process; refused, and run in the caller, where the zygote's imports may
have seen another environment."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forgeline.workflow import zygote

ROOT = Path(__file__).resolve().parents[1]
FORGELINE = str(Path(sys.executable).with_name("forgeline"))
ENVIRONMENT: dict[str, str] = {}


@pytest.fixture(scope="module")
def zygotes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zygote")
    saved = dict(os.environ)
    # the environment Snakemake would give every job (the tests' process changes its own later)
    ENVIRONMENT.update((k, v) for k, v in saved.items() if k != "PYTEST_CURRENT_TEST")
    os.environ.clear()
    os.environ.update(ENVIRONMENT)
    try:
        zygote.start(str(folder), [1])  # sets FORGELINE_ZYGOTE, as `make run` does for Snakemake
    finally:
        os.environ.clear()
        os.environ.update(saved)
    sock = Path(zygote.socket_path(str(folder), 1))
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert time.monotonic() < deadline, "the zygote did not answer within 120 s"
        time.sleep(0.2)
    pid = int((folder / "threads-1.pid").read_text())
    # torch, transformers and PEFT imported, and no thread started: a fork copies no pool
    assert "Threads:\t1\n" in Path(f"/proc/{pid}/status").read_text()
    yield folder
    zygote.stop(str(folder))
    assert not list(folder.glob("*.pid")) and not list(folder.glob("*.sock"))


def forgeline(*args, zygotes=None, **env):
    full = dict(ENVIRONMENT)
    full.update({name: "1" for name in zygote.THREAD_VARS})  # a one-thread job, as Snakemake sets it
    if zygotes is not None:
        full[zygote.ENV] = str(zygotes)
    full.update(env)
    return subprocess.run([FORGELINE, *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300)


# a stage that loads torch (cli.WARM), stopped early: its tasks file does not exist
FAILING = ("difficulty", "-v", "--tasks", "/nonexistent/tasks.jsonl", "--policy", "/nonexistent/policy",
           "--out", "/nonexistent/pool.jsonl", "--report", "/nonexistent/report.json",
           "--episodes", "/nonexistent/episodes.jsonl")


def test_a_command_runs_in_the_zygote_with_its_own_output_and_status(zygotes):
    direct, served = forgeline("evaluate", "--help"), forgeline("evaluate", "--help", zygotes=zygotes)
    assert served.returncode == direct.returncode == 0
    assert served.stdout == direct.stdout and "--panel" in direct.stdout
    bad_direct, bad = forgeline(*FAILING), forgeline(*FAILING, zygotes=zygotes)
    assert bad.returncode == bad_direct.returncode == 1  # the traceback's exit, as Python's
    assert f"running in a fork of the zygote in {zygotes}" in bad.stderr
    assert bad.stderr.splitlines()[-1] == bad_direct.stderr.splitlines()[-1] == \
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/tasks.jsonl'"


def test_another_environment_is_refused_and_run_here(zygotes):
    out = forgeline(*FAILING, zygotes=zygotes, PYTHONWARNINGS="ignore")
    assert out.returncode == 1 and out.stderr.splitlines()[-1].startswith("FileNotFoundError")
    assert "refused this command (environment differs: PYTHONWARNINGS)" in out.stderr
    assert "running in a fork of the zygote" not in out.stderr


def test_other_commands_thread_counts_or_no_zygote_run_here_silently(zygotes, tmp_path):
    for out in (forgeline(*FAILING, zygotes=zygotes, OMP_NUM_THREADS="2"),
                forgeline(*FAILING, zygotes=tmp_path),
                forgeline("config-get", "seed", "-v", zygotes=zygotes)):  # no torch: its own process
        assert "zygote" not in out.stderr
