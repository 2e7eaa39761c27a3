"""`python3 -m pytest ...` in a task container, run in a fork of a process that has imported
pytest already (a zygote), so the agent's test runs skip the ~0.15 s `import pytest` costs.

In every task image (envs/repo.Dockerfile; forgeline.sandbox.images adds this folder to the
build context) as /usr/local/lib/forgeline/pytest_zygote.py, called from the site-packages hook
`forgeline_pytest_zygote.pth` beside it in the source. Python runs that line in every interpreter
that imports `site`, before the main module; it reads this file only when the interpreter was
started exactly as `python3 -m pytest ...` (sys.orig_argv: no interpreter options) and
FORGELINE_PYTEST_ZYGOTE is not 0. So the process the shell started is /usr/bin/python3 itself,
with its own argv[0] and sys.executable, and every other start is untouched. Python 3.10+,
standard library only; not imported by forgeline on the host.

Client (`hook`): connects to the caller's zygote at /tmp/.forgeline-pytest-<uid>.sock, starting
it first where there is none (once: a lock file), sends the arguments, the working directory,
the environment, the umask, the resource limits and its stdin, stdout and stderr (SCM_RIGHTS),
forwards the signals it gets to the run, and exits as the run did. Whenever the zygote cannot
serve exactly what the interpreter would have done, the hook removes every module it imported
from sys.modules and returns: the interpreter goes on to run pytest itself, as if the hook were
not there:
- the environment differs from the zygote's (beyond PWD, OLDPWD, SHLVL, _): PYTHONPATH and the
  PYTHON* flags shaped what it imported;
- a module the zygote imported is shadowed by a file or folder of that name in the working
  directory or a PYTHONPATH folder (both come before the standard library on sys.path);
- no zygote answers (it was killed, or would not start: a module of its own under a writable
  folder, a full process table).
Zygote (`--serve PATH`): imports pytest and its built-in plugins, listens, and per request forks
a handler that forks the run: the request's fds as 0/1/2, its directory, environment, umask and
limits, sys.path[0] = the directory (what -m puts there), then `runpy` runs pytest as __main__;
the handler sends the run's pid, then its exit status (128+N for signal N). Each run is a fresh
fork: nothing of one run reaches the next.
"""
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
import time

PYTHON = "/usr/bin/python3"
VOLATILE = {"PWD", "OLDPWD", "SHLVL", "_"}
LIMITS = ["RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_NOFILE",
          "RLIMIT_AS", "RLIMIT_NPROC"]
WRITABLE = ("/testbed", "/tmp", "/home", "/var/tmp", "/dev/shm")


def _send(sock, obj, fds=()):
    data = json.dumps(obj).encode()
    msg = struct.pack(">I", len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], list(fds))
    else:
        sock.sendall(msg)


def _recv(sock, with_fds=False):
    """One message (and the fds sent with its first bytes), or (None, []) at the end."""
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, 3)
    else:
        head, fds = sock.recv(4), []
    while head and len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            break
        head += more
    if len(head) < 4:
        return None, fds
    n, data = struct.unpack(">I", head)[0], b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            return None, fds
        data += more
    return json.loads(data), fds


def _comparable(env):
    return {k: v for k, v in env.items() if k not in VOLATILE}


# -- the client --------------------------------------------------------------------------------

def _connect(path, lock_path):
    """A connection to the zygote, started first if none answers; None when none will."""
    def attempt():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            return None

    sock = attempt()
    if sock is not None:
        return sock
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = attempt()
        if sock is not None:
            return sock
        devnull = os.open(os.devnull, os.O_RDWR)
        pid = os.fork()
        if pid == 0:  # the zygote: detached, its own session, nothing of the caller's stdio
            os.setsid()
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(PYTHON, ["python3", os.path.abspath(__file__), "--serve", path])
        os.close(devnull)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            sock = attempt()
            if sock is not None:
                return sock
            if os.waitpid(pid, os.WNOHANG)[0]:  # it exited: it will not serve
                return None
            time.sleep(0.005)
    return None


def client(args):
    """Run `args` in the zygote and exit as the run did; None where it will not serve them."""
    uid = os.getuid()
    path = "/tmp/.forgeline-pytest-%d.sock" % uid
    sock = _connect(path, path + ".lock")
    if sock is None:
        return None
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in LIMITS if hasattr(resource, name)}
    umask = os.umask(0)
    os.umask(umask)
    try:
        _send(sock, {"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask,
                     "limits": limits}, fds=(0, 1, 2))
        answer, _ = _recv(sock)
    except OSError:
        answer = None
    if answer is None or "pid" not in answer:
        sock.close()
        return None
    run = answer["pid"]

    def forward(signum, frame):
        try:
            os.kill(run, signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    while True:  # the run has started: from here on this process ends as it ends, never plain
        try:
            answer, _ = _recv(sock)
            break
        except InterruptedError:
            continue
        except OSError:
            answer = None
            break
    status = 1 if answer is None else int(answer["status"])
    if status > 128 and status - 128 in set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}:
        signal.signal(status - 128, signal.SIG_DFL)  # end as the run ended: by its signal
        os.kill(os.getpid(), status - 128)
    if status > 128 and status - 128 == signal.SIGKILL:
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdout.flush()
    os._exit(status)


# -- the zygote ------------------------------------------------------------------------------

def _shadowed(names, folders):
    """Top-level module names of the zygote that a file or folder in `folders` would shadow."""
    found = set()
    for folder in folders:
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in entries:
            name = entry[:-3] if entry.endswith(".py") else entry.split(".")[0]
            if name in names:
                found.add(name)
    return found


def _run(req, fds, conn):
    """The run: pytest as `python3 -m pytest` would run it, in this fork."""
    import atexit
    import runpy
    import traceback
    conn.close()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    for name, (soft, hard) in req["limits"].items():
        try:
            if resource.getrlimit(getattr(resource, name)) != (soft, hard):
                resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    os.environ.clear()
    os.environ.update(req["env"])
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *req["args"]]
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def _handle(conn, own_env, names, python_path):
    req, fds = _recv(conn, with_fds=True)
    if req is None or len(fds) != 3:
        return
    if _comparable(req["env"]) != _comparable(own_env):
        _send(conn, {"refuse": "environment"})
        return
    if _shadowed(names, [req["cwd"], *python_path]):
        _send(conn, {"refuse": "shadowed"})
        return
    pid = os.fork()
    if pid == 0:
        _run(req, fds, conn)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    while True:
        try:
            _, st = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
    _send(conn, {"status": code})


def serve(path):
    import importlib
    importlib.import_module("pytest")  # the point of the zygote
    import _pytest.config
    for name in _pytest.config.default_plugins:  # what every run imports while it configures
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass
    here = os.path.dirname(os.path.abspath(__file__))
    for mod in list(sys.modules.values()):
        origin = getattr(mod, "__file__", None) or ""
        if origin.startswith(WRITABLE) and not origin.startswith(here):
            sys.exit("forgeline pytest zygote: %s comes from a writable folder (%s)" % (mod.__name__, origin))
    names = {name.partition(".")[0] for name in sys.modules} - {"__main__"}
    python_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    own_env = dict(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = "%s.%d" % (path, os.getpid())
    listener.bind(tmp)
    listener.listen(16)
    os.rename(tmp, path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _handle(conn, own_env, names, python_path)
            finally:
                os._exit(0)
        conn.close()


# -- the hook --------------------------------------------------------------------------------

def hook(before):
    """From the .pth line, in an interpreter started as `python3 -m pytest ARGS`: ARGS run in the
    zygote and this process exits as they did; where they cannot, the modules imported since
    `before` (this file's and the client's) leave sys.modules, so the interpreter's own run
    imports what it would have imported without the hook."""
    try:
        client(sys.orig_argv[3:])
    except Exception:
        pass
    for name in set(sys.modules) - before:
        del sys.modules[name]


if __name__ == "__main__":
    serve(sys.argv[2])  # pytest_zygote.py --serve PATH (the hook starts it so)
elif __name__ == "forgeline_pytest_zygote" and sys.orig_argv[1:3] == ["-m", "pytest"]:
    hook(globals()["_BEFORE"])  # the .pth line puts sys.modules as it found them there
