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


def test_a_command_runs_in_the_zygote_with_its_own_output_and_status(zygotes):
    direct, served = forgeline("config-get", "seed"), forgeline("config-get", "seed", "-v", zygotes=zygotes)
    assert served.returncode == direct.returncode == 0
    assert served.stdout == direct.stdout and direct.stdout.strip()
    assert f"running in a fork of the zygote in {zygotes}" in served.stderr
    bad_direct, bad = forgeline("config-get", "no.such.key"), forgeline("config-get", "no.such.key", zygotes=zygotes)
    assert bad.returncode == bad_direct.returncode != 0
    assert [line.split(" ", 2)[2] for line in bad.stderr.splitlines()] == \
        [line.split(" ", 2)[2] for line in bad_direct.stderr.splitlines()]  # after the time


def test_another_environment_is_refused_and_run_here(zygotes):
    out = forgeline("config-get", "seed", "-v", zygotes=zygotes, PYTHONWARNINGS="ignore")
    assert out.returncode == 0 and out.stdout == forgeline("config-get", "seed").stdout
    assert "refused this command (environment differs: PYTHONWARNINGS)" in out.stderr
    assert "running in a fork of the zygote" not in out.stderr


def test_another_thread_count_or_no_zygote_runs_here_silently(zygotes, tmp_path):
    for out in (forgeline("config-get", "seed", "-v", zygotes=zygotes, OMP_NUM_THREADS="2"),
                forgeline("config-get", "seed", "-v", zygotes=tmp_path)):
        assert out.returncode == 0 and "zygote" not in out.stderr
