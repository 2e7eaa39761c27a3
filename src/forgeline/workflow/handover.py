"""The caller's side of a zygote (forgeline.workflow.zygote): `forgeline COMMAND` handed to a
warm process that has torch, transformers and PEFT imported, where one serves.

A job finds its zygote through FORGELINE_ZYGOTE (their folder) and OMP_NUM_THREADS (which
Snakemake sets to the job's `threads`). `hand_over` sends the command, its working folder,
environment, umask, resource limits and stdin/stdout/stderr (SCM_RIGHTS), forwards the signals
it gets to the run's process group, and exits as the run did. It returns (the command runs in
the caller, as if no zygote were there) when no zygote answers, under Slurm (a job's CPU must
stay in its allocation), in a run of a zygote, and when the zygote refuses: an environment that
differs from its own beyond `PER_RUN`, or a resource limit it may not raise to the caller's.
No third-party import (the message framing is the containers' pytest zygote's):
`forgeline.cli` imports this module before anything heavy.
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import sys

# the framing of the containers' pytest zygote (length-prefixed JSON, the fds with the first bytes)
from forgeline.sandbox.container.pytest_zygote import _recv, _send

ENV = "FORGELINE_ZYGOTE"
# what Snakemake sets for a job of `threads` threads (snakemake.shell)
THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# applied to the run as they come: nothing imported reads them at import time (the shell's, the
# temp folder's, the terminal's size)
PER_RUN = {"PWD", "OLDPWD", "SHLVL", "_", "TMPDIR", "TMP", "TEMP", "TEMPDIR", "COLUMNS", "LINES", ENV}
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# every resource limit this platform has, by name (RLIMIT_OFILE is RLIMIT_NOFILE under another)
RLIMITS = {getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")}
_serving = False  # True in a run: its own `forgeline` call must not hand itself over again


def serving() -> bool:
    """Whether this process is a run of a zygote."""
    return _serving


def mark_serving() -> None:
    """Called in a zygote's run before it calls forgeline.cli.main: run here, never hand over."""
    global _serving
    _serving = True


def rlimits() -> dict[str, list[int]]:
    """This process's resource limits, {name: [soft, hard]}."""
    return {name: list(resource.getrlimit(which)) for which, name in sorted(RLIMITS.items())}


def socket_path(folder: str, threads: str | int) -> str:
    return os.path.join(folder, f"threads-{threads}.sock")


def hand_over(argv: list[str]) -> None:
    """Run `forgeline argv` in the zygote and exit as it did; returns where none will run it."""
    folder = os.environ.get(ENV)
    if not folder or _serving or "SLURM_JOB_ID" in os.environ:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path(folder, os.environ.get("OMP_NUM_THREADS", "default")))
        umask = os.umask(0)
        os.umask(umask)
        _send(sock, {"argv": [sys.argv[0], *argv], "cwd": os.getcwd(), "env": dict(os.environ),
                     "umask": umask, "rlimits": rlimits()}, fds=(0, 1, 2))
        answer, _ = _recv(sock)
    except OSError:
        answer = None
    if answer is None or "pid" not in answer:
        if answer and answer.get("refused"):
            print(f"forgeline: the zygote in {folder} refused this command ({answer['refused']}); "
                  f"running it here", file=sys.stderr)
        sock.close()
        return None
    run = answer["pid"]

    def forward(signum, frame):
        try:
            os.killpg(run, signum)
        except OSError:
            pass

    for sig in SIGNALS:
        signal.signal(sig, forward)
    while True:  # the run has started: from here on this process ends as it ends
        try:
            answer, _ = _recv(sock)
            break
        except InterruptedError:
            continue
        except OSError:
            answer = None
            break
    sys.stdout.flush()
    sys.stderr.flush()
    if answer is not None and answer.get("signal"):  # end as the run ended: by its signal
        if answer["signal"] != signal.SIGKILL:
            signal.signal(answer["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), answer["signal"])
    os._exit(1 if answer is None else int(answer["exit"]))
