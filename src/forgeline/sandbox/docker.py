"""The docker backend: each session is a fresh, locked-down container from the repo's image.

A container gets no network (`network_mode: none`), a memory, CPU and process-count limit, a
read-only root file system and size-limited tmpfs mounts for the only writable places (/testbed,
/tmp, $HOME), so a fork bomb, a memory hog or a disk filler hits a limit of its own container and
nothing else. Task code runs as the user `forgeline` with no capabilities (no-new-privileges).
PID 1 is a tiny Python init (INIT, root) that reaps orphans and, when the HOST sends it SIGUSR1,
SIGKILLs every other process in the container: that is how a command that runs past its time
limit is stopped together with everything it forked, even when the process table is full.

Every container carries the labels `forgeline.session=<uuid>` and `forgeline.owner=<host>:<pid>`.
A session's container is removed on every path: close(), timeout, exception, Ctrl-C (try/finally),
interpreter exit (atexit) and SIGTERM (turned into SystemExit when nobody else handles it);
`remove_leftovers()` removes what a killed process (SIGKILL) left behind, and the first
DockerSandbox of every process runs it: containers whose owner on this host is gone. Those of
another host's processes (an engine shared by Slurm nodes) are kept: this host cannot tell.

Speed: starting a container costs ~0.5-1 s, so the sandbox keeps `warm` started, never-used
containers per image ready (started in the background while the previous one works) and
removes finished run_tests containers in the background. A fresh container is still fresh:
nothing ever ran in it.

Options (constructor keywords; config keys under `sandbox.docker`, defaults in OPTIONS):
    memory_mb: 1024     memory (and memory+swap) limit of one container
    cpus: 1.0           CPU limit (nano_cpus)
    pids: 256           process-count limit (fork bombs stop here)
    scratch_mb: 256     size of each of the tmpfs mounts /testbed and /tmp
    output_limit: 64000 bytes of a command's output kept (head and tail)
    warm: 1             started spare containers kept per image (0: start on demand)
"""
from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import os
import signal
import socket as pysocket
import threading
import time
import uuid
import weakref
from typing import Sequence

from forgeline.sandbox.base import ExecResult, PatchError, Sandbox, SandboxError, Session, TaskEnv, TestRun
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

# PID 1 of every container (root). It never forks, so it works with a full process table; it
# reaps what is re-parented to it; it obeys SIGUSR1 only from outside the container (si_pid 0).
# The sandbox user cannot signal it at all (another uid), so `kill -9 1` is refused.
INIT = """\
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGUSR1})
while True:
    info = signal.sigwaitinfo({signal.SIGCHLD, signal.SIGUSR1})
    if info.si_signo == signal.SIGUSR1 and info.si_pid == 0:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
"""

# Applies the patches (a JSON list on stdin) in order with `git apply`; on failure prints
# PATCH_FAILED and the failing index on the first line and exits 3. With argv[1] == "1", starts a
# fresh git history afterwards: the session's baseline, and no `git log -p` that would show the
# agent the patches. With argv[2], then becomes `bash -c argv[2]` (one exec, not two, per test run).
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


class DockerSession(Session):
    """A started container of `env.image` whose /testbed holds the pristine snapshot.

    Made by DockerSandbox (which calls prepare() to apply the patches); remove it with close()."""

    def __init__(self, sandbox: "DockerSandbox", env: TaskEnv):
        from docker.errors import APIError, ImageNotFound
        self._sandbox, self.env, self.container = sandbox, env, None
        self.id = uuid.uuid4().hex
        self._lost = False
        if not env.image:
            raise SandboxError(f"{env.repo}: the task environment names no image")
        opt = sandbox.options
        scratch = f"rw,exec,nosuid,nodev,size={opt['scratch_mb']}m"
        try:
            self.container = sandbox.client.containers.create(
                env.image, command=["python3", "-c", INIT], user="root", working_dir="/testbed",
                network_mode="none", read_only=True,
                tmpfs={"/testbed": f"{scratch},uid={UID},gid={UID},mode=0755",
                       "/tmp": f"{scratch},mode=1777",
                       f"/home/{USER}": f"rw,exec,nosuid,nodev,size=64m,uid={UID},gid={UID},mode=0755"},
                mem_limit=f"{opt['memory_mb']}m", memswap_limit=f"{opt['memory_mb']}m",
                nano_cpus=int(opt["cpus"] * 1e9), pids_limit=int(opt["pids"]),
                # Only root (INIT and the setup copy) holds these; every exec of the sandbox
                # user runs with no capabilities, and no-new-privileges keeps it that way.
                cap_drop=["ALL"], cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"],
                security_opt=["no-new-privileges"],
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
        """Apply `patches` (PatchError if one fails), then run `command`: one exec for both."""
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
             errors: str = "replace") -> ExecResult:
        """Run `cmd` in the container; past `timeout_s`, kill every process but INIT."""
        from docker.errors import APIError
        from docker.utils.socket import frames_iter
        if self._lost or self.container is None:
            raise SandboxError(f"session {self.id[:8]} of {self.env.repo} is closed or lost")
        api = self._sandbox.client.api
        t0 = time.perf_counter()
        try:
            exec_id = api.exec_create(self.container.id, cmd, stdin=stdin is not None, user=user,
                                      workdir="/testbed", environment=environment)["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except APIError as exc:
            self._lost = not self._running()
            raise SandboxError(f"cannot run a command in {self.container.id[:12]} "
                               f"({'container stopped' if self._lost else 'engine error'}): "
                               f"{exc.explanation or exc}") from None
        out = _Output(limit or self._sandbox.options["output_limit"])
        failure: list[BaseException] = []

        def pump() -> None:
            try:
                if stdin is not None:
                    raw = getattr(sock, "_sock", sock)
                    raw.sendall(stdin)
                    raw.shutdown(pysocket.SHUT_WR)
                for _stream, data in frames_iter(sock, tty=False):
                    out.add(data)
            except BaseException as exc:  # reported by the caller
                failure.append(exc)

        reader = threading.Thread(target=pump, daemon=True, name=f"exec-{exec_id[:8]}")
        reader.start()
        reader.join(timeout_s)
        timed_out = reader.is_alive()
        if timed_out:
            self._kill_all()
            reader.join(KILL_GRACE_S)
            if reader.is_alive():  # INIT could not help: the container is lost, kill it whole
                self._lost = True
                try:
                    self.container.kill()
                except Exception:
                    pass
                reader.join(KILL_GRACE_S)
        try:
            sock.close()
        except Exception:
            pass
        duration = round(time.perf_counter() - t0, 4)
        if failure and not timed_out:
            raise SandboxError(f"reading a command's output in {self.container.id[:12]} failed: "
                               f"{failure[0]!r}")
        code = -9 if timed_out else self._exit_code(exec_id)
        return ExecResult(code, out.text(errors), timed_out, duration)

    def _exit_code(self, exec_id: str) -> int:
        """The exec's exit status; the engine may record it a moment after the stream ends."""
        api = self._sandbox.client.api
        for _ in range(50):
            info = api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        return -1

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

    def exec(self, command: str, timeout_s: float) -> ExecResult:
        """Run `command` with bash in /testbed as the sandbox user. Whatever the command does, the
        answer is an ExecResult; exit code -9 and timed_out=True when it ran past `timeout_s`."""
        res = self._run(["bash", "-c", command], timeout_s)
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
            while len(futures) < int(self.options["warm"]):
                futures.append(self._starter.submit(DockerSession, self, env))

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
        """Remove the warm spares and wait for background removals. The sandbox stays usable."""
        with self._spare_lock:
            futures = [f for fs in self._spares.values() for f in fs]
            self._spares.clear()
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
