"""The docker backend: each session is a fresh, locked-down container from the repo's image.

A container gets no network (loopback only), a memory, CPU and process-count limit, a
read-only root file system and size-limited tmpfs mounts for the only writable places (/testbed,
/tmp, $HOME), so a fork bomb, a memory hog or a disk filler hits a limit of its own container and
nothing else. Task code runs as the user `forgeline` with no capabilities (no-new-privileges).
PID 1 is a small Python init (INIT, root) that runs every command: the host sends it over the
container's attached stdin, INIT forks it as the sandbox user and streams its output back (one
`docker exec` per command cost ~10x the CPU). INIT reaps orphans and, when the HOST sends it
SIGUSR1, SIGKILLs every other process in the container: that is how a command that runs past its
time limit is stopped together with everything it forked, even when the process table is full.

Every container carries the labels `forgeline.session=<uuid>` and `forgeline.owner=<host>:<pid>`.
A session's container is removed on every path: close(), timeout, exception, Ctrl-C (try/finally),
interpreter exit (atexit) and SIGTERM (turned into SystemExit when nobody else handles it);
`remove_leftovers()` removes what a killed process (SIGKILL) left behind, and the first
DockerSandbox of every process runs it: containers whose owner on this host is gone. Those of
another host's processes (an engine shared by Slurm nodes) are kept: this host cannot tell.

Speed (machine CPU, idle, bench/sandbox_commands.py): a command ~8 ms, a session ~0.34 s, a
fresh test run ~0.7 s. Starting a container costs ~0.3-1 s of wall time, so the sandbox keeps `warm` started, never-used
containers per image ready (started in the background while the previous one works) and
removes finished run_tests containers in the background. A fresh container is still fresh:
nothing ever ran in it.

Options (constructor keywords; config keys under `sandbox.docker`, defaults in OPTIONS):
    memory_mb: 1024     memory (and memory+swap) limit of one container
    cpus: 1.0           CPU limit (nano_cpus)
    pids: 256           process-count limit (fork bombs stop here)
    scratch_mb: 256     size of each of the tmpfs mounts /testbed and /tmp
    output_limit: 64000 bytes of a command's output kept (head and tail)
    warm: 1             started spare containers kept per image (0: start on demand), never
                        more than a caller said it will still ask for (`expect`)
"""
from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import os
import signal
import struct
import threading
import time
import uuid
import weakref
from typing import Sequence

from forgeline.sandbox.base import (CPU_POLL_S, WALL_BACKSTOP, ExecResult, PatchError, Sandbox, SandboxError,
                                    Session, TaskEnv, TestRun)
from forgeline.sandbox.grading import parse_results, pytest_shell
from forgeline.sandbox.engine import connect

log = logging.getLogger(__name__)

OPTIONS = {"memory_mb": 1024, "cpus": 1.0, "pids": 256, "scratch_mb": 256, "output_limit": 64_000,
           "warm": 1}
USER = "forgeline"
UID = 1000
LABEL_SESSION = "forgeline.session"
LABEL_OWNER = "forgeline.owner"
SETUP_TIMEOUT_S = 60.0
KILL_GRACE_S = 10.0  # after SIGUSR1, how long a killed command's stream may take to end
DIFF_LIMIT = 32 << 20  # bytes of `git diff` a session may return (beyond: SandboxError, not a cut)
RESULTS_FILE = "/tmp/forgeline-results.jsonl"  # a graded run's per-test reports (grading.RUNNER)
GIT_ENV = {"GIT_AUTHOR_NAME": "forgeline", "GIT_AUTHOR_EMAIL": "forgeline@localhost",
           "GIT_COMMITTER_NAME": "forgeline", "GIT_COMMITTER_EMAIL": "forgeline@localhost",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}

# PID 1 of every container (root), and the only way commands enter it. The host sends each
# command on PID 1's stdin (the container's attached stream: `docker exec` cost ~75 ms of the
# machine's CPU per command in runc, containerd and dockerd; a fork here costs ~1 ms); PID 1 runs
# it as the named user in a session of its own, stdin from the request, stdout and stderr into
# one pipe, and streams the output back framed, then the exit status (128+N for signal N) once
# the command has exited and its pipe is drained (what it left running in the background may go
# on, as with `docker exec`). PID 1 reaps orphans, and a thread of it obeys SIGUSR1 only from
# outside the container (si_pid 0): kill(-1, SIGKILL), which spares PID 1 and works with a full
# process table, again until no other process is left (not even a zombie); then it answers b"k",
# and starts or answers nothing before that, so the next command finds an empty container.
# The sandbox user cannot signal it at all (another uid): `kill -9 1` is refused.
# Requests: ">II" (JSON length, stdin length) + {"argv", "user", "cwd", "env", "stdin": bool} +
# stdin; answers: ">cI" (b"o" output | b"x" exit status | b"k" stop done, length) + payload.
INIT = """\
import json, os, pwd, select, signal, struct, threading, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
wake, wake_w = os.pipe()
os.set_blocking(wake_w, False)
stops = [0, 0]  # SIGUSR1s received, stops finished (all processes but INIT gone and reaped)
def stop_all():
    while True:
        if signal.sigwaitinfo({signal.SIGUSR1}).si_pid == 0:
            stops[0] += 1
            while True:
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                except OSError:
                    pass
                time.sleep(0.002)
            stops[1] += 1
            try:
                os.write(wake_w, b"k")
            except OSError:
                pass
threading.Thread(target=stop_all, daemon=True).start()
signal.signal(signal.SIGCHLD, lambda *a: None)
signal.set_wakeup_fd(wake_w)
def send(kind, data=b""):
    msg = struct.pack(">cI", kind, len(data)) + data
    while msg:
        msg = msg[os.write(1, msg):]
def spawn(req, data):
    pw = pwd.getpwnam(req["user"])
    env = dict(os.environ, **req["env"])
    if pw.pw_uid and env.get("HOME", "/root") == "/root":
        env["HOME"] = pw.pw_dir
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe() if req["stdin"] else (os.open(os.devnull, os.O_RDONLY), None)
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            for s in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(s, signal.SIG_DFL)
            os.setsid()
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.chdir(req["cwd"])
            os.execvpe(req["argv"][0], req["argv"], env)
        except BaseException as exc:
            os.write(2, ("forgeline: cannot run %s: %s\\n" % (req["argv"][0], exc)).encode())
        os._exit(127)
    os.close(out_w)
    os.close(in_r)
    if in_w is not None:
        os.set_blocking(in_w, False)
    return {"pid": pid, "out": out_r, "in": in_w, "stdin": bytearray(data), "status": None}
def finish(job):
    if job["out"] is not None:
        os.set_blocking(job["out"], False)
        try:
            while True:
                data = os.read(job["out"], 65536)
                if not data:
                    break
                send(b"o", data)
        except BlockingIOError:
            pass
        os.close(job["out"])
    if job["in"] is not None:
        os.close(job["in"])
    send(b"x", str(job["status"]).encode())
buf, job, reading, acked = bytearray(), None, True, 0
while True:
    stopping = stops[0] != stops[1]
    if job and job["status"] is not None and not stopping:
        finish(job)
        job = None
    if not stopping and acked != stops[1]:
        acked = stops[1]
        send(b"k")
    if job is None and not stopping and len(buf) >= 8:
        n, m = struct.unpack(">II", buf[:8])
        if len(buf) >= 8 + n + m:
            req, data = json.loads(bytes(buf[8:8 + n])), bytes(buf[8 + n:8 + n + m])
            del buf[:8 + n + m]
            try:
                job = spawn(req, data)
            except OSError as exc:  # e.g. a full process table: the command never started
                send(b"o", ("forgeline: cannot start %s: %s\\n" % (req["argv"][0], exc)).encode())
                send(b"x", b"126")
    rl, wl = [wake] + [0] * reading, []
    if job and job["out"] is not None:
        rl.append(job["out"])
    if job and job["in"] is not None:
        wl.append(job["in"])
    try:  # while a stop runs, poll: its zombies must be reaped for kill(-1) to find none
        r, w, _ = select.select(rl, wl, [], 0.01 if stopping else None)
    except InterruptedError:
        continue
    if wake in r:
        os.read(wake, 4096)
    if wake in r or stopping:
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            if job and pid == job["pid"]:
                job["status"] = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
    if job and job["in"] is not None and job["in"] in w:
        try:
            del job["stdin"][:os.write(job["in"], job["stdin"][:65536])]
        except OSError:
            del job["stdin"][:]
        if not job["stdin"]:
            os.close(job["in"])
            job["in"] = None
    if job and job["out"] is not None and job["out"] in r:
        data = os.read(job["out"], 65536)
        if data:
            send(b"o", data)
        else:
            os.close(job["out"])
            job["out"] = None
    if 0 in r:
        data = os.read(0, 65536)
        reading = bool(data)
        buf += data
"""


# Applies the patches (a JSON list on stdin) in order with `git apply`; on failure prints
# PATCH_FAILED and the failing index on the first line and exits 3. With argv[1] == "1", starts a
# fresh git history afterwards: the session's baseline, and no `git log -p` that would show the
# agent the patches. With argv[2], then becomes `bash -c argv[2]` (one command, not two, per test run).
PATCH_FAILED = "FORGELINE-PATCH-FAILED"
APPLY = f"""\
import json, os, subprocess, sys
for i, patch in enumerate(json.load(sys.stdin)):
    if not patch.strip():
        continue
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"],
                       input=patch.encode("utf-8", "surrogateescape"), capture_output=True)
    if r.returncode:
        sys.stdout.write(f"{PATCH_FAILED} {{i}}\\n")
        sys.stdout.flush()
        sys.stdout.buffer.write(r.stderr)
        sys.exit(3)
if sys.argv[1] == "1":
    cmd = "rm -rf .git && git init -q && git add -A && git commit -q -m baseline --allow-empty"
    if subprocess.run(["bash", "-c", cmd]).returncode:
        sys.exit(4)
if len(sys.argv) > 2:
    sys.stdout.flush()
    os.execvp("bash", ["bash", "-c", sys.argv[2]])
"""

# Where an engine on this host keeps a container's CPU time: cgroup v1's cpuacct.usage
# (nanoseconds) or v2's cpu.stat (usage_usec), under the cgroupfs and the systemd cgroup driver.
CGROUP_CPU_FILES = ("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage",
                    "/sys/fs/cgroup/cpu,cpuacct/docker/{id}/cpuacct.usage",
                    "/sys/fs/cgroup/cpuacct/system.slice/docker-{id}.scope/cpuacct.usage",
                    "/sys/fs/cgroup/docker/{id}/cpu.stat",
                    "/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat")
_cpu_warned = False


def container_cpu_clock(container_id: str):
    """A function that returns the container's CPU seconds so far (every process in it), or None
    where this host cannot read them (an engine elsewhere, another cgroup layout)."""
    for pattern in CGROUP_CPU_FILES:
        path = pattern.format(id=container_id)
        if os.path.exists(path):
            break
    else:
        return None
    if path.endswith("cpu.stat"):
        def clock() -> float:
            with open(path, "rb") as f:
                for line in f:
                    if line.startswith(b"usage_usec "):
                        return int(line.split()[1]) / 1e6
            raise OSError(f"{path} has no usage_usec")
    else:
        def clock() -> float:
            with open(path, "rb") as f:
                return int(f.read()) / 1e9
    return clock


# -- cleanup of whatever is still alive ----------------------------------------------------

_lock = threading.Lock()
_live_sessions: set["DockerSession"] = set()
_sandboxes: "weakref.WeakSet[DockerSandbox]" = weakref.WeakSet()
_OWNER = f"{os.uname().nodename}:{os.getpid()}"


def _close_all() -> None:
    for sandbox in list(_sandboxes):
        try:
            sandbox.close()
        except Exception:  # the interpreter is exiting: best effort, never raise
            pass
    with _lock:
        sessions = list(_live_sessions)
    for session in sessions:
        try:
            session.close()
        except Exception:
            pass


atexit.register(_close_all)


def _sigterm_to_exit() -> None:
    """SIGTERM (what Snakemake and Slurm send) raises SystemExit, so finally blocks and atexit run.
    Installed only from the main thread and only when nobody handles SIGTERM yet."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def handler(signum, frame):
            raise SystemExit(128 + signum)
        signal.signal(signal.SIGTERM, handler)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_containers(client) -> list:
    """Every container (running or not) that a forgeline sandbox made, on this engine. One that
    another process removes while the list is read is left out (the SDK inspects each)."""
    return client.containers.list(all=True, filters={"label": LABEL_SESSION}, ignore_removed=True)


def remove_leftovers(client, everything: bool = False) -> list[str]:
    """Remove session containers whose owner process on this host is gone (with `everything`:
    all of them). Returns the ids removed. A live owner's containers, another host's and those
    without a readable owner label are kept (the owner may still use them)."""
    removed = []
    host = os.uname().nodename
    for c in session_containers(client):
        o_host, _, o_pid = c.labels.get(LABEL_OWNER, "").partition(":")
        gone = o_host == host and o_pid.isdigit() and not _pid_alive(int(o_pid))
        if everything or gone:
            try:
                c.remove(force=True)
                removed.append(c.id)
            except Exception as exc:  # removed meanwhile
                log.debug("remove %s: %s", c.id[:12], exc)
    return removed


# -- a session -----------------------------------------------------------------------------

class _Output:
    """Head and tail of a byte stream, at most `limit` bytes kept (like the process backend)."""

    def __init__(self, limit: int):
        self.limit, self.head, self.tail, self.dropped = limit, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.limit // 2
            if excess > 0:
                self.dropped += excess
                del self.tail[:excess]

    def text(self, errors: str = "replace") -> str:
        if self.dropped:
            return (self.head.decode("utf-8", errors) + "\n[... output truncated ...]\n"
                    + self.tail.decode("utf-8", errors))
        return (self.head + self.tail).decode("utf-8", errors)


class _Channel:
    """A session's one attached stream to INIT: requests go to its stdin, framed answers come back
    on its stdout inside the engine's multiplexed frames (8-byte headers, stream 1 or 2)."""

    def __init__(self, sock):
        self.sock, self.raw = sock, getattr(sock, "_sock", sock)
        self.frames, self.answers = bytearray(), bytearray()

    def send(self, argv: list[str], user: str, environment: dict | None, stdin: bytes | None) -> None:
        req = json.dumps({"argv": argv, "user": user, "cwd": "/testbed", "env": environment or {},
                          "stdin": stdin is not None}).encode()
        self.raw.settimeout(SETUP_TIMEOUT_S)
        self.raw.sendall(struct.pack(">II", len(req), len(stdin or b"")) + req + (stdin or b""))

    def receive(self, deadline: float) -> tuple[bytes, bytes] | None:
        """The next answer, or None at `deadline` (time.monotonic()); EOFError: the stream ended."""
        while True:
            if len(self.answers) >= 5:
                kind, n = struct.unpack(">cI", self.answers[:5])
                if len(self.answers) >= 5 + n:
                    data = bytes(self.answers[5:5 + n])
                    del self.answers[:5 + n]
                    return kind, data
            if len(self.frames) >= 8:
                size = int.from_bytes(self.frames[4:8], "big")
                if len(self.frames) >= 8 + size:
                    if self.frames[0] == 1:
                        self.answers += self.frames[8:8 + size]
                    else:  # INIT's own stderr: only a fault of INIT writes there
                        log.warning("sandbox init: %s", bytes(self.frames[8:8 + size]).decode("utf-8", "replace"))
                    del self.frames[:8 + size]
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.raw.settimeout(left)
            try:
                chunk = self.raw.recv(1 << 16)
            except TimeoutError:
                return None
            if not chunk:
                raise EOFError
            self.frames += chunk

    def close(self) -> None:
        for sock in (self.sock, self.raw):
            try:
                sock.close()
            except Exception:
                pass


class DockerSession(Session):
    """A started container of `env.image` whose /testbed holds the pristine snapshot.

    Made by DockerSandbox (which calls prepare() to apply the patches); remove it with close()."""

    def __init__(self, sandbox: "DockerSandbox", env: TaskEnv):
        from docker.errors import APIError, ImageNotFound
        self._sandbox, self.env, self.container = sandbox, env, None
        self.id = uuid.uuid4().hex
        self._lost, self._channel, self._busy = False, None, threading.Lock()
        self._cpu_clock = False  # looked up at the first command limited in CPU time
        if not env.image:
            raise SandboxError(f"{env.repo}: the task environment names no image")
        opt = sandbox.options
        scratch = f"rw,exec,nosuid,nodev,size={opt['scratch_mb']}m"
        try:
            self.container = sandbox.client.containers.create(
                env.image, command=["python3", "-c", INIT], user="root", working_dir="/testbed",
                # NetworkDisabled: runc makes the container's network namespace (loopback only)
                # and the engine builds no libnetwork sandbox for it, ~0.1 s of the machine's CPU
                # less per container (bench/container_network.py); "none" too, so that no engine
                # attaches a network
                network_disabled=True, network_mode="none", read_only=True,
                tmpfs={"/testbed": f"{scratch},uid={UID},gid={UID},mode=0755",
                       "/tmp": f"{scratch},mode=1777",
                       f"/home/{USER}": f"rw,exec,nosuid,nodev,size=64m,uid={UID},gid={UID},mode=0755"},
                mem_limit=f"{opt['memory_mb']}m", memswap_limit=f"{opt['memory_mb']}m",
                nano_cpus=int(opt["cpus"] * 1e9), pids_limit=int(opt["pids"]),
                # Only root (INIT and the setup copy) holds these, SETUID/SETGID for INIT to
                # become the sandbox user; every command of the sandbox user runs with no
                # capabilities, and no-new-privileges keeps it that way.
                cap_drop=["ALL"], cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETUID", "SETGID"],
                security_opt=["no-new-privileges"], stdin_open=True, log_config={"type": "none"},
                labels={LABEL_SESSION: self.id, LABEL_OWNER: _OWNER, "forgeline.repo": env.repo},
                detach=True)
        except ImageNotFound:
            raise SandboxError(
                f"image {env.image} of {env.repo} is not on this engine: build it with `forgeline "
                f"image --repo {env.repo} --out results/images/{env.repo}.json --manifest "
                f"results/images/{env.repo}.manifest.json`") from None
        except APIError as exc:
            raise SandboxError(f"cannot create a container of {env.image}: {exc.explanation or exc}") from None
        with _lock:
            _live_sessions.add(self)
        try:
            self._channel = _Channel(self.container.attach_socket(
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}))
            self.container.start()
            # /opt/forgeline is root-only: the pristine snapshot never reaches the agent's eyes.
            res = self._run(["cp", "-a", "/opt/forgeline/testbed/.", "/testbed/"], SETUP_TIMEOUT_S,
                            user="root")
            if res.exit_code != 0:
                raise SandboxError(f"{env.image}: copying the snapshot to /testbed failed: "
                                   f"{res.output.strip()[:500]}")
        except BaseException:
            self.close()
            raise

    def prepare(self, patches: Sequence[str], track_changes: bool = True) -> "DockerSession":
        """Apply `patches` in order (PatchError if one fails) and, with `track_changes`, make the
        result the baseline that diff() compares against."""
        if any(p.strip() for p in patches):
            res = self._run(["python3", "-c", APPLY, "1" if track_changes else "0"], SETUP_TIMEOUT_S,
                            stdin=json.dumps(list(patches)).encode(), environment=GIT_ENV)
            self._check_patches(res)
            if res.exit_code != 0 or res.timed_out:
                raise SandboxError(f"applying patches in {self.env.repo} failed ({res.exit_code}): "
                                   f"{res.output.strip()[:500]}")
        # else: the image's own baseline commit is the pristine snapshot
        return self

    def exec_patched(self, patches: Sequence[str], command: str, timeout_s: float) -> ExecResult:
        """Apply `patches` (PatchError if one fails), then run `command`: one command for both."""
        if not any(p.strip() for p in patches):
            return self.exec(command, timeout_s)
        res = self._run(["python3", "-c", APPLY, "0", command], timeout_s,
                        stdin=json.dumps(list(patches)).encode())
        self._check_patches(res)
        return res

    @staticmethod
    def _check_patches(res: ExecResult) -> None:
        if res.exit_code == 3 and res.output.startswith(PATCH_FAILED + " "):
            first, _, output = res.output.partition("\n")
            raise PatchError(int(first.split()[1]), output)

    def _run(self, cmd: list[str], timeout_s: float, stdin: bytes | None = None, user: str = USER,
             environment: dict | None = None, limit: int | None = None,
             errors: str = "replace", cpu_time: bool = False) -> ExecResult:
        """Run `cmd` in the container (through INIT); past `timeout_s`, kill every process but INIT.
        With `cpu_time`, `timeout_s` counts the container's CPU seconds (what the command needs,
        however busy the machine is), and WALL_BACKSTOP x `timeout_s` of wall time still stops a
        command that waits; where the CPU time cannot be read, `timeout_s` is wall time."""
        if self._lost or self.container is None or self._channel is None:
            raise SandboxError(f"session {self.id[:8]} of {self.env.repo} is closed or lost")
        out = _Output(limit or self._sandbox.options["output_limit"])
        code, timed_out, stopped = None, False, True
        clock = self._cpu() if cpu_time else None
        with self._busy:
            t0 = time.monotonic()
            try:
                start = clock() if clock else 0.0
                self._channel.send(cmd, user, environment, stdin)
                deadline = t0 + timeout_s * (WALL_BACKSTOP if clock else 1)
                while code is None or not stopped:
                    if clock and not timed_out:
                        answer = self._channel.receive(min(deadline, time.monotonic() + CPU_POLL_S))
                        if answer is None and time.monotonic() < deadline and clock() - start < timeout_s:
                            continue
                    else:
                        answer = self._channel.receive(deadline)
                    if answer is None:
                        if timed_out:  # INIT could not help: the container is lost, kill it whole
                            self._lost = True
                            try:
                                self.container.kill()
                            except Exception:
                                pass
                            break
                        timed_out, stopped = True, False
                        self._kill_all()
                        deadline = time.monotonic() + KILL_GRACE_S
                    elif answer[0] == b"o":
                        out.add(answer[1])
                    elif answer[0] == b"k":
                        stopped = True
                    else:
                        code = int(answer[1])
            except (OSError, EOFError) as exc:  # the stream broke: the container stopped
                self._lost = not self._running()
                if not self._lost:
                    raise SandboxError(f"lost the stream to {self.container.id[:12]}: {exc!r}") from None
        duration = round(time.monotonic() - t0, 4)
        if timed_out:
            code = -9
        elif code is None:  # the container stopped under the command
            code = -1
        return ExecResult(code, out.text(errors), timed_out, duration)

    def _cpu(self):
        """The container's CPU clock (container_cpu_clock), looked up once; None: wall time."""
        global _cpu_warned
        if self._cpu_clock is False:
            self._cpu_clock = container_cpu_clock(self.container.id)
            if self._cpu_clock is None and not _cpu_warned:
                _cpu_warned = True
                log.warning("cannot read the CPU time of container %s on this host (none of %s): "
                            "command limits count wall time", self.container.id[:12],
                            ", ".join(p.format(id="ID") for p in CGROUP_CPU_FILES))
        return self._cpu_clock

    def _kill_all(self) -> None:
        try:
            self.container.kill(signal="SIGUSR1")  # INIT: kill(-1, SIGKILL)
        except Exception as exc:
            log.debug("SIGUSR1 to %s: %s", self.container.id[:12], exc)

    def _running(self) -> bool:
        try:
            self.container.reload()
            return self.container.status == "running"
        except Exception:
            return False

    # -- the Session interface --

    def exec(self, command: str, timeout_s: float, cpu_time: bool = False) -> ExecResult:
        """Run `command` with bash in /testbed as the sandbox user. Whatever the command does, the
        answer is an ExecResult; exit code -9 and timed_out=True when it ran past `timeout_s`
        (with `cpu_time`: of the container's CPU time, see _run)."""
        res = self._run(["bash", "-c", command], timeout_s, cpu_time=cpu_time)
        # killed by a signal: was it the whole container? (one API call, only in this case)
        if (res.exit_code < 0 or res.exit_code >= 128) and not self._running():
            self._lost = True  # only an engine fault gets here: task code cannot stop INIT
            res.output += "\n[forgeline: the container stopped]"
        return res

    def diff(self) -> str:
        """`git diff` of /testbed against the session's baseline, new untracked files included."""
        res = self._run(["bash", "-c", "git add -A && git diff --cached --no-color --binary"],
                        SETUP_TIMEOUT_S, limit=DIFF_LIMIT, errors="surrogateescape")
        if res.exit_code != 0 or res.timed_out:
            raise SandboxError(f"git diff in {self.env.repo} failed: {res.output.strip()[:500]}")
        if "\n[... output truncated ...]\n" in res.output and len(res.output) >= DIFF_LIMIT // 2:
            raise SandboxError(f"the diff in {self.env.repo} is larger than {DIFF_LIMIT} bytes")
        return res.output

    def close(self, wait: bool = True) -> None:
        """Remove the container (force: it is killed first). With wait=False the removal runs in
        the sandbox's background thread; DockerSandbox.close() and atexit wait for it."""
        container, self.container = self.container, None
        if self._channel is not None:
            self._channel.close()
        with _lock:
            _live_sessions.discard(self)
        if container is None:
            return
        if not wait:
            try:
                self._sandbox._reaper.submit(_remove, container)
                return
            except RuntimeError:  # the interpreter is shutting down: remove it now
                pass
        _remove(container)


def _remove(container) -> None:
    from docker.errors import NotFound
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except Exception as exc:
        log.warning("could not remove container %s: %s", container.id[:12], exc)


_reaped: set[int] = set()  # PIDs (this one, or a forked child) that ran remove_leftovers


def _reap_once(client) -> None:
    """remove_leftovers() once per process: the containers of SIGKILLed jobs go when the next
    sandbox starts."""
    if os.getpid() not in _reaped:
        _reaped.add(os.getpid())
        try:
            for cid in remove_leftovers(client):
                log.info("removed container %s of a process that is gone", cid[:12])
        except Exception as exc:  # the engine answers later calls or says why then
            log.debug("remove_leftovers: %s", exc)


# -- the sandbox ---------------------------------------------------------------------------

class DockerSandbox(Sandbox):
    name = "docker"

    def __init__(self, client=None, **options):
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise ValueError(f"unknown docker sandbox option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
        self.options = {**OPTIONS, **{k: v for k, v in options.items() if v is not None}}
        self.client = client or connect()
        self._spares: dict[TaskEnv, list[concurrent.futures.Future]] = {}
        self._expected: dict[TaskEnv, int] = {}  # fresh containers still to be asked for, where told
        self._spare_lock = threading.Lock()
        self._starter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forgeline-warm")
        self._reaper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forgeline-reap")
        self._closed = False
        _sandboxes.add(self)
        _sigterm_to_exit()
        _reap_once(self.client)

    @classmethod
    def from_config(cls, sandbox_section: dict, client=None) -> "DockerSandbox":
        """The sandbox that `sandbox.docker` of the config describes (other keys there, such as
        base_image, belong to forgeline.sandbox.images)."""
        docker_section = (sandbox_section or {}).get("docker") or {}
        return cls(client=client, **{k: v for k, v in docker_section.items() if k in OPTIONS})

    def _fresh(self, env: TaskEnv) -> DockerSession:
        """A started, never-used container of env.image: a warm spare if one is ready."""
        session = None
        with self._spare_lock:
            futures = self._spares.get(env, [])
            future = futures.pop(0) if futures else None
            if env in self._expected:
                self._expected[env] = max(0, self._expected[env] - 1)
        if future is not None:
            try:
                session = future.result()
            except Exception as exc:  # retried below, where the error is raised to the caller
                log.debug("warm container for %s failed: %s", env.image, exc)
        if session is None:
            session = DockerSession(self, env)
        self._top_up(env)
        return session

    def _top_up(self, env: TaskEnv) -> None:
        with self._spare_lock:
            if self._closed:
                return
            futures = self._spares.setdefault(env, [])
            # a spare nobody takes costs a container's start and removal for nothing: the last
            # `warm` of each image in every job were such
            limit = int(self.options["warm"])
            if env in self._expected:
                limit = min(limit, self._expected[env])
            while len(futures) < limit:
                futures.append(self._starter.submit(DockerSession, self, env))

    def expect(self, env: TaskEnv, n: int) -> None:
        with self._spare_lock:
            self._expected[env] = max(0, int(n))
        self._top_up(env)  # the spares start now, while the caller's first turns generate

    def session(self, env: TaskEnv, patches: Sequence[str] = ()) -> DockerSession:
        s = self._fresh(env)
        try:
            return s.prepare(patches, track_changes=True)
        except BaseException:
            s.close()
            raise

    def run_tests(self, env: TaskEnv, patches: Sequence[str] = (), tests: Sequence[str] | None = None,
                  timeout_s: float = 120.0) -> TestRun:
        s = self._fresh(env)
        try:
            res = s.exec_patched(patches, pytest_shell(tests, RESULTS_FILE), timeout_s)
            try:
                read = s._run(["cat", RESULTS_FILE], SETUP_TIMEOUT_S, user="root", limit=DIFF_LIMIT)
                reports = read.output if read.exit_code == 0 else ""
            except SandboxError:  # the container was lost: no verdicts, like a run that never ran
                reports = ""
        finally:
            s.close(wait=False)
        found = parse_results(reports)
        return TestRun(found.statuses, res.output, res.exit_code, res.timed_out, res.duration_s,
                       found.messages, found.collection_errors)

    def close(self) -> None:
        """Remove the warm spares and wait for background removals. The sandbox stays usable,
        and a later caller starts without the counts an earlier one `expect`ed."""
        with self._spare_lock:
            futures = [f for fs in self._spares.values() for f in fs]
            self._spares.clear()
            self._expected.clear()
        for f in futures:
            try:
                f.result().close()
            except Exception:
                pass
        self._reaper.submit(lambda: None).result()  # everything queued before is done

    def shutdown(self) -> None:
        """close(), and no more warm containers are started."""
        with self._spare_lock:
            self._closed = True
        self.close()
