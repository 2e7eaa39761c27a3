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


def _run_of(zygote_pid: int) -> int | None:
    """The pid of the zygote's run (the child of a handler, itself the zygote's child)."""
    def children(pid):
        out = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
        return out
    for handler in children(zygote_pid):
        for run in children(handler):
            return run
    return None


def test_the_run_has_the_callers_resource_limits_and_a_higher_one_is_refused(zygotes, tmp_path):
    import resource
    fifo = tmp_path / "tasks.jsonl"
    os.mkfifo(fifo)  # the run blocks opening it: its limits can be read meanwhile
    cmd = [FORGELINE, *FAILING]
    cmd[cmd.index("/nonexistent/tasks.jsonl")] = str(fifo)
    env = dict(ENVIRONMENT, **{name: "1" for name in zygote.THREAD_VARS}, **{zygote.ENV: str(zygotes)})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = (min(soft, 4096) - 3, min(hard, 4096) - 1)

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, wanted)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, preexec_fn=lower, stderr=subprocess.PIPE, text=True)
    zygote_pid = int((zygotes / "threads-1.pid").read_text())
    try:
        deadline = time.monotonic() + 60
        while (run := _run_of(zygote_pid)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "no run in the zygote"
            time.sleep(0.05)
        limits = Path(f"/proc/{run}/limits").read_text()
        assert f"Max open files            {wanted[0]:<21}{wanted[1]:<21}files" in limits, limits
        assert "Max core file size        0                    0                    bytes" in limits
        with open(fifo, "w"):  # an empty task file: the stage stops on it, as it would alone
            pass
        assert proc.wait(timeout=120) == 1
    finally:
        proc.kill()
        proc.wait()
    assert f"running in a fork of the zygote in {zygotes}" in proc.stderr.read()


def test_a_limit_the_zygote_cannot_take_is_refused(zygotes):
    """A request (the handover's own message) whose open-files limit is above what the kernel
    allows any process (fs.nr_open): the zygote answers that it refuses, and forks no run."""
    import socket
    from forgeline.workflow import handover
    too_many = int(Path("/proc/sys/fs/nr_open").read_text()) + 1
    limits = dict(handover.rlimits(), RLIMIT_NOFILE=[too_many, too_many])
    env = {"TZ": "UTC", **ENVIRONMENT, **{name: "1" for name in zygote.THREAD_VARS}}  # as cli sends it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(zygote.socket_path(str(zygotes), 1))
        handover._send(sock, {"argv": [FORGELINE, *FAILING], "cwd": str(ROOT), "env": env,
                              "umask": 0o022, "rlimits": limits}, fds=(0, 1, 2))
        answer, _ = handover._recv(sock)
    assert answer == {"refused": "cannot take the caller's RLIMIT_NOFILE"}
