"""The sandbox interface: where a task's code is changed and its tests are run.

Two backends implement it: `docker` (isolated containers, the default whenever an engine
answers) and `process` (a temp copy of the repo on this machine, for development). Callers
never know which one they hold.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

# A command limited in CPU time (Session.exec's cpu_time) has its CPU time read this often, and
# is stopped at WALL_BACKSTOP times its limit in wall time all the same (a command that waits).
CPU_POLL_S = 0.1
WALL_BACKSTOP = 4


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the code under test)."""


class PatchError(SandboxError):
    """A patch did not apply to the environment; `index` says which one."""

    def __init__(self, index: int, output: str):
        super().__init__(f"patch #{index} does not apply: {output.strip()[:500]}")
        self.index = index
        self.output = output


@dataclass(frozen=True)
class TaskEnv:
    """A repository at a pinned snapshot: what a task's environment starts from."""

    repo: str  # short repository name, e.g. "ledgerkit"
    source: Path  # the snapshot's files on this machine
    commit: str  # content hash of the snapshot (40 hex)
    image: str | None = None  # per-repo image tag, for the docker backend


@dataclass
class ExecResult:
    exit_code: int
    output: str  # stdout and stderr together, truncated to the sandbox's output limit
    timed_out: bool
    duration_s: float


@dataclass
class TestRun:
    """One graded pytest run (grading.pytest_command): per-test status
    (PASSED/FAILED/ERROR/SKIPPED/XFAIL/XPASS) read from pytest's own reports, not its console."""

    statuses: dict[str, str]
    log: str  # the console output (-v -rA), for people and the reference graders' parsers
    exit_code: int
    timed_out: bool
    duration_s: float
    messages: dict[str, str] = field(default_factory=dict)  # node id -> pytest's crash message
    collection_errors: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)


class Session(abc.ABC):
    """A live environment: the repo with patches applied, where commands run."""

    @abc.abstractmethod
    def exec(self, command: str, timeout_s: float, cpu_time: bool = False) -> ExecResult:
        """Run `command` (bash, in the repository); past `timeout_s` seconds it is stopped with
        everything it started (exit code -9, timed_out). With `cpu_time` those are seconds of the
        CPU time the command and what it started use, so a busy machine does not stop a command
        that an idle one would let finish; a command that waits is stopped at a few times
        `timeout_s` of wall time all the same."""

    @abc.abstractmethod
    def diff(self) -> str:
        """The change made since the session started, as a unified diff (git format)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Sandbox(abc.ABC):
    name: str = "abstract"

    @abc.abstractmethod
    def session(self, env: TaskEnv, patches: Sequence[str] = ()) -> Session:
        """Start a fresh environment with `patches` applied in order (PatchError if one fails)."""

    @abc.abstractmethod
    def run_tests(self, env: TaskEnv, patches: Sequence[str] = (), tests: Sequence[str] | None = None,
                  timeout_s: float = 120.0) -> TestRun:
        """Run `tests` (pytest node ids; None = the whole suite) in a FRESH environment."""

    def expect(self, env: TaskEnv, n: int) -> None:
        """A hint: at most `n` more fresh environments of `env` (sessions and test runs) will be
        asked for. A backend that keeps started environments ready keeps no more than that."""
