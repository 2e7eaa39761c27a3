"""SIGKILL at any instant, then restart as docs/running.md says: nothing lost, nothing left over.

Real kills of real processes, placed by provenance.fault_point (FORGELINE_FAULT). The slow part
runs bench/crash_reliability.py's FAULTS on the real workflow over the tiny repositories; the
rest kills sandboxes (process and docker) and checks that the next one sweeps what they left.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from forgeline import provenance as prov

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


crash = _load("crash_reliability", ROOT / "bench" / "crash_reliability.py")


def _alive(pid: int) -> bool:
    stat = prov._proc_stat(pid)
    return stat is not None and stat[0] != "Z"


# -- the hook itself ------------------------------------------------------------------------

def test_a_run_fault_kills_the_whole_process_group(tmp_path):
    """FORGELINE_FAULT=POINT:NAME:run is a power loss: the job and everything in its process
    group (Snakemake, the other jobs) die at once."""
    code = textwrap.dedent("""
        import subprocess, sys
        from forgeline import provenance as p
        other = subprocess.Popen(["sleep", "60"])  # another job of the same run
        print(other.pid, flush=True)
        p.write_text("out.txt", "x")
    """)
    env = {**os.environ, prov.FAULT_ENV: "file.written:out.txt:run"}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, start_new_session=True)
    other = int(proc.stdout.readline())
    assert proc.wait(timeout=60) == -9
    for _ in range(50):
        if not _alive(other):
            break
        time.sleep(0.1)
    assert not _alive(other)
    assert not (tmp_path / "out.txt").exists()


# -- sandboxes ------------------------------------------------------------------------------

def _tiny_repo(root: Path) -> Path:
    (root / "tinyrepo" / "tinyrepo").mkdir(parents=True)
    (root / "tinyrepo" / "tinyrepo" / "__init__.py").write_text("x = 1\n")
    return root / "tinyrepo"


SESSION = """
import sys
from pathlib import Path
from forgeline.sandbox.base import TaskEnv
from forgeline.sandbox.process import ProcessSandbox
ProcessSandbox().session(TaskEnv("tinyrepo", Path(sys.argv[1]), "0" * 40)).close()
"""


def test_a_killed_process_sandbox_copy_is_swept_when_the_next_sandbox_starts(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    source = _tiny_repo(tmp_path)
    env = {**os.environ, "TMPDIR": str(tmp)}
    killed = subprocess.run([sys.executable, "-c", SESSION, str(source)], capture_output=True,
                            env={**env, prov.FAULT_ENV: "sandbox.ready:tinyrepo"})
    assert killed.returncode == -9, killed.stderr
    [left] = os.listdir(tmp)
    assert left.startswith("forgeline-tinyrepo~") and prov.owner_of(left)[2] == "gone"
    assert (tmp / left / "tinyrepo" / "tinyrepo" / "__init__.py").is_file()
    # temps the next sandbox must leave: a running owner's, another host's, and no owner at all
    me = prov.owner_tag()
    kept = {f"forgeline-x{me}abc", "forgeline-y~node17.cluster~4242~7~abc", "forgeline-services"}
    for name in kept:
        (tmp / name).mkdir()
    subprocess.run([sys.executable, "-c", SESSION, str(source)], env=env, check=True,
                   capture_output=True)
    assert set(os.listdir(tmp)) == kept


def test_validations_scratch_copy_is_owned(tmp_path, monkeypatch):
    """reverse_restores' scratch folder carries its owner, so a killed validate job's is swept."""
    from forgeline.tasks import validate
    seen = []
    real = prov.owned_tempdir

    def spy(stem):  # records the name the real owned temp dir got
        made = real(stem)
        seen.append(Path(made.name).name)
        return made
    monkeypatch.setattr(validate, "owned_tempdir", spy)
    source = _tiny_repo(tmp_path)
    patch = ("diff --git a/tinyrepo/__init__.py b/tinyrepo/__init__.py\n--- a/tinyrepo/__init__.py\n"
             "+++ b/tinyrepo/__init__.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    assert validate.reverse_restores(source, patch) is None
    [name] = seen
    assert name.startswith("forgeline-reverse~") and prov.owner_of(name)[:2] == (
        prov.owner_tag().split("~")[1], os.getpid())


DOCKER_CHILD = """
import sys
from pathlib import Path
from forgeline.sandbox.base import TaskEnv
from forgeline.sandbox.docker import DockerSandbox
sb = DockerSandbox(warm=0)
sb.session(TaskEnv(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.docker
def test_containers_of_a_killed_job_go_when_the_next_docker_sandbox_starts(docker_client, tiny_snapshot,
                                                                           tiny_image):
    from forgeline.sandbox.docker import LABEL_OWNER
    env = tiny_snapshot.env()
    proc = subprocess.Popen([sys.executable, "-c", DOCKER_CHILD, env.repo, str(env.source), env.commit,
                             env.image], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    label = f"{LABEL_OWNER}={os.uname().nodename}:{proc.pid}"
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert len(docker_client.containers.list(all=True, filters={"label": label})) == 1
        proc.kill()  # SIGKILL: no finally, no atexit
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    assert len(docker_client.containers.list(all=True, filters={"label": label})) == 1
    # another host's container on the same engine (a shared engine): never this host's to remove
    foreign = docker_client.containers.create(env.image, "true", labels={
        "forgeline.session": "crash-test", LABEL_OWNER: "node17.cluster:4242"})
    try:
        subprocess.run([sys.executable, "-c", "from forgeline.sandbox.docker import DockerSandbox\n"
                        "DockerSandbox(warm=0)"], cwd=ROOT, check=True, timeout=300)
        assert docker_client.containers.list(all=True, filters={"label": label}) == []
        foreign.reload()  # still there
    finally:
        foreign.remove(force=True)


# -- the workflow: bench/crash_reliability.py's faults ----------------------------------------

@pytest.fixture(scope="module")
def clean_build(tmp_path_factory):
    project = tmp_path_factory.mktemp("crash") / "project"
    yield project, crash.build(project)
    import shutil
    shutil.rmtree(crash.run_tmp(project), ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("fault", crash.FAULTS, ids=lambda f: f.spec.replace("/", "_"))
def test_a_killed_write_restarts_to_the_clean_artifacts(clean_build, fault):
    project, clean = clean_build
    out = crash.inject(project, fault, clean)
    assert out.fired, f"{fault.spec} was never reached in rule {fault.rule}"
    assert out.restarted
    assert out.lost == [] and out.leftovers == [] and out.verified, out
