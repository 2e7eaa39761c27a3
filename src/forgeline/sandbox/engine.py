"""The Docker engine: one client whose engine answered, for the docker backend and the image stage.

Its own small module so that the stages which start containers (sandbox.docker) and the stage
that builds images (sandbox.images) share the connection without importing each other.
"""
from __future__ import annotations

import logging
import os

from forgeline.sandbox.base import SandboxError

log = logging.getLogger(__name__)


def engine_help(host: str | None = None) -> str:
    host = host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return (f"no Docker engine answers at {host}: start one with "
            f"`bash scripts/services.sh start docker`, or set sandbox.backend: process for development")


def connect(timeout_s: float = 600):
    """A docker client whose engine answered a ping; SandboxError with one clear line if none does."""
    import docker
    from docker.errors import DockerException
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except DockerException as exc:
        log.debug("docker connect failed: %s", exc)
        raise SandboxError(engine_help()) from None
    return client
