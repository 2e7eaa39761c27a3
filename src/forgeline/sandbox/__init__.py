"""Where task code runs: one interface (base.Sandbox), a docker and a process backend."""
from __future__ import annotations

from forgeline.sandbox.base import (ExecResult, PatchError, Sandbox, SandboxError, Session, TaskEnv,
                                    TestRun)


def get_sandbox(backend: str, **options) -> Sandbox:
    """The backend named in config: `process` (development) or `docker`."""
    if backend == "process":
        from forgeline.sandbox.process import ProcessSandbox
        return ProcessSandbox(**options)
    if backend == "docker":
        from forgeline.sandbox.docker import DockerSandbox
        return DockerSandbox(**options)
    raise ValueError(f"unknown sandbox backend {backend!r} (use 'docker' or 'process')")


__all__ = ["ExecResult", "PatchError", "Sandbox", "SandboxError", "Session", "TaskEnv", "TestRun",
           "get_sandbox"]
