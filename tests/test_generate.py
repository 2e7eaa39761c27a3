"""The bug generator stage: real pytest runs in the process sandbox on a tiny repository."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from forgeline import cli
from forgeline.provenance import read_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.seeds import derive_seed
from forgeline.tasks import generate, statement
from forgeline.tasks.mutations import apply_mutation, enumerate_mutation_sites
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import normalize_instance

PROJECT = Path(__file__).resolve().parents[1]

CORE = '''"""Two small helpers."""


def clamp(value, low, high):
    """Limit value to [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """Arithmetic mean; an empty list is an error."""
    if not values:
        raise ValueError("mean of no values")
    total = 0
    for v in values:
        total += v
    return total / len(values)
'''
TESTS = '''import pytest

from tinycalc.core import clamp, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_edges():
    assert clamp(-3, 0, 10) == 0
    assert clamp(12, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])
'''
ALL_TESTS = ["tests/test_core.py::test_clamp_edges", "tests/test_core.py::test_clamp_inside",
             "tests/test_core.py::test_mean", "tests/test_core.py::test_mean_empty"]


@pytest.fixture(scope="module")
def repos_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repos")
    (root / "tinycalc" / "tinycalc").mkdir(parents=True)
    (root / "tinycalc" / "tests").mkdir()
    (root / "tinycalc" / "tinycalc" / "__init__.py").write_text("")
    (root / "tinycalc" / "tinycalc" / "core.py").write_text(CORE)
    (root / "tinycalc" / "tests" / "test_core.py").write_text(TESTS)
    return root


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox("process")


def _site(kind: str, detail: str):
    return next(s for s in enumerate_mutation_sites(CORE, [kind], path="tinycalc/core.py")
                if s.detail == detail)


# -- pure parts ----------------------------------------------------------------------------------

def test_patch_applies_with_git_and_reverts(tmp_path):
    site = _site("op_swap", "/->*")
    after = apply_mutation(CORE, site)
    patch = generate.make_patch("tinycalc/core.py", CORE, after)
    assert patch.startswith("diff --git a/tinycalc/core.py b/tinycalc/core.py\n"
                            "--- a/tinycalc/core.py\n+++ b/tinycalc/core.py\n@@ ")
    target = tmp_path / "tinycalc" / "core.py"
    target.parent.mkdir()
    target.write_text(CORE)
    subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), check=True)
    assert target.read_text() == after
    subprocess.run(["git", "apply", "-R", "-"], cwd=tmp_path, input=patch.encode(), check=True)
    assert target.read_text() == CORE
    # a file without a final newline round-trips too
    target.write_text(CORE.rstrip("\n"))
    patch = generate.make_patch("tinycalc/core.py", CORE.rstrip("\n"), after.rstrip("\n"))
    subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), check=True)
    assert target.read_text() == after.rstrip("\n")
    assert generate.make_patch("x.py", CORE, CORE) == ""


def test_classify_run():
    clean = {"t::a": "PASSED", "t::b": "PASSED", "t::c": "FAILED", "t::d": "SKIPPED"}
    v = generate.classify_run(clean, {"t::a": "FAILED", "t::b": "PASSED", "t::c": "PASSED"}, False)
    assert (v.fail_to_pass, v.pass_to_pass, v.discard) == (("t::a",), ("t::b",), None)
    # SWE-smith's rule: an ERROR with the bug is in neither list
    errored = generate.classify_run(clean, {"t::a": "ERROR", "t::b": "FAILED"}, False)
    assert (errored.fail_to_pass, errored.pass_to_pass) == (("t::b",), ())
    assert generate.classify_run(clean, {"t::a": "ERROR", "t::b": "PASSED"}, False).discard == "no_failing_test"
    # ids the reference graders' log parsers cannot name never enter the lists
    spaced = {"t::a[x y]": "PASSED", "t::b[1 - 2]": "PASSED", "t::c": "PASSED"}
    v = generate.classify_run(spaced, {"t::a[x y]": "FAILED", "t::b[1 - 2]": "PASSED", "t::c": "FAILED"}, False)
    assert (v.fail_to_pass, v.pass_to_pass) == (("t::c",), ())
    assert generate.classify_run(clean, {"t::a": "PASSED", "t::b": "PASSED"}, False).discard == "no_failing_test"
    assert generate.classify_run(clean, {"t::a": "FAILED"}, True).discard == "timeout"
    assert generate.classify_run(clean, {"t::a": "ERROR", "t::b": "ERROR"}, False).discard == "collection_error"
    assert generate.classify_run(clean, {"t::a": "FAILED"}, False).discard == "collection_error"
    assert generate.classify_run(clean, {}, False).discard == "collection_error"


def test_module_name():
    assert statement.module_name("pkg/sub/mod.py") == "pkg.sub.mod"
    assert statement.module_name("pkg/__init__.py") == "pkg"
    assert statement.module_name("src/pkg/mod.py") == "pkg.mod"


# -- real runs -----------------------------------------------------------------------------------

def test_instance_from_a_real_run(repos_root, sandbox):
    snap = RepoSnapshot.load(repos_root, "tinycalc")
    env = snap.env()
    clean = sandbox.run_tests(env, [], None, 60)
    assert sorted(clean.statuses) == ALL_TESTS and set(clean.statuses.values()) == {"PASSED"}

    site = _site("op_swap", "/->*")
    outcome = generate._try_site(sandbox, snap, {"tinycalc/core.py": CORE}, site, clean.statuses, 60, seed=5)
    inst = normalize_instance(outcome.instance)
    assert outcome.discard is None
    assert inst["FAIL_TO_PASS"] == ["tests/test_core.py::test_mean"]
    assert inst["PASS_TO_PASS"] == [t for t in ALL_TESTS if t != "tests/test_core.py::test_mean"]
    # SWE-smith's names; base_commit is the git commit of the snapshot in its image
    assert inst["instance_id"].startswith(f"forgeline__tinycalc.{snap.commit[:8]}.func_pm_op_swap__")
    assert (inst["repo"], inst["base_commit"], inst["image_name"]) == (
        f"swesmith/forgeline__tinycalc.{snap.commit[:8]}", snap.commit,
        f"forgeline/swesmith.x86_64.forgeline_1776_tinycalc.{snap.commit[:8]}")
    assert inst["mutation"] == {"file": "tinycalc/core.py", "line": 20, "function": "mean", "kind": "op_swap"}
    assert inst["bug_type"] == "func_pm_op_swap" and inst["created_at"] == generate.CREATED_AT

    text = inst["problem_statement"]
    assert text.startswith("`mean` ")  # what misbehaves, first
    assert "`tinycalc/core.py`" in text  # where it is defined
    assert "`48`" in text and "`3`" in text  # observed vs expected, from the pytest log
    assert "tests/test_core.py::test_mean" in text  # how to reproduce
    for line in inst["patch"].splitlines():  # nothing of the bug or the fix
        if line[:1] in "+-" and not line.startswith(("+++", "---")):
            assert line[1:].strip() not in text
    assert "total" not in text and "diff" not in text

    # the oracle (the patch reversed) brings the suite back to green
    with sandbox.session(env, [inst["patch"]]) as s:
        res = s.exec("git apply -R - <<'EOF'\n" + inst["patch"] + "EOF\n", 30)
        assert res.exit_code == 0, res.output
        assert (Path(s.workdir) / "tinycalc" / "core.py").read_text() == CORE


def test_mutation_that_breaks_nothing_is_discarded(repos_root, sandbox):
    snap = RepoSnapshot.load(repos_root, "tinycalc")
    clean = {t: "PASSED" for t in ALL_TESTS}
    # `value < low` -> `value <= low`: no test sits on the boundary
    site = _site("cmp_boundary", "<-><=")
    outcome = generate._try_site(sandbox, snap, {"tinycalc/core.py": CORE}, site, clean, 60, seed=5)
    assert outcome.instance is None and outcome.discard == "no_failing_test"


def test_problem_statement_for_an_exception_names_the_call_not_the_fix():
    site = _site("op_swap", "+=->-=")
    patch = generate.make_patch("tinycalc/core.py", CORE, apply_mutation(CORE, site))
    failure = statement.Failure("tests/test_core.py::test_mean", "assert mean([1, 2, 3, 6]) == 3",
                               ["TypeError: unsupported operand type(s) for -=: 'int' and 'str'"])
    text = statement.write_problem_statement(site, [failure], patch, seed=1)
    assert "`TypeError`" in text and "mean([1, 2, 3, 6])" in text
    assert "-=" not in text and "+=" not in text and "unsupported operand types ('int' and 'str')" in text
    assert text == statement.write_problem_statement(site, [failure], patch, seed=1)
    wordings = {statement.write_problem_statement(site, [failure], patch, seed=s).splitlines()[0]
                for s in range(12)}
    assert len(wordings) > 1  # the wording varies with the seed


def test_cli_end_to_end_is_deterministic(repos_root, tmp_path):
    params = yaml.safe_load((PROJECT / "params.yaml").read_text())
    params["repos"]["root"] = str(repos_root)
    params["tasks"]["generate"].update(max_per_repo=2, max_tries_per_repo=5)
    params["sandbox"]["backend"] = "process"  # the tiny repo has no image
    config = tmp_path / "params.yaml"
    config.write_text(yaml.safe_dump(params))

    def run(name: str, threads: int) -> tuple[bytes, dict]:
        out, manifest = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.manifest.json"
        assert cli.main(["generate", "--config", str(config), "--repo", "tinycalc", "--out", str(out),
                         "--manifest", str(manifest), "--threads", str(threads)]) == 0
        return out.read_bytes(), json.loads(manifest.read_text())

    data, manifest = run("a", threads=2)
    records = read_jsonl(tmp_path / "a.jsonl")
    assert len(records) == 2
    assert [r["instance_id"] for r in records] == sorted(r["instance_id"] for r in records)
    for r in records:
        normalize_instance(r)
        assert r["FAIL_TO_PASS"] and set(r["FAIL_TO_PASS"]) <= set(ALL_TESTS)
    notes = manifest["notes"]
    assert notes["kept"] == 2 and sum(notes["kept_per_kind"].values()) == 2
    assert notes["tried"] == sum(notes["tried_per_kind"].values()) == 2 + sum(notes["discarded"].values())
    assert set(notes["sites_found"]) == set(params["tasks"]["generate"]["kinds"])
    assert manifest["seeds"] == {"generate": derive_seed(params["seed"], "generate", "tinycalc", bits=64)}
    assert manifest["outputs"][0]["path"] == str(tmp_path / "a.jsonl")

    data_again, manifest_again = run("b", threads=1)
    assert data_again == data  # byte-identical, whatever the scheduling
    same = {k: v for k, v in notes.items() if k not in ("threads", "mutation_timeout_s")}
    assert {k: manifest_again["notes"][k] for k in same} == same
    assert (manifest["params"]["role"], manifest["params"]["max_kept"]) == ("other", 2)

    # a heldout panel repository keeps max_per_panel_repo: the same first candidates
    params["repos"]["panel"] = ["tinycalc"]
    params["tasks"]["generate"]["max_per_panel_repo"] = 1
    config.write_text(yaml.safe_dump(params))
    data_panel, manifest_panel = run("c", threads=1)
    assert (manifest_panel["params"]["role"], manifest_panel["params"]["max_kept"]) == ("panel", 1)
    assert data_panel in data.splitlines(keepends=True)  # the first of the two kept before


def test_only_files_whose_fix_the_verifier_admits_are_mutated(repos_root, tmp_path):
    # a package's __main__.py: the verifier strips an agent's edit to it, so a bug there could
    # never be graded solved (python-slugify's, seen in the PyPI task front)
    root = tmp_path / "repos"
    shutil.copytree(repos_root / "tinycalc", root / "tinycalc")
    (root / "tinycalc" / "tinycalc" / "__main__.py").write_text(
        "from tinycalc.core import mean\n\n\ndef main(values):\n    return mean(values) + 1 - 1\n")
    params = yaml.safe_load((PROJECT / "params.yaml").read_text())
    params["repos"]["root"] = str(root)
    params["tasks"]["generate"].update(max_per_repo=1, max_tries_per_repo=1)
    params["sandbox"]["backend"] = "process"
    config = tmp_path / "params.yaml"
    config.write_text(yaml.safe_dump(params))
    manifest = tmp_path / "m.json"
    assert cli.main(["generate", "--config", str(config), "--repo", "tinycalc", "--out",
                     str(tmp_path / "c.jsonl"), "--manifest", str(manifest)]) == 0
    assert json.loads(manifest.read_text())["notes"]["source_files"] == ["tinycalc/__init__.py",
                                                                         "tinycalc/core.py"]
