"""Where task code runs: one interface (base.Sandbox), a docker and a process backend."""
from __future__ import annotations

from typing import Mapping

from forgeline.config import as_dict
from forgeline.params import SandboxConfig
from forgeline.sandbox.base import (ExecResult, PatchError, Sandbox, SandboxError, Session, TaskEnv,
                                    TestRun)


def get_sandbox(backend: str | Mapping | SandboxConfig) -> Sandbox:
    """The backend the config's `sandbox` section names (or a bare backend name, with the
    backend's own defaults): `docker` (isolated containers) or `process` (development only)."""
    section = {"backend": backend} if isinstance(backend, str) else as_dict(backend)
    if section["backend"] == "process":
        from forgeline.sandbox.process import ProcessSandbox
        return ProcessSandbox.from_config(section)
    if section["backend"] == "docker":
        from forgeline.sandbox.docker import DockerSandbox
        return DockerSandbox.from_config(section)
    raise ValueError(f"unknown sandbox backend {section['backend']!r} (use 'docker' or 'process')")


__all__ = ["ExecResult", "PatchError", "Sandbox", "SandboxError", "Session", "TaskEnv", "TestRun",
           "get_sandbox"]
