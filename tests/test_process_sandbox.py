"""The process backend imports what the repository's image imports, beyond its interpreter's own
packages: the session's src/ in a src/ layout (the image's PYTHONPATH=/testbed/src) and the
snapshot's pinned test dependencies (the same wheel files, unpacked: images.wheel_site); the
rest of its allow-listed environment is unchanged. Where an engine answers, both backends give
the same verdicts on such a repository."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from conftest import ROOT, make_wheel
from embedded import PARAMS
from forgeline import config
from forgeline.sandbox import get_sandbox, images
from forgeline.sandbox.base import SandboxError, TaskEnv
from forgeline.sandbox.process import ALLOWED_ENV, ProcessSandbox
from forgeline.sandbox.snapshot import snapshot_env

BASE = PARAMS.sandbox.docker.base_image
NAME = "flsrcdeps"   # a src/-layout repository ...
DEP = "fltinydep"    # ... whose package imports a dependency no index has: only its pinned wheel
TEST = "tests/test_answer.py::test_answer"
FILES = {
    f"src/{NAME}/__init__.py": f"import {DEP}\n\n\ndef answer():\n    return {DEP}.VALUE\n",
    "tests/test_answer.py": f"from {NAME} import answer\n\n\ndef test_answer():\n    assert answer() == 42\n",
}
# the bug: in the session's copy of src/, so only a PYTHONPATH on the copy sees it
BUG = (f"diff --git a/src/{NAME}/__init__.py b/src/{NAME}/__init__.py\n"
       f"--- a/src/{NAME}/__init__.py\n+++ b/src/{NAME}/__init__.py\n"
       f"@@ -5 +5 @@\n-    return {DEP}.VALUE\n+    return {DEP}.VALUE + 1\n")


def write_repo(root: Path, cache: Path) -> TaskEnv:
    """The repository under `root`, its dependency's wheel in `cache`/wheels (as fetched)."""
    _, sha = make_wheel(cache / "wheels", DEP, "1.0", {f"{DEP}/__init__.py": "VALUE = 42\n"})
    for rel, text in {**FILES, images.LOCK_FILE: f"{DEP}==1.0 --hash=sha256:{sha}\n"}.items():
        (root / NAME / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / NAME / rel).write_text(text)
    return snapshot_env(root, NAME)


def python(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def test_src_layout_and_pinned_wheels_import(tmp_path):
    cache = tmp_path / "cache"
    env = write_repo(tmp_path / "repos", cache)
    sandbox = ProcessSandbox(python=sys.executable, base_image=BASE, cache_dir=cache)
    run = sandbox.run_tests(env, timeout_s=60)
    assert run.statuses == {TEST: "PASSED"}, run.log[-2000:]
    # the bug patch is in the session's copy of src/, and that copy is what the tests import
    assert sandbox.run_tests(env, [BUG], timeout_s=60).statuses == {TEST: "FAILED"}

    with sandbox.session(env) as s:
        where = s.exec(python(f"import {NAME}, {DEP}; print({NAME}.__file__); print({DEP}.__file__)"), 30)
        pkg, dep = where.output.split()
        assert Path(pkg) == s.workdir / "src" / NAME / "__init__.py", where.output
        assert Path(dep).parent.parent.parent == (cache / "wheels").resolve()  # wheels/site-<key>/DEP/
        # without that PYTHONPATH neither imports: the suite cannot even be collected
        bare = s.exec("unset PYTHONPATH; " + python("import pytest; raise SystemExit(pytest.main("
                                                    "['-q', '-p', 'no:cacheprovider', 'tests']))"), 60)
        assert bare.exit_code == 2 and f"No module named '{NAME}'" in bare.output, bare.output[-2000:]
        # src/ alone is not enough either: the dependency comes from the pinned wheel only
        src_only = s.exec(f"PYTHONPATH={shlex.quote(str(s.workdir / 'src'))} " + python(f"import {NAME}"), 30)
        assert src_only.exit_code == 1 and f"No module named '{DEP}'" in src_only.output
        # the environment is the allow-list plus PYTHONPATH, nothing else of this machine's
        shown = s.exec(python("import json, os; print(json.dumps(dict(os.environ)))"), 30).output
    import json
    seen = json.loads(shown.strip().splitlines()[-1])
    assert set(seen) - {"PWD", "SHLVL", "_"} == {
        *(k for k in ALLOWED_ENV if k in os.environ), "HOME", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
        "TZ", "LC_ALL", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH"}
    assert seen["PYTHONPATH"].split(os.pathsep)[0].endswith(f"/{NAME}/src")


def test_what_goes_on_pythonpath_and_where_the_wheels_come_from(tmp_path):
    cache = tmp_path / "cache"
    env = write_repo(tmp_path / "repos", cache)
    work = tmp_path / "copy"
    # from the config: its sandbox.docker.base_image chooses the wheels
    from_config = get_sandbox(config.merged(PARAMS.sandbox, {"backend": "process"}))
    assert isinstance(from_config, ProcessSandbox) and from_config.base_image is not None
    sandbox = ProcessSandbox(python=sys.executable, base_image=BASE, cache_dir=cache)
    site = images.wheel_site(env.source, cache, base_section=BASE)
    assert sandbox.python_path(env, work) == [work / "src", site]
    # a flat layout without a lock file: nothing added (the copy itself is pytest's rootdir)
    flat = tmp_path / "flat"
    (flat / "tests").mkdir(parents=True)
    assert sandbox.python_path(TaskEnv("flat", flat, "0" * 40), work) == []
    # pins without the config's base image: refused, naming what is missing, not run without them
    with pytest.raises(SandboxError, match="sandbox.docker.base_image"):
        ProcessSandbox(python=sys.executable).session(env)
    (flat / images.LOCK_FILE).write_text("# no test dependencies\n")
    assert ProcessSandbox(python=sys.executable).python_path(TaskEnv("flat", flat, "0" * 40), work) == []


@pytest.mark.docker
def test_the_image_and_the_process_backend_agree(docker_client, base_image, tmp_path):
    from forgeline.sandbox.docker import DockerSandbox
    cache = tmp_path / "cache"
    env = write_repo(tmp_path / "repos", cache)
    dockerfile = (ROOT / "envs" / "repo.Dockerfile").read_text()
    record, _ = images.build_repo_image(docker_client, env, dockerfile, base_image, cache, base_section=BASE)
    process = ProcessSandbox(python=sys.executable, base_image=BASE, cache_dir=cache)
    docker = DockerSandbox(client=docker_client, warm=0)
    try:
        for patches, status in (([], "PASSED"), ([BUG], "FAILED")):
            in_docker = docker.run_tests(env, patches, timeout_s=60)
            assert in_docker.statuses == {TEST: status}, in_docker.log[-2000:]
            assert process.run_tests(env, patches, timeout_s=60).statuses == in_docker.statuses
    finally:
        docker.close()
        docker_client.images.remove(record["image_id"], force=True)


def busy(cpu_s: float) -> str:
    """A command that computes for `cpu_s` seconds of its own CPU time, then says done."""
    return python(f"import time\nt = time.process_time()\nwhile time.process_time() - t < {cpu_s}:\n    pass\n"
                  "print('done')")


def test_a_limit_in_cpu_time_counts_the_commands_cpu_not_the_clock(tmp_path):
    """With cpu_time, a command that waits is not cut at its limit (only at 4x in wall time), a
    loop is cut at its limit of CPU, and the CPU of what the command started counts."""
    from forgeline.sandbox.base import WALL_BACKSTOP
    from forgeline.sandbox.process import run_shell
    slept = run_shell("sleep 1; echo slept", tmp_path, 0.5, cpu_time=True)
    assert (slept.exit_code, slept.output, slept.timed_out) == (0, "slept\n", False)
    assert run_shell("sleep 1; echo slept", tmp_path, 0.5).timed_out  # the same in wall time
    waits = run_shell("sleep 30", tmp_path, 0.5, cpu_time=True)
    assert waits.timed_out and waits.exit_code == -9 and 0.5 * WALL_BACKSTOP <= waits.duration_s < 5
    # the loop runs in a child of a child of bash: its CPU is the command's all the same
    loop = run_shell(f"bash -c {shlex.quote(busy(30) + '; true')}", tmp_path, 0.5, cpu_time=True)
    assert loop.timed_out and loop.exit_code == -9 and 0.5 <= loop.duration_s < 0.5 * WALL_BACKSTOP
    done = run_shell(busy(0.2), tmp_path, 1.0, cpu_time=True)
    assert (done.exit_code, done.output, done.timed_out) == (0, "done\n", False)
