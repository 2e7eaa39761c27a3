"""`forgeline COMMAND` run in a fork of a warm process (a zygote), so a job skips the ~3.5 s of
CPU that importing torch, transformers and PEFT costs it (on 2 cores, ~30 torch jobs a run).

`make run` starts one zygote per torch thread count its jobs use (`start`) and stops them after
Snakemake (`stop`); a job finds its zygote through FORGELINE_ZYGOTE (their folder) and
OMP_NUM_THREADS (which Snakemake sets to the job's `threads`). Standard library only (its
message framing is the containers' pytest zygote's): every `forgeline` call imports this
module before anything else.

Zygote (`serve`): sets the thread variables Snakemake gives a job of its thread count, imports
the third-party libraries the stages load (never forgeline's own stage code: a job reads it
from disk as a fresh process would), listens on DIR/threads-N.sock, and per request forks a
handler that forks the run, sends its pid, then its exit status (128+N for signal N). The run
gets the request's stdin, stdout and stderr (SCM_RIGHTS), directory, umask, environment and
argv, a session of its own, and returns to this module's `__main__`, which runs
`forgeline.cli.main` and exits as the interpreter exits (threads joined, atexit handlers run).
Each run is a fresh fork: nothing of one run reaches the next.

Client (`hand_over`): sends the command and its context, forwards the signals it gets to the
run's process group, and exits as the run did; the handler kills the run when the client is
gone. It returns None (the command runs in the caller, as if no zygote were there) when no
zygote answers, under Slurm (a job's CPU must stay in its allocation), and when the zygote
refuses: an environment that differs from its own beyond the thread, temp-folder and shell
variables (what it imported may have read them).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time

# the framing of the containers' pytest zygote (length-prefixed JSON, the fds with the first bytes)
from forgeline.sandbox.container.pytest_zygote import _recv, _send

ENV = "FORGELINE_ZYGOTE"
# what Snakemake sets for a job of `threads` threads (snakemake.shell)
THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# applied to the run as they come: nothing imported reads them at import time (the shell's, the
# temp folder's, the terminal's size)
PER_RUN = {"PWD", "OLDPWD", "SHLVL", "_", "TMPDIR", "TMP", "TEMP", "TEMPDIR", "COLUMNS", "LINES", ENV}
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.models.qwen3.modeling_qwen3",
           "transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto", "peft",
           "safetensors.torch", "docker", "tqdm", "yaml", "jsonschema")
IDLE_EXIT_S = 3600.0  # a zygote nobody stopped goes away after this long without a request
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_serving = False  # True in a run: its own `forgeline` call must not hand itself over again
_imports_set: dict[str, str] = {}  # the variables the zygote's imports set


def serving() -> bool:
    """Whether this process is a run of a zygote."""
    return _serving


def socket_path(folder: str, threads: str | int) -> str:
    return os.path.join(folder, f"threads-{threads}.sock")


def _comparable(env) -> dict:
    return {k: v for k, v in env.items() if k not in PER_RUN}


# -- the client --------------------------------------------------------------------------------

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
                     "umask": umask}, fds=(0, 1, 2))
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


# -- the zygote --------------------------------------------------------------------------------

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
    run = os.fork()
    if run == 0:
        os.setsid()  # its own process group, at once: the client forwards signals to it
        conn.close()
        return req, fds
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": run})
    pidfd = os.pidfd_open(run)
    import select
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
    global _serving
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
            _serving = True
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
