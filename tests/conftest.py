"""Shared fixtures. Docker ones: an engine, the base image, a tiny repository and its image, a
registry; and an S3-compatible store. Without the service the tests skip here, but FAIL in CI
(CI=true must run them)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"

TINY_NAME = "fltiny"  # a name no real repository uses: its image is forgeline/swesmith.<arch>.forgeline_1776_fltiny.<commit8>
TINY_FILES = {
    "README.md": "A tiny calculator, for sandbox tests.\n",
    f"{TINY_NAME}/__init__.py": "from fltiny.ops import add, mul, sub\n",
    f"{TINY_NAME}/ops.py": ("def add(a, b):\n    return a + b\n\n\n"
                            "def sub(a, b):\n    return a - b\n\n\n"
                            "def mul(a, b):\n    return a * b\n"),
    "tests/test_ops.py": ("from fltiny import add, mul, sub\n\n\n"
                          "def test_add():\n    assert add(2, 3) == 5\n\n\n"
                          "def test_sub():\n    assert sub(5, 3) == 2\n\n\n"
                          "def test_mul():\n    assert mul(4, 3) == 12\n"),
}


def unavailable(reason: str):
    """Skip locally; in CI a missing service is a failure, not a silent skip."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: tests of a service must run)", pytrace=False)
    pytest.skip(reason)


def write_tiny_repo(root: Path, files: dict[str, str] = TINY_FILES) -> Path:
    for rel, text in files.items():
        (root / TINY_NAME / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / TINY_NAME / rel).write_text(text)
    return root


@pytest.fixture(scope="session")
def docker_client():
    from forgeline.sandbox.base import SandboxError
    from forgeline.sandbox.engine import connect
    try:
        return connect()
    except SandboxError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def base_image(docker_client):
    """(ref, id) of the base image; its tarball is cached in the project's .forgeline/."""
    from embedded import PARAMS
    from forgeline.sandbox.images import ensure_base_image
    return ensure_base_image(docker_client, PARAMS.sandbox.docker.base_image, ROOT / ".forgeline")


@pytest.fixture(scope="session")
def tiny_snapshot(tmp_path_factory):
    from forgeline.tasks.repos import RepoSnapshot
    root = write_tiny_repo(tmp_path_factory.mktemp("repos"))
    return RepoSnapshot.load(root, TINY_NAME)


@pytest.fixture(scope="session")
def tiny_image(docker_client, base_image, tiny_snapshot):
    """The image record of the tiny repository (built once per machine, then reused)."""
    from embedded import PARAMS
    from forgeline.sandbox.images import build_repo_image
    record, _ = build_repo_image(docker_client, tiny_snapshot.env(),
                                 (ROOT / "envs" / "repo.Dockerfile").read_text(), base_image,
                                 base_section=PARAMS.sandbox.docker.base_image)
    return record


def answers(url: str) -> bool:
    import urllib.request
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def local_service(name: str, url: str) -> None:
    """Start scripts/services.sh's service NAME when nothing answers at URL; when it still does not
    answer, skip (fail in CI) with the reason and the script's last words."""
    if answers(url):
        return
    res = subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "start", name],
                         capture_output=True, text=True)
    if res.returncode != 0 or not answers(url):
        unavailable(f"no {name} at {url} (start it: bash scripts/services.sh start {name}): "
                    f"{res.stderr.strip()[-500:]}")


@pytest.fixture(scope="session")
def registry():
    """127.0.0.1:5000, started with scripts/services.sh when nothing answers there."""
    local_service("registry", "http://127.0.0.1:5000/v2/")
    return "127.0.0.1:5000"


@pytest.fixture(scope="session")
def s3_endpoint():
    """The S3-compatible store (moto's server) on 127.0.0.1:9000, started with scripts/services.sh
    when nothing answers there: the object-store DVC remote of the tests."""
    local_service("s3", "http://127.0.0.1:9000/")
    return "http://127.0.0.1:9000"


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> tuple[Path, str]:
    """A pure-Python wheel `NAME-VERSION-py3-none-any.whl` in `folder` that pip installs offline:
    `files` (path in the wheel -> text) and its dist-info (METADATA, WHEEL, RECORD); the same
    inputs give the same bytes. Returns (path, sha256 hex)."""
    import base64
    import hashlib
    import zipfile
    info = f"{name}-{version}.dist-info"
    members = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
               f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: forgeline-tests\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n"}

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    members[f"{info}/RECORD"] = "".join(f"{p},{digest(t)},{len(t.encode())}\n" for p, t in members.items()) \
        + f"{info}/RECORD,,\n"
    path = Path(folder) / f"{name}-{version}-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in members.items():
            zf.writestr(zipfile.ZipInfo(rel, date_time=(2000, 1, 1, 0, 0, 0)), text)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()
