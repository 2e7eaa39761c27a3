"""Warm processes (zygotes) that run the torch stages' `forgeline` commands in forks, so a job
skips the CPU that importing torch, transformers and PEFT costs it (~4.6 s a job here,
bench/zygote_jobs.py; a run has 28 such jobs). The caller's side: forgeline.workflow.handover.

`make run` starts one zygote per job thread count (`start DIR 1 CORES`) and stops them after
Snakemake (`stop DIR`). A zygote (`serve`) sets the thread variables Snakemake gives a job of
its thread count, imports the third-party libraries the stages load (never forgeline's own
stage code: a run reads it from disk as a fresh process would), freezes what it imported out
of the collector, listens on DIR/threads-N.sock, and per request forks a handler that forks
the run, sends its pid, then how it ended (its exit status or its signal). The run gets the
request's stdin, stdout and stderr, directory, umask, environment, resource limits and argv, a
session of its own, and returns to this module's `__main__`, which runs `forgeline.cli.main`
and exits as the interpreter exits (threads joined, atexit handlers run). Each run is a fresh fork: nothing of
one run reaches the next. The handler kills the run when its caller is gone.
"""
from __future__ import annotations

import os
import resource
import select
import signal
import socket
import sys
import time

from forgeline.workflow import handover
from forgeline.workflow.handover import ENV, PER_RUN, RLIMITS, THREAD_VARS, _recv, _send, socket_path

PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.models.qwen3.modeling_qwen3",
           "transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto", "peft",
           "safetensors.torch", "docker", "tqdm", "yaml", "jsonschema")
IDLE_EXIT_S = 3600.0  # a zygote nobody stopped goes away after this long without a request
_imports_set: dict[str, str] = {}  # the variables the zygote's imports set


def _comparable(env) -> dict:
    return {k: v for k, v in env.items() if k not in PER_RUN}


def _take_rlimits(limits: dict) -> list[str]:
    """Give this handler (and so the run it forks) the caller's resource limits; the names of
    those it may not take (a hard limit above its own, without the privilege to raise it)."""
    unfit = []
    for which, name in RLIMITS.items():
        if name not in limits:
            continue
        try:  # a malformed pair is refused as an unfit one
            want = tuple(limits[name])
            if resource.getrlimit(which) != want:
                resource.setrlimit(which, want)
        except (TypeError, ValueError, OSError):
            unfit.append(name)
    return unfit


def _handle(conn: socket.socket, own_env: dict):
    """In the handler (a fork per request): refuse, or fork the run and report on it. Returns
    the request in the run; never returns in the handler."""
    req, fds = _recv(conn, with_fds=True)
    if req is None or len(fds) != 3:
        os._exit(0)
    diff = sorted(set(_comparable(req["env"]).items()) ^ set(_comparable(own_env).items()))
    if diff:
        names = sorted({k for k, _ in diff})
        _send(conn, {"refused": f"environment differs: {', '.join(names[:5])}"})
        os._exit(0)
    unfit = _take_rlimits(req.get("rlimits", {}))
    if unfit:
        _send(conn, {"refused": f"cannot take the caller's {', '.join(unfit)}"})
        os._exit(0)
    run = os.fork()
    if run == 0:
        os.setsid()  # its own process group, at once: the client forwards signals to it
        conn.close()
        return req, fds
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": run})
    pidfd = os.pidfd_open(run)
    while True:
        ready, _, _ = select.select([pidfd, conn], [], [])
        if pidfd in ready:
            break
        if not conn.recv(1):  # the client is gone (killed): so is its command
            try:
                os.killpg(run, signal.SIGKILL)
            except OSError:
                pass
            break
    _, status = os.waitpid(run, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        _send(conn, {"signal": -code} if code < 0 else {"exit": code})
    except OSError:
        pass
    os._exit(0)


def serve(folder: str, threads: int):
    """Preload, listen, and fork per request; returns (request, fds) in a run."""
    os.environ.setdefault("TZ", "UTC")  # as forgeline.cli sets it, before anything is imported
    for name in THREAD_VARS:
        os.environ[name] = str(threads)
    import importlib
    own_env = dict(os.environ)  # what the imports see, as a job's own would
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here: a run imports what it needs itself
            pass
    # what the imports set (torch: TORCHINDUCTOR_CACHE_DIR), a run gets as a fresh process would
    global _imports_set
    _imports_set = {k: v for k, v in os.environ.items() if own_env.get(k) != v}
    # The imported objects out of the collector's reach: else every collection in a run walks
    # them all, and touches their pages, which the fork then copies (a generate job through the
    # zygote cost 1.2 s more CPU than alone, not less)
    import gc
    gc.collect()
    gc.freeze()
    path = socket_path(folder, threads)
    os.makedirs(folder, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(16)
    os.replace(tmp, path)  # answers only once everything is imported
    listener.settimeout(10.0)
    last = time.monotonic()
    while time.monotonic() - last < IDLE_EXIT_S:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # finished handlers
                pass
        except ChildProcessError:
            pass
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        last = time.monotonic()
        conn.settimeout(None)
        if os.fork() == 0:
            listener.close()
            handover.mark_serving()
            return _handle(conn, own_env)
        conn.close()
    listener.close()
    return None


def _run(req: dict, fds: list[int]) -> int:
    """The command, as a fresh `forgeline` process would run it."""
    import tempfile
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ.update({k: v for k, v in _imports_set.items() if k not in req["env"]})
    tempfile.tempdir = None  # from the request's TMPDIR
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # the script's folder, as for a fresh one
    from forgeline.cli import main
    return main(sys.argv[1:])


def start(folder: str, thread_counts: list[int]) -> None:
    """One detached zygote per thread count (each answers once its imports are done; until then
    a command runs in its caller), with the environment of this process plus FORGELINE_ZYGOTE,
    as the jobs that will call it get it."""
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    os.environ[ENV] = folder
    for threads in sorted(set(thread_counts)):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(sys.executable, [sys.executable, "-m", __name__, "serve", folder, str(threads)])
        with open(os.path.join(folder, f"threads-{threads}.pid"), "w") as f:
            f.write(f"{pid}\n")


def stop(folder: str) -> None:
    """Stop the zygotes `start` left in `folder` (the runs they serve go on)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        if name.endswith(".pid"):
            try:
                with open(os.path.join(folder, name)) as f:
                    os.kill(int(f.read()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
            os.unlink(os.path.join(folder, name))
        elif name.endswith(".sock"):
            os.unlink(os.path.join(folder, name))


def main(argv: list[str]) -> int:
    usage = "usage: python -m forgeline.workflow.zygote start DIR THREADS... | stop DIR | serve DIR THREADS"
    if len(argv) >= 3 and argv[0] == "start":
        start(argv[1], [int(t) for t in argv[2:]])
    elif len(argv) == 2 and argv[0] == "stop":
        stop(argv[1])
    elif len(argv) == 3 and argv[0] == "serve":
        served = serve(argv[1], int(argv[2]))
        if served is not None:
            return _run(*served)
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    # `-m` put the working folder first on sys.path; a `forgeline` process has the script's there
    sys.path[0] = os.path.dirname(sys.executable)
    # a run returns here from `serve`; it then exits as the interpreter does
    from forgeline.workflow import zygote
    sys.exit(zygote.main(sys.argv[1:]))
