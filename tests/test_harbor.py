"""Exporting the split as Harbor tasks: layout, determinism and digests; every task folder loaded
and linted by the REAL harbor package (0.25.0, in its own Python 3.12 venv, .venv-harbor/); the
oracle and the verifier run for real (process way, and in docker where an engine answers),
including a reward file planted before the verifier runs."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, make_wheel, unavailable
from embedded import PARAMS
from forgeline import cli, config as config_mod
from forgeline.sandbox import images
from forgeline.tasks import harbor
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import instance_id
from tiny_project import TINY_REPOS, write_repo
import venvs

SPLIT_NAMES = ("test", "train", "val")

# gamma's suite has a skipped and an xfail test; its P2P holds the xfail one (XFAIL passes, SKIPPED
# would fail: docs/grading.md)
GAMMA_EXTRA_TESTS = ("\n\nimport pytest\n\n\n@pytest.mark.skip(reason='not today')\ndef test_skipped():\n"
                     "    assert False\n\n\n@pytest.mark.xfail(reason='known')\ndef test_known_bad():\n"
                     "    assert span([1]) == 1\n")
# alpha's tests need a third-party package, pinned in its lock file: a wheel built here (no index
# has it), which the export must carry and install for the test to pass
DEP, DEP_WHEEL = "fltinydep", "fltinydep-1.0-py3-none-any.whl"
ALPHA_EXTRA_TESTS = (f"\n\nimport {DEP}\n\n\ndef test_pinned_dependency():\n"
                     f"    assert add({DEP}.VALUE, 0) == 42\n")
# (repo, source line, bugged line, FAIL_TO_PASS, PASS_TO_PASS) over tiny_project.TINY_REPOS
BUGS = {
    "alpha": ("    return a + b\n", "    return a - b\n",
              ["test_add", "test_add_zero"],
              ["test_clamp_edge", "test_clamp_high", "test_clamp_low", "test_pinned_dependency"]),
    "beta": ("        if x > t:\n", "        if x >= t:\n",
             ["test_count_above_edge"], ["test_count_above", "test_scale"]),
    "gamma": ("    return n % 2 == 0\n", "    return n % 2 == 1\n",
              ["test_even", "test_odd"], ["test_known_bad", "test_span"]),
}
# sigma has a src/ layout (src/sigma/): its tests import it only with src/ on PYTHONPATH, as
# forgeline's image has it (envs/repo.Dockerfile); exported apart, a split of its own
SRC_REPO = "sigma"
SRC_BUGS = {SRC_REPO: ("    return sum(xs) / len(xs)\n", "    return sum(xs) // len(xs)\n",
                       ["test_mean_half"], ["test_mean_whole"])}
# an agent's src/pytest.py: with src/ on pytest's PYTHONPATH it is what RUNNER's `import pytest`
# finds, and it writes every test asked for as PASSED to the results file (RUNNER's argv[1])
FAKE_PYTEST = ("import json, sys\n\n\ndef main(args, plugins=()):\n"
               "    with open(sys.argv[1], 'a') as out:\n"
               "        for test in (a for a in args if '::' in a):\n"
               "            out.write(json.dumps({'id': test, 'when': 'call', 'outcome': 'passed'}) + '\\n')\n"
               "    return 0\n")


def make_patch(rel: str, before: str, after: str) -> str:
    import difflib
    body = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{rel}", f"b/{rel}"))
    return f"diff --git a/{rel} b/{rel}\n{body}"


def write_repos(root: Path, cache: Path) -> None:
    """The repositories under `root`; the wheel alpha pins, as fetched, in `cache`/wheels."""
    extra = {"alpha": ALPHA_EXTRA_TESTS, "gamma": GAMMA_EXTRA_TESTS}
    for name, (source, tests) in TINY_REPOS.items():
        write_repo(root, name, source, tests + extra.get(name, ""))
    _, sha = make_wheel(cache / "wheels", DEP, "1.0", {f"{DEP}/__init__.py": "VALUE = 42\n"})
    (root / "alpha" / images.LOCK_FILE).write_text(f"{DEP}==1.0 \\\n    --hash=sha256:{sha}\n")
    # a name that sorts differently as a string ("alpha-notes" < "alpha/") and as a Path
    (root / "alpha" / "alpha-notes.txt").write_text("notes\n")
    (root / "alpha" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "alpha" / "run.sh", 0o755)
    # a conftest the verifier must restore
    (root / "beta" / "tests" / "conftest.py").write_text("import pytest\n\n\n@pytest.fixture\n"
                                                         "def three():\n    return 3\n")


def write_src_repo(root: Path) -> None:
    """sigma under `root`: its package in src/sigma/, its tests in tests/."""
    (root / SRC_REPO / "src" / SRC_REPO).mkdir(parents=True)
    (root / SRC_REPO / "tests").mkdir()
    (root / SRC_REPO / "src" / SRC_REPO / "__init__.py").write_text(
        "def mean(xs):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(xs) / len(xs)\n")
    (root / SRC_REPO / "tests" / f"test_{SRC_REPO}.py").write_text(
        f"from {SRC_REPO} import mean\n\n\ndef test_mean_half():\n    assert mean([1, 2]) == 1.5\n\n\n"
        "def test_mean_whole():\n    assert mean([2, 4]) == 3\n")


def instances(repos: Path, bugs: dict = BUGS) -> list[dict]:
    out = []
    for name, (old, new, f2p, p2p) in bugs.items():
        snap = RepoSnapshot.load(repos, name)
        module = f"{name}/__init__.py" if (snap.path / name).is_dir() else f"src/{name}/__init__.py"
        source = (snap.path / module).read_text()
        assert old in source
        patch = make_patch(module, source, source.replace(old, new, 1))
        tfile = f"tests/test_{name}.py"
        out.append({
            "instance_id": instance_id(snap.repo_name, "op_swap",
                                       hashlib.sha256(patch.encode()).hexdigest()),
            "repo": snap.repo, "base_commit": snap.commit, "image_name": snap.image,
            "created_at": "2000-01-01T00:00:00Z", "patch": patch,
            "FAIL_TO_PASS": [f"{tfile}::{t}" for t in f2p],
            "PASS_TO_PASS": [f"{tfile}::{t}" for t in p2p],
            "problem_statement": f"{name} misbehaves\n\nSomething in `{name}` returns the wrong "
                                 f"value (`{tfile}::{f2p[0]}` fails). \"Quotes\" and \\ too.\n",
            "bug_type": "op_swap", "mutation": f"{old.strip()} -> {new.strip()}",
        })
    return out


def write_config(tmp: Path, repos: Path) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["repos"] = {"root": str(repos), "pool": sorted(TINY_REPOS), "sft": [], "panel": []}
    params["sandbox"]["backend"] = "process"
    params["tasks"]["split"]["fractions"] = {"train": 0.34, "val": 0.33, "test": 0.33}
    params["tasks"]["split"]["frozen_digest"] = None
    params["tasks"]["split"]["frozen_manifest"] = None
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def harbor_argv(config: Path, split_dir: Path, out: Path) -> list[str]:
    return ["harbor", "--config", str(config), "--split-dir", str(split_dir),
            "--out-dir", str(out), "--manifest", str(out / "manifest.json"),
            "--cache-dir", str(config.parent / "cache")]


@pytest.fixture(autouse=True)
def _wired(monkeypatch):
    """The stage in the CLI, as the lead will wire it; cli.main's log handlers removed after."""
    monkeypatch.setitem(cli.STAGES, "harbor", ("forgeline.tasks.harbor",
                                               "export the split as Harbor task folders"))
    yield
    import logging
    logging.getLogger().handlers.clear()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Three tiny repositories, their validated-like tasks, the real `forgeline split` of them,
    and one `forgeline harbor` export: {root, repos, config, split, out, seconds}."""
    root = tmp_path_factory.mktemp("harbor")
    repos = root / "repos"
    write_repos(repos, root / "cache")
    tasks = root / "validated.jsonl"
    tasks.write_text("".join(json.dumps(i) + "\n" for i in instances(repos)))
    config = write_config(root, repos)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(cli.STAGES, "harbor", ("forgeline.tasks.harbor", "export"))
        assert cli.main(["split", "--config", str(config), "--tasks", str(tasks),
                         "--out-dir", str(root / "split"),
                         "--manifest", str(root / "split" / "manifest.json")]) == 0
        t0 = time.perf_counter()
        assert cli.main(harbor_argv(config, root / "split", root / "out")) == 0
        seconds = time.perf_counter() - t0
    return {"root": root, "repos": repos, "config": config, "split": root / "split",
            "out": root / "out", "seconds": seconds}


@pytest.fixture(scope="module")
def src_project(tmp_path_factory) -> Path:
    """sigma (a src/ layout), its task as a split of one, and its export: the task folder."""
    root = tmp_path_factory.mktemp("harbor-src")
    write_src_repo(root / "repos")
    (root / "split").mkdir()
    (root / "split" / "test.jsonl").write_text(
        "".join(json.dumps(i) + "\n" for i in instances(root / "repos", SRC_BUGS)))
    config = write_config(root, root / "repos")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(cli.STAGES, "harbor", ("forgeline.tasks.harbor", "export"))
        assert cli.main(harbor_argv(config, root / "split", root / "out")) == 0
    (task,) = (root / "out" / "test").iterdir()
    return task


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def task_dirs(out: Path) -> list[Path]:
    return sorted(p for name in SPLIT_NAMES for p in (out / name).iterdir())


def task_dir_of(out: Path, repo: str) -> Path:
    (found,) = [d for d in task_dirs(out) if d.name.startswith(f"forgeline__{repo}.")]
    return found


# -- the export ----------------------------------------------------------------------------

def test_layout_and_task_toml(project):
    out = project["out"]
    split_json = json.loads((project["split"] / "split.json").read_text())
    index = json.loads((out / "index.json").read_text())
    assert index["split_digest"] == split_json["digest"]
    assert index["counts"] == {"test": 1, "train": 1, "val": 1}
    assert {n: sorted(v) for n, v in index["tasks"].items()} == \
        {n: sorted(i for i, _ in rows) for n, rows in split_json["instances"].items()}
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "manifest.json", *SPLIT_NAMES]
    assert not list(out.parent.glob(".out.*")), "temp siblings left behind"

    task = task_dir_of(out, "beta")
    split_name = task.parent.name
    files = sorted(p.relative_to(task).as_posix() for p in task.rglob("*") if p.is_file())
    assert files == sorted([
        "instruction.md", "task.toml", "environment/Dockerfile", "environment/bug.patch",
        "environment/repo/beta/__init__.py", "environment/repo/tests/conftest.py",
        "environment/repo/tests/test_beta.py", "solution/solve.sh", "solution/bug.patch",
        "tests/test.sh", "tests/grade.py", "tests/forgeline_grading.py", "tests/config.json",
        "tests/original/tests/conftest.py", "tests/original/tests/test_beta.py"])
    for script in ("solution/solve.sh", "tests/test.sh"):
        assert os.access(task / script, os.X_OK)
    assert os.access(task_dir_of(out, "alpha") / "environment/repo/run.sh", os.X_OK)

    inst = {i["instance_id"]: i for n in SPLIT_NAMES
            for i in map(json.loads, (project["split"] / f"{n}.jsonl").read_text().splitlines())}
    iid = task.name
    conf = tomllib.loads((task / "task.toml").read_text())
    snap = RepoSnapshot.load(project["repos"], "beta")
    assert conf["schema_version"] == "1.4" and conf["artifacts"] == ["/testbed"]
    assert conf["task"] == {"name": f"forgeline/{iid}"}
    assert conf["metadata"] == {
        "instance_id": iid, "repo": snap.repo, "base_commit": snap.commit, "split": split_name,
        "bug_type": "op_swap", "split_digest": split_json["digest"],
        "split_digest_scheme": "forgeline.split.v1",
        "content_digest": dict(split_json["instances"][split_name])[iid],
        "repo_image": snap.image, "fail_to_pass": 1, "pass_to_pass": 2}
    # the verifier's limit: the config's test limit plus harbor.VERIFIER_MARGIN_S
    assert conf["verifier"] == {"timeout_sec": PARAMS.sandbox.test_timeout_s + 60.0,
                                "environment_mode": "separate", "user": "root"}
    assert conf["agent"] == {"timeout_sec": 1800.0, "user": "forgeline"}
    # no docker_image: Harbor would run it INSTEAD of building the Dockerfile (no bug in it)
    assert conf["environment"] == {"cpus": 1, "memory_mb": 1024, "network_mode": "no-network"}

    text = (task / "instruction.md").read_text()
    assert text.startswith(inst[iid]["problem_statement"].strip("\n")) and "`/testbed`" in text
    assert (task / "environment/bug.patch").read_text() == inst[iid]["patch"]
    assert (task / "solution/bug.patch").read_text() == inst[iid]["patch"]
    assert (task / "tests/forgeline_grading.py").read_text() == \
        (ROOT / "src/forgeline/sandbox/grading.py").read_text()
    cfg = json.loads((task / "tests/config.json").read_text())
    assert cfg["fail_to_pass"] == inst[iid]["FAIL_TO_PASS"]
    assert cfg["pass_to_pass"] == inst[iid]["PASS_TO_PASS"]
    assert cfg["restore"] == ["tests/conftest.py", "tests/test_beta.py"]
    assert cfg["test_timeout_s"] == float(PARAMS.sandbox.test_timeout_s)
    dockerfile = (task / "environment/Dockerfile").read_text()
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in dockerfile
    packages = yaml.safe_load((ROOT / "params.yaml").read_text())["sandbox"]["docker"]["base_image"]["packages"]
    assert "apt-get install" in dockerfile and " ".join(sorted(packages)) in dockerfile


def test_pinned_wheels_travel_with_the_environment(project):
    """alpha pins a test dependency: its task carries the very wheel file (sha256 of the lock
    file) and installs it offline with the image stage's command; beta pins none: no wheels/, no
    pip step."""
    out = project["out"]
    alpha, beta = task_dir_of(out, "alpha"), task_dir_of(out, "beta")
    (pin,) = images.read_lock((project["repos"] / "alpha" / images.LOCK_FILE).read_text())
    wheel = alpha / "environment" / "wheels" / DEP_WHEEL
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == pin.hashes[0]
    assert wheel.read_bytes() == (project["root"] / "cache" / "wheels" / DEP_WHEEL).read_bytes()
    assert sorted(p.name for p in (alpha / "environment" / "wheels").iterdir()) == [DEP_WHEEL, "requirements.txt"]
    assert (alpha / "environment" / "wheels" / "requirements.txt").read_text() == \
        f"{DEP}==1.0 --hash=sha256:{pin.hashes[0]}\n"
    dockerfile = (alpha / "environment" / "Dockerfile").read_text()
    assert f"COPY wheels/ {images.WHEEL_INSTALL_DIR}/\n" in dockerfile
    assert f"    {images.WHEEL_INSTALL}; \\\n" in dockerfile and "python3 -m pip --version" in dockerfile
    assert not (beta / "environment" / "wheels").exists()
    plain = (beta / "environment" / "Dockerfile").read_text()
    assert "wheels" not in plain and "pip install" not in plain and "pip --version" not in plain
    # listed with the export's inputs
    manifest = json.loads((out / "manifest.json").read_text())
    inputs = {i["path"]: i for i in manifest["inputs"]}
    assert inputs[str(project["root"] / "cache" / "wheels" / DEP_WHEEL)]["sha256"] == pin.hashes[0]


def test_src_layout_puts_src_on_the_python_path(project, src_project):
    """sigma's package is under src/: its Dockerfile sets the image's PYTHONPATH=/testbed/src and
    its grade.py runs pytest with the testbed's src/ on PYTHONPATH and tidies src/ as the root; a
    flat snapshot's task has none of these lines (its grade.py is sigma's less them)."""
    dockerfile = (src_project / "environment" / "Dockerfile").read_text()
    assert "\nENV PYTHONPATH=/testbed/src\n\nCOPY repo/ /testbed/\n" in dockerfile
    grade = (src_project / "tests" / "grade.py").read_text()
    flat = grade
    for lines in harbor.GRADE_SRC_LAYOUT_SLOTS.values():
        assert grade.count(lines) == 1
        flat = flat.replace(lines, "")
    assert "__SRC_LAYOUT_" not in grade
    compile(grade, "grade.py", "exec")
    for task in task_dirs(project["out"]):
        assert "PYTHONPATH" not in (task / "environment" / "Dockerfile").read_text()
        assert (task / "tests" / "grade.py").read_text() == flat


def test_digests_are_harbors_and_the_export_is_deterministic(project, tmp_path):
    out = project["out"]
    index = json.loads((out / "index.json").read_text())
    for name, rows in index["tasks"].items():
        for iid, digest in rows.items():
            files = tree(out / name / iid)
            # sorted as strings: "environment/repo/alpha-notes.txt" before ".../alpha/__init__.py"
            lines = "".join(f"{rel}\0{hashlib.sha256(files[rel]).hexdigest()}\n"
                            for rel in sorted(files))
            assert hashlib.sha256(lines.encode()).hexdigest() == digest == harbor.task_digest(files)
    before = {k: v for k, v in tree(out).items() if k != "manifest.json"}
    # again into the same out-dir (replaced whole) and into another: the same bytes
    assert cli.main(harbor_argv(project["config"], project["split"], out)) == 0
    other = tmp_path / "again"
    assert cli.main(harbor_argv(project["config"], project["split"], other)) == 0
    assert {k: v for k, v in tree(out).items() if k != "manifest.json"} == before
    assert {k: v for k, v in tree(other).items() if k != "manifest.json"} == before
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "harbor" and manifest["notes"]["split_digest"] == index["split_digest"]
    assert [Path(o["path"]).name for o in manifest["outputs"]] == [*SPLIT_NAMES, "index.json"]


def test_refusals(project, tmp_path):
    config, split = project["config"], project["split"]
    # an out-dir with files this stage did not write is not replaced
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me\n")
    assert cli.main(harbor_argv(config, split, foreign)) == 2
    assert (foreign / "precious.txt").read_text() == "keep me\n"
    # an out-dir that holds the split itself
    assert cli.main(harbor_argv(config, split, split.parent)) == 2
    # a split folder whose files no longer match its split.json
    edited = tmp_path / "split"
    shutil.copytree(split, edited)
    rows = (edited / "val.jsonl").read_text().splitlines()
    rec = json.loads(rows[0])
    rec["problem_statement"] += "edited\n"
    (edited / "val.jsonl").write_text(json.dumps(rec) + "\n" + "".join(r + "\n" for r in rows[1:]))
    assert cli.main(harbor_argv(config, edited, tmp_path / "o1")) == 2
    assert not (tmp_path / "o1").exists()


def test_bad_exports_raise():
    sandbox = config_mod.merged(PARAMS.sandbox, {"test_timeout_s": 5, "docker": {"cpus": 2.5}})
    settings = harbor.settings_from_config(sandbox)
    assert settings.cpus == 2.5 and settings.verifier_timeout_s == 65.0
    snap = {"pkg/__init__.py": (b"x = 1\n", 0o644), "tests/test_x.py": (b"def test(): pass\n", 0o644)}
    inst = {"instance_id": "pkg.00000000.op_swap__00000000", "repo": "pkg", "patch":
            make_patch("tests/test_x.py", "def test(): pass\n", "def test(): 0\n"),
            "FAIL_TO_PASS": ["tests/test_x.py::test"], "PASS_TO_PASS": [],
            "problem_statement": "p\n"}
    src = harbor.grading_module_source()
    with pytest.raises(ValueError, match="changes test/config files"):
        harbor.task_files(inst, "test", "d", snap, "img", settings, src)
    with pytest.raises(ValueError, match="cannot name a task folder"):
        harbor.task_files({**inst, "instance_id": "../evil"}, "test", "d", snap, "img", settings, src)
    with pytest.raises(ValueError, match="dropped by Harbor"):
        harbor.task_files(inst, "test", "d", {**snap, "pkg/x.py~": (b"", 0o644)}, "img",
                          settings, src)


def test_templates_are_package_data():
    """Every file of tasks/harbor_files/ is read through importlib.resources and matched by a
    package-data pattern of pyproject.toml, so a wheel (not only an editable install) ships it."""
    folder = Path(harbor.__file__).parent / harbor.TEMPLATE_DIR
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    assert names == ["Dockerfile.in", "grade.py", "solve.sh.in", "test.sh.in"]
    for name in names:
        assert harbor.template(name).encode("utf-8") == (folder / name).read_bytes()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["forgeline"]
    package = folder.parents[1]
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    assert {folder / n for n in names} <= shipped
    compile(harbor.template("grade.py"), "grade.py", "exec")  # the verifier is a program as it is


def test_toml_strings_round_trip():
    tricky = 'quote " backslash \\ newline \n tab \t del \x7f nul \x00 unicode é \u2028 end'
    text = harbor.render_toml({"a": tricky, "n": 3, "f": 1.5, "b": True, "l": ["x", "y"]},
                              [("t", {"odd key": tricky, "skip": None})])
    assert tomllib.loads(text) == {"a": tricky, "n": 3, "f": 1.5, "b": True, "l": ["x", "y"],
                                   "t": {"odd key": tricky}}


# -- the real harbor package ---------------------------------------------------------------

@pytest.fixture(scope="session")
def harbor_python() -> Path:
    """.venv-harbor/bin/python with envs/harbor-requirements.txt installed (tests/venvs.py:
    created once, reused while the requirements' sha256 matches its stamp)."""
    try:
        return venvs.ensure(venvs.HARBOR)
    except venvs.VenvError as exc:
        unavailable(str(exc))


LOADER = r"""
import json, sys, warnings
from pathlib import Path
warnings.simplefilter("error", DeprecationWarning)   # no deprecated field may be in use
from harbor.models.task.task import Task
from harbor.models.task.config import TaskConfig
from harbor.models.task.verifier_mode import (resolve_task_verifier_mode,
                                              resolve_verifier_environment_definition)
from harbor.publisher.packager import Packager
out = {}
for d in map(Path, sys.argv[1:]):
    task = Task(d)                                  # the loader: parses task.toml, checks files
    cfg = task.config
    definition = resolve_verifier_environment_definition(cfg, task.paths)
    out[d.name] = {
        "valid": Task.is_valid_dir(d),
        "name": task.name, "short_name": task.short_name,
        "instruction": task.instruction,
        "digest": Packager.compute_content_hash(d)[0],
        "files": [p.relative_to(d).as_posix() for p in Packager.collect_files(d)],
        "test_script": task.paths.discovered_test_path.relative_to(d).as_posix(),
        "solve_script": task.paths.discovered_solve_path.relative_to(d).as_posix(),
        "verifier_mode": resolve_task_verifier_mode(cfg).value,
        "verifier_env_dir": definition.directory.relative_to(d).as_posix(),
        "bundled_tests": definition.bundled_tests,
        "docker_image": cfg.environment.docker_image,
        "network_mode": cfg.environment.network_mode.value,
        "cpus": cfg.environment.cpus, "memory_mb": cfg.environment.memory_mb,
        "agent": [cfg.agent.timeout_sec, cfg.agent.user],
        "verifier": [cfg.verifier.timeout_sec, cfg.verifier.user],
        "artifacts": [str(a) for a in cfg.artifacts],
        "metadata": cfg.metadata,
        "dump_round_trip": TaskConfig.model_validate_toml(cfg.model_dump_toml()) == cfg,
    }
print(json.dumps(out))
"""


def test_harbor_loads_and_lints_every_task(project, src_project, harbor_python, tmp_path):
    out = project["out"]
    dirs = [*task_dirs(out), src_project]
    t0 = time.perf_counter()
    res = subprocess.run([harbor_python, "-c", LOADER, *map(str, dirs)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout)
    for d in dirs:
        got = loaded[d.name]
        assert got["valid"] and got["name"] == f"forgeline/{d.name}" and got["short_name"] == d.name
        assert got["instruction"] == (d / "instruction.md").read_text()
        index = json.loads((d.parents[1] / "index.json").read_text())
        assert got["digest"] == index["tasks"][d.parent.name][d.name]  # Harbor's own hash
        assert got["files"] == sorted(tree(d))  # Harbor would publish every file, no more
        assert got["test_script"] == "tests/test.sh" and got["solve_script"] == "solution/solve.sh"
        assert got["verifier_mode"] == "separate" and got["verifier_env_dir"] == "environment"
        assert got["bundled_tests"] is False and got["docker_image"] is None
        assert (got["network_mode"], got["cpus"], got["memory_mb"]) == ("no-network", 1, 1024)
        assert got["agent"] == [1800.0, "forgeline"] and got["verifier"] == [PARAMS.sandbox.test_timeout_s + 60.0, "root"]
        assert got["artifacts"] == ["/testbed"]  # the agent's repo, copied to the verifier
        assert got["metadata"]["instance_id"] == d.name and got["dump_round_trip"]

    # Harbor's linter, every rule on (root agent, unpinned images, shared verifier, unknown
    # fields, test files leaking into the agent image, ...): no finding
    lint = [str(harbor_python), "-m", "harbor.cli.main", "lint", "--select", "ALL", "--json"]
    res = subprocess.run([*lint, *map(str, dirs)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and json.loads(res.stdout) == [], res.stdout + res.stderr[-2000:]

    # ... and the linter bites: a wrong network mode and an unknown field are findings
    bad = tmp_path / dirs[0].name
    shutil.copytree(dirs[0], bad)
    toml_text = (bad / "task.toml").read_text()
    (bad / "task.toml").write_text(toml_text.replace('network_mode = "no-network"',
                                                     'network_mode = "none"\ndocker_imag = "x"'))
    res = subprocess.run([*lint, str(bad)], capture_output=True, text=True, timeout=300)
    rules = sorted({f["rule"] for f in json.loads(res.stdout)})
    assert res.returncode == 1 and rules == ["invalid-task-config", "unknown-config-field"], res.stdout
    print(f"\nharbor export of 3 tasks {project['seconds']:.2f} s; harbor load + lint "
          f"{time.perf_counter() - t0:.1f} s")


# -- the oracle and the verifier, for real -------------------------------------------------

def _testbed(task: Path, dest: Path) -> Path:
    """What the task's Dockerfile builds: the snapshot with the bug patch applied."""
    shutil.copytree(task / "environment" / "repo", dest)
    subprocess.run(["git", "apply", str(task / "environment" / "bug.patch")], cwd=dest, check=True)
    return dest


def _verify(task: Path, testbed: Path, logs: Path) -> tuple[str, dict]:
    env = {**os.environ, "TESTBED": str(testbed), "LOGS_DIR": str(logs),
           "FORGELINE_PYTHON": sys.executable}
    res = subprocess.run(["bash", str(task / "tests" / "test.sh")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((logs / "verifier" / "report.json").read_text())
    assert not (logs / "verifier" / "reward.json").exists()
    return (logs / "verifier" / "reward.txt").read_text(), report


def test_oracle_and_verifier_in_process(project, tmp_path):
    task = task_dir_of(project["out"], "gamma")
    # no fix, and a reward planted before the verifier runs: the verifier writes 0
    bugged = _testbed(task, tmp_path / "bugged")
    (tmp_path / "logs1" / "verifier").mkdir(parents=True)
    (tmp_path / "logs1" / "verifier" / "reward.txt").write_text("1\n")
    (tmp_path / "logs1" / "verifier" / "reward.json").write_text('{"reward": 1}\n')
    reward, report = _verify(task, bugged, tmp_path / "logs1")
    assert reward == "0\n" and not report["resolved"]
    assert report["fail_to_pass"] == {"passed": 0, "total": 2}
    assert report["pass_to_pass"] == {"passed": 2, "total": 2}  # XFAIL passes P2P

    # the oracle: solve.sh, then the verifier writes 1
    fixed = _testbed(task, tmp_path / "fixed")
    res = subprocess.run(["bash", str(task / "solution" / "solve.sh")],
                         env={**os.environ, "TESTBED": str(fixed)}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (fixed / "gamma" / "__init__.py").read_text() == \
        (task / "environment" / "repo" / "gamma" / "__init__.py").read_text()
    t0 = time.perf_counter()
    reward, report = _verify(task, fixed, tmp_path / "logs2")
    print(f"\nverifier (process) {time.perf_counter() - t0:.2f} s")
    assert reward == "1\n" and report["resolved"], report
    assert report["fail_to_pass"] == {"passed": 2, "total": 2} and report["removed"] == []

    # tampering instead of fixing: rewritten tests, a conftest that passes everything, a
    # shadowing module, a .pth file: all undone, reward 0
    cheat = _testbed(task, tmp_path / "cheat")
    (cheat / "tests" / "test_gamma.py").write_text(
        "def test_even():\n    pass\n\n\ndef test_odd():\n    pass\n\n\ndef test_span():\n    pass\n")
    (cheat / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport():\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
    (cheat / "gamma" / "evil.pth").write_text("import os\n")
    (cheat / "tests" / "test_extra.py").write_text("def test_x():\n    pass\n")
    (cheat / "pytest").mkdir()  # a package that would shadow pytest itself
    (cheat / "pytest" / "__init__.py").write_text("raise SystemExit(0)\n")
    (cheat / ".hidden").mkdir()
    (cheat / ".hidden" / "x.py").write_text("")
    (cheat / "gamma" / "link.py").symlink_to("/etc/hostname")
    (cheat / "gamma" / "__pycache__").mkdir()
    reward, report = _verify(task, cheat, tmp_path / "logs3")
    assert reward == "0\n" and not report["resolved"]
    assert report["removed"] == [".hidden/", "conftest.py", "gamma/__pycache__/", "gamma/evil.pth",
                                 "gamma/link.py", "pytest/", "tests/test_extra.py"]
    assert report["restored"] == ["tests/test_gamma.py"]

    # a verifier that cannot run at all still writes a reward: 0
    logs4 = tmp_path / "logs4"
    (logs4 / "verifier").mkdir(parents=True)
    (logs4 / "verifier" / "reward.txt").write_text("1\n")
    res = subprocess.run(["bash", str(task / "tests" / "test.sh")], capture_output=True, text=True,
                         env={**os.environ, "TESTBED": str(fixed), "LOGS_DIR": str(logs4),
                              "FORGELINE_PYTHON": str(tmp_path / "no-such-python")})
    assert res.returncode == 0 and (logs4 / "verifier" / "reward.txt").read_text() == "0\n"


def test_src_layout_oracle_and_verifier_in_process(src_project, tmp_path):
    """sigma's bug is graded 0 and the oracle's fix 1; with a flat task's grade.py (no src/ on
    PYTHONPATH) even the fix is graded 0: the tests cannot import sigma."""
    task = src_project
    reward, report = _verify(task, _testbed(task, tmp_path / "bugged"), tmp_path / "logs1")
    assert reward == "0\n" and not report["resolved"]
    assert report["fail_to_pass"] == {"passed": 0, "total": 1}
    assert report["pass_to_pass"] == {"passed": 1, "total": 1}
    fixed = _testbed(task, tmp_path / "fixed")
    res = subprocess.run(["bash", str(task / "solution" / "solve.sh")],
                         env={**os.environ, "TESTBED": str(fixed)}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    reward, report = _verify(task, fixed, tmp_path / "logs2")
    assert reward == "1\n" and report["resolved"], report

    flat = tmp_path / "flat"
    shutil.copytree(task, flat)
    (flat / "tests" / "grade.py").write_text(harbor.grade_program(src_layout=False))
    reward, report = _verify(flat, fixed, tmp_path / "logs3")
    assert reward == "0\n" and report["pass_to_pass"] == {"passed": 0, "total": 1}


def test_src_layout_tidy_removes_what_shadows_pytest(src_project, tmp_path):
    """src/ is on pytest's PYTHONPATH, so an agent's src/pytest.py would BE pytest: it is removed
    (with src/_pytest/ and any new top-level name under src/, the root's rule) and the bug is
    graded 0, where grade.py without the src/ tidy grades the fake 1. A fix by hand, an edited
    src/sigma/__init__.py that imports a module new inside the package, is kept and graded 1."""
    task = src_project

    def plant(testbed: Path) -> Path:
        (testbed / "src" / "pytest.py").write_text(FAKE_PYTEST)
        (testbed / "src" / "_pytest").mkdir()
        (testbed / "src" / "_pytest" / "__init__.py").write_text("")
        return testbed

    reward, report = _verify(task, plant(_testbed(task, tmp_path / "cheat")), tmp_path / "logs1")
    assert reward == "0\n" and not report["resolved"], report
    assert report["removed"] == ["src/_pytest/", "src/pytest.py"]
    assert report["fail_to_pass"] == {"passed": 0, "total": 1}

    unguarded = tmp_path / "unguarded"
    shutil.copytree(task, unguarded)
    (unguarded / "tests" / "grade.py").write_text(
        harbor.grade_program(src_layout=True).replace(harbor.GRADE_SRC_LAYOUT_TIDY, ""))
    reward, report = _verify(unguarded, plant(_testbed(task, tmp_path / "cheat2")), tmp_path / "logs2")
    assert reward == "1\n" and report["removed"] == [], "the fake pytest no longer fakes"

    fixed = plant(_testbed(task, tmp_path / "fixed"))
    package = fixed / "src" / SRC_REPO
    (package / "_mean.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n")
    (package / "__init__.py").write_text(f"from {SRC_REPO}._mean import mean  # noqa: F401\n")
    reward, report = _verify(task, fixed, tmp_path / "logs3")
    assert reward == "1\n" and report["resolved"], report
    assert report["removed"] == ["src/_pytest/", "src/pytest.py"]
    assert (package / "_mean.py").is_file()


# -- docker --------------------------------------------------------------------------------

def _put_dir(container, src: Path, dest: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(src), arcname=dest.lstrip("/"))
    container.put_archive("/", buf.getvalue())


def _sh(container, cmd: str, user: str = "root") -> tuple[int, str]:
    code, out = container.exec_run(["bash", "-c", cmd], user=user)
    return code, out.decode(errors="replace")


@contextlib.contextmanager
def _task_containers(docker_client, base_image, task: Path):
    """Build the task's environment/Dockerfile offline (BASE_IMAGE = forgeline's base); yields
    (start, build seconds), start() running a fresh container with /tests and /solution uploaded
    and /logs made, as Harbor does. The containers and the image are removed after."""
    tag = f"forgeline/harbortest:{hashlib.sha256(task.name.encode()).hexdigest()[:8]}"
    t0 = time.perf_counter()
    image, _ = docker_client.images.build(path=str(task / "environment"), tag=tag, rm=True,
                                          forcerm=True, network_mode="none", pull=False,
                                          buildargs={"BASE_IMAGE": base_image[0]})
    build_s = time.perf_counter() - t0
    containers = []

    def start():
        c = docker_client.containers.run(image.id, ["sleep", "infinity"], detach=True,
                                         network_mode="none", remove=True)
        containers.append(c)
        _put_dir(c, task / "tests", "/tests")
        _put_dir(c, task / "solution", "/solution")
        assert _sh(c, "mkdir -p /logs/verifier /logs/agent && chmod 777 /logs/verifier")[0] == 0
        return c

    try:
        yield start, build_s
    finally:
        for c in containers:
            with contextlib.suppress(Exception):
                c.remove(force=True)
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


@pytest.mark.docker
def test_task_environment_builds_and_grades_in_docker(project, docker_client, base_image):
    """Build environment/Dockerfile offline (BASE_IMAGE = forgeline's base), then what Harbor
    does: the oracle as the agent user, /tests uploaded, test.sh as root. alpha's tests import
    its pinned dependency, installed from the exported wheel (no index is reachable)."""
    task = task_dir_of(project["out"], "alpha")
    with _task_containers(docker_client, base_image, task) as (start, build_s):
        # the image: the bug applied, one baseline commit, no patch left behind
        c = start()
        code, outp = _sh(c, "cd /testbed && git log --format=%s && git status --porcelain && "
                            "grep -c 'return a - b' alpha/__init__.py && ls /tmp && "
                            "stat -c %U /testbed/alpha/__init__.py", user="forgeline")
        assert code == 0 and outp.split() == ["baseline", "1", "forgeline"], outp  # no wheels left in /tmp
        code, outp = _sh(c, f"cd / && python3 -c 'import {DEP}; print({DEP}.VALUE, {DEP}.__file__)'",
                         user="forgeline")
        assert code == 0 and outp.split()[0] == "42" and outp.split()[1].startswith("/usr/local/lib/"), outp

        # no fix; a reward planted, and a process of the agent's user rewriting it in a loop
        _sh(c, "echo 1 > /logs/verifier/reward.txt")
        c.exec_run(["bash", "-c", "while true; do echo 1 > /logs/verifier/reward.txt; "
                    "echo '{\"reward\": 1}' > /logs/verifier/reward.json; sleep 0.05; done"],
                   user="forgeline", detach=True)
        time.sleep(0.5)
        assert _sh(c, "ls /logs/verifier")[1].split() == ["reward.json", "reward.txt"]
        code, outp = _sh(c, "/tests/test.sh")
        assert code == 0, outp
        time.sleep(0.3)
        code, outp = _sh(c, "cat /logs/verifier/reward.txt; ls /logs/verifier; "
                            "python3 -c \"import json; r = json.load(open('/logs/verifier/report.json'));"
                            " print(r['sandbox_user'], r['resolved'], r['pass_to_pass']['passed'],"
                            " r['pass_to_pass']['total'])\"")
        # the bug fails FAIL_TO_PASS; PASS_TO_PASS passes, test_pinned_dependency (its import) too
        assert outp.split() == ["0", "report.json", "reward.txt", "True", "False", "4", "4"], outp

        # the oracle as the agent user, then the verifier as root: 1
        c = start()
        code, outp = _sh(c, "/solution/solve.sh", user="forgeline")
        assert code == 0, outp
        t1 = time.perf_counter()
        code, outp = _sh(c, "/tests/test.sh")
        verify_s = time.perf_counter() - t1
        assert code == 0 and "reward 1" in outp, outp
        assert _sh(c, "cat /logs/verifier/reward.txt")[1] == "1\n"
        print(f"\ndocker: build {build_s:.1f} s, verifier {verify_s:.1f} s")


@pytest.mark.docker
def test_src_layout_task_grades_in_docker(src_project, docker_client, base_image):
    """sigma's image: the agent's shell imports sigma from /testbed/src (the Dockerfile's ENV);
    the verifier, pytest as the sandbox user, grades the bug 0, the oracle's fix 1, and the bug
    with a src/pytest.py that fakes every test passing 0 (removed before pytest runs)."""
    with _task_containers(docker_client, base_image, src_project) as (start, _):
        c = start()
        code, outp = _sh(c, f"cd / && python3 -c 'import {SRC_REPO}; print({SRC_REPO}.__file__)'",
                         user="forgeline")
        assert code == 0 and outp.strip() == f"/testbed/src/{SRC_REPO}/__init__.py", outp
        code, outp = _sh(c, "/tests/test.sh")
        assert code == 0 and "reward 0" in outp, outp
        report = json.loads(_sh(c, "cat /logs/verifier/report.json")[1])
        assert report["sandbox_user"] and not report["resolved"]
        assert (report["fail_to_pass"]["passed"], report["pass_to_pass"]["passed"]) == (0, 1), report

        c = start()
        code, outp = _sh(c, "/solution/solve.sh", user="forgeline")
        assert code == 0, outp
        code, outp = _sh(c, "/tests/test.sh")
        assert code == 0 and "reward 1" in outp, outp
        assert _sh(c, "cat /logs/verifier/reward.txt")[1] == "1\n"

        c = start()
        fake = shlex.quote(FAKE_PYTEST)
        assert _sh(c, f"printf %s {fake} > /testbed/src/pytest.py", user="forgeline")[0] == 0
        code, outp = _sh(c, "/tests/test.sh")
        assert code == 0 and "reward 0" in outp, outp
        report = json.loads(_sh(c, "cat /logs/verifier/report.json")[1])
        assert report["removed"] == ["src/pytest.py"] and not report["resolved"], report
