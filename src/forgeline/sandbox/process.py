"""The process backend: a temp copy of the repo on this machine, for development only.

It isolates nothing but the working directory (and the network, where `unshare` can make a
namespace). Every run says so on stderr. Use the docker backend for anything you publish.

Task code imports what it would import in the repository's image, beyond this interpreter's own
packages: the copy's src/ in a src/ layout (the image's PYTHONPATH=/testbed/src), then the
snapshot's pinned test dependencies (images.LOCK_FILE), the same wheel files the image
installs, unpacked once on this machine (images.wheel_site), both on PYTHONPATH.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.params import BaseImageConfig
from forgeline.provenance import fault_point, owned_tempdir, sweep_temp_dirs
from forgeline.sandbox import images
from forgeline.sandbox.base import (CPU_POLL_S, WALL_BACKSTOP, ExecResult, PatchError, Sandbox, SandboxError,
                                    Session, TaskEnv, TestRun)
from forgeline.sandbox.grading import parse_results, pytest_shell
from forgeline.sandbox.snapshot import SRC_DIR, src_layout

OUTPUT_LIMIT = 64_000
MEMORY_LIMIT_BYTES = 2 << 30  # address space per task process: a runaway mutation dies, not the host
_warned = False


# Files from which pytest takes its rootdir (the base of every node id) and its settings, and
# the section that makes each one count.
PYTEST_CONFIGS = {"pytest.ini": "", ".pytest.ini": "", "pyproject.toml": "[tool.pytest.ini_options]",
                  "tox.ini": "[pytest]", "setup.cfg": "[tool:pytest]"}


def check_temp_root(root: Path) -> None:
    """SandboxError when a pytest config sits above the folder the copies go to: pytest would
    take its rootdir from there, so every node id would carry the copy's random folder name and
    match no FAIL_TO_PASS/PASS_TO_PASS (and that project's settings would apply to the task)."""
    for folder in [root, *root.parents]:
        for name, section in PYTEST_CONFIGS.items():
            path = folder / name
            try:
                if path.is_file() and section in path.read_text(encoding="utf-8", errors="replace"):
                    raise SandboxError(
                        f"the process sandbox copies repositories under {root}, below {path}, which "
                        f"configures pytest: the tests would run with that folder as their root. Set "
                        f"TMPDIR to a folder outside any Python project (e.g. TMPDIR=/tmp)")
            except OSError:
                continue


def _can_unshare_net() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--net", "--map-root-user", "true"], capture_output=True)
    return probe.returncode == 0


# What task and agent code may see of this machine's environment: nothing else (no tokens, no
# cloud credentials, no FORGELINE_/SNAKEMAKE state).
ALLOWED_ENV = ("PATH", "LANG", "TERM")


def _clean_env(home: Path, python_path: Sequence[Path] = ()) -> dict[str, str]:
    env = {k: os.environ[k] for k in ALLOWED_ENV if k in os.environ}
    # No third-party pytest plugins (hydra's, from dvc, costs 0.8 s a run) and no bytecode files.
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", TZ="UTC",
               LC_ALL="C.UTF-8", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if python_path:  # the session's src/ and the pinned wheels: what the image adds (module doc)
        env["PYTHONPATH"] = os.pathsep.join(map(str, python_path))
    return env


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def session_cpu_s(sid: int) -> float:
    """CPU seconds of the processes in session `sid` so far, with those of the children they
    have waited for (what /proc shows: a child nobody waited for yet is not counted)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # from field 3 (state) on
        if int(fields[3]) == sid:
            total += sum(map(int, fields[11:15]))  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def run_shell(command: str, cwd: Path, timeout_s: float, prefix: Sequence[str] = (),
              python_path: Sequence[Path] = (), cpu_time: bool = False) -> ExecResult:
    """Run `command` with bash in its own process group, with an allow-listed environment
    (HOME is the folder above `cwd`; PYTHONPATH `python_path` when not empty); kill the whole
    group on timeout. With `cpu_time`, `timeout_s` counts the CPU seconds of the command's
    session, and WALL_BACKSTOP x `timeout_s` of wall time still stops one that waits (as the
    docker backend does with its container's)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([*prefix, "bash", "-c", command], cwd=cwd,
                            env=_clean_env(cwd.parent, python_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=_limit_memory)
    timed_out = False
    deadline = t0 + timeout_s * (WALL_BACKSTOP if cpu_time else 1)
    while True:
        try:
            wait = deadline - time.perf_counter()
            out, _ = proc.communicate(timeout=min(wait, CPU_POLL_S) if cpu_time else max(wait, 0))
            break
        except subprocess.TimeoutExpired:
            if not cpu_time or time.perf_counter() >= deadline or session_cpu_s(proc.pid) >= timeout_s:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                break
    text = out.decode("utf-8", errors="replace")
    if len(text) > OUTPUT_LIMIT:
        text = text[: OUTPUT_LIMIT // 2] + "\n[... output truncated ...]\n" + text[-OUTPUT_LIMIT // 2:]
    return ExecResult(proc.returncode if not timed_out else -9, text, timed_out,
                      round(time.perf_counter() - t0, 4))


def apply_patches(workdir: Path, patches: Sequence[str]) -> None:
    for i, patch in enumerate(patches):
        if not patch.strip():
            continue
        res = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=workdir,
                             input=patch.encode(), capture_output=True)
        if res.returncode != 0:
            raise PatchError(i, res.stderr.decode(errors="replace"))


def _git_init(workdir: Path) -> None:
    """A baseline commit, so diff() can say what changed since the session began."""
    git = ["git", "-c", "user.name=forgeline", "-c", "user.email=forgeline@localhost",
           "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=workdir, check=True)
    subprocess.run([*git, "add", "-A"], cwd=workdir, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "baseline", "--allow-empty"], cwd=workdir, check=True)


class ProcessSession(Session):
    def __init__(self, sandbox: "ProcessSandbox", env: TaskEnv, patches: Sequence[str],
                 track_changes: bool = True):
        # owned (pid, host): a SIGKILLed job's copy is swept when the next sandbox starts
        self._tmp = owned_tempdir(f"forgeline-{env.repo}")
        self.workdir = Path(self._tmp.name) / env.repo
        shutil.copytree(env.source, self.workdir,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc"))
        self._sandbox = sandbox
        try:
            self.python_path = sandbox.python_path(env, self.workdir)
            apply_patches(self.workdir, patches)
            if track_changes:
                _git_init(self.workdir)
        except BaseException:
            self._tmp.cleanup()
            raise
        fault_point("sandbox.ready", env.repo)

    def exec(self, command: str, timeout_s: float, cpu_time: bool = False) -> ExecResult:
        return run_shell(command, self.workdir, timeout_s, self._sandbox.prefix, self.python_path, cpu_time)

    def diff(self) -> str:
        subprocess.run(["git", "add", "-A"], cwd=self.workdir, check=True)
        return subprocess.run(["git", "diff", "--cached", "--no-color", "--binary"], cwd=self.workdir,
                              capture_output=True, text=True, check=True).stdout

    def close(self) -> None:
        self._tmp.cleanup()


class ProcessSandbox(Sandbox):
    name = "process"

    def __init__(self, python: str | None = None, isolate_network: bool = True,
                 base_image: BaseImageConfig | Mapping[str, Any] | None = None,
                 cache_dir: Path = images.DEFAULT_CACHE_DIR):
        """base_image: the config's sandbox.docker.base_image, which names the Python a snapshot's
        pinned wheels are chosen for (needed only for a snapshot with images.LOCK_FILE);
        cache_dir: where the wheels are fetched to and unpacked (as `forgeline image --cache-dir`)."""
        self.python = python or sys.executable
        self.base_image = base_image
        self.cache_dir = Path(cache_dir)
        self._sites: dict[str, Path | None] = {}  # lock file text -> unpacked wheels
        self.prefix: tuple[str, ...] = ()
        check_temp_root(Path(tempfile.gettempdir()).resolve())
        sweep_temp_dirs()
        if isolate_network and _can_unshare_net():
            self.prefix = ("unshare", "--net", "--map-root-user")
        global _warned
        if not _warned:
            net = "in a private network namespace" if self.prefix else "WITH network access"
            print(f"forgeline: sandbox backend 'process' runs task code on this machine {net}; "
                  "it is for development only (use the docker backend for real runs)",
                  file=sys.stderr)
            _warned = True

    @classmethod
    def from_config(cls, sandbox_section: Mapping[str, Any]) -> "ProcessSandbox":
        """The process sandbox of the config's `sandbox` section (its docker.base_image picks the
        pinned wheels: the same files the repository's image installs)."""
        return cls(base_image=((sandbox_section or {}).get("docker") or {}).get("base_image"))

    def python_path(self, env: TaskEnv, workdir: Path) -> list[Path]:
        """PYTHONPATH of a session of `env` copied to `workdir`: the copy's src/ when the snapshot
        has a src/ layout, then the folder of the snapshot's unpacked pinned wheels, if any."""
        site = self._wheel_site(env)
        return [*([workdir / SRC_DIR] if src_layout(env.source) else []), *([site] if site else [])]

    def _wheel_site(self, env: TaskEnv) -> Path | None:
        """images.wheel_site of the snapshot, once per lock file text; None without pins. The
        wheels are the image's (its Python, its platform): a binary one needs this machine's
        interpreter to match them."""
        lock = Path(env.source) / images.LOCK_FILE
        if not lock.is_file():
            return None
        key = lock.read_text(encoding="utf-8")
        if key not in self._sites:
            if self.base_image is None and images.snapshot_lock(env.source):
                raise SandboxError(
                    f"{env.repo} pins test dependencies ({lock}); the process sandbox needs the "
                    "config's sandbox.docker.base_image to choose their wheels: make it with "
                    "get_sandbox(cfg.sandbox) or ProcessSandbox(base_image=...)")
            self._sites[key] = (None if self.base_image is None else
                                images.wheel_site(env.source, self.cache_dir, base_section=self.base_image))
        return self._sites[key]

    def session(self, env: TaskEnv, patches: Sequence[str] = ()) -> ProcessSession:
        return ProcessSession(self, env, patches)

    def run_tests(self, env: TaskEnv, patches: Sequence[str] = (), tests: Sequence[str] | None = None,
                  timeout_s: float = 120.0) -> TestRun:
        with ProcessSession(self, env, patches, track_changes=False) as s:
            results = Path(s._tmp.name) / "results.jsonl"  # outside the repository copy
            res = s.exec(pytest_shell(tests, str(results), self.python), timeout_s)
            found = parse_results(results.read_text(encoding="utf-8", errors="replace")
                                  if results.is_file() else "")
        return TestRun(found.statuses, res.output, res.exit_code, res.timed_out, res.duration_s,
                       found.messages, found.collection_errors)
