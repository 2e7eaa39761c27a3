"""Grading reads pytest's own reports: real pytest runs on a repository whose ids SWE-bench's
console parser gets wrong (spaces, " - "), plus every outcome pytest has."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from forgeline.sandbox import TaskEnv
from forgeline.sandbox.grading import (command_digest, grade, parse_results, pytest_command,
                                       representable)
from forgeline.sandbox.process import ProcessSandbox

TESTS = textwrap.dedent('''\
    import os
    import pytest

    from rangelib import satisfies


    @pytest.mark.parametrize("spec,version,ok", [
        ("1.2.3 - 2.0.0", "1.5.0", True),
        ("1.2.3 - 2.0.0", "2.5.0", False),
        ("   ", "1.0.0", False),
    ])
    def test_satisfies_table(spec, version, ok):
        assert satisfies(version, spec) is ok


    def test_message_is_long():
        raise ValueError("x" * 300 + " the end")


    @pytest.fixture
    def broken_setup():
        raise RuntimeError("setup failed")


    def test_setup_error(broken_setup):
        pass


    @pytest.fixture
    def broken_teardown():
        yield
        raise RuntimeError("teardown failed")


    def test_teardown_error(broken_teardown):
        pass


    @pytest.mark.skip(reason="not today")
    def test_skipped():
        pass


    @pytest.mark.xfail(reason="known")
    def test_xfail():
        assert False


    @pytest.mark.xfail(reason="fixed meanwhile")
    def test_xpass():
        pass


    def test_exit_is_not_a_pass():
        if os.environ.get("NEVER"):
            pass
    ''')
RANGELIB = textwrap.dedent('''\
    def satisfies(version, spec):
        if not spec.strip():
            return False
        lo, hi = (p.strip() for p in spec.split(" - "))
        key = lambda v: tuple(int(x) for x in v.split("."))
        return key(lo) <= key(version) <= key(hi)
    ''')
T = "tests/test_range.py::"
SPACED = [f"{T}test_satisfies_table[1.2.3 - 2.0.0-1.5.0-True]",
          f"{T}test_satisfies_table[1.2.3 - 2.0.0-2.5.0-False]",
          f"{T}test_satisfies_table[   -1.0.0-False]"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> TaskEnv:
    root = tmp_path_factory.mktemp("grading") / "rangelib"
    (root / "rangelib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "rangelib" / "__init__.py").write_text(RANGELIB)
    (root / "tests" / "test_range.py").write_text(TESTS)
    return TaskEnv("rangelib", root, "0" * 40)


@pytest.fixture(scope="module")
def suite(env):
    return ProcessSandbox(python=sys.executable).run_tests(env, [], None, 60)


def test_statuses_come_from_pytest_not_the_console(suite):
    assert suite.statuses == {
        **{t: "PASSED" for t in SPACED},
        f"{T}test_message_is_long": "FAILED",
        f"{T}test_setup_error": "ERROR",
        f"{T}test_teardown_error": "ERROR",  # passed its call, errored after: the worst wins
        f"{T}test_skipped": "SKIPPED",
        f"{T}test_xfail": "XFAIL",
        f"{T}test_xpass": "XPASS",
        f"{T}test_exit_is_not_a_pass": "PASSED",
    }
    # the console still has what people and the reference graders' parsers read
    assert f"PASSED {SPACED[0]}" in suite.log and "short test summary info" in suite.log
    # pytest's crash message whole, where the console cuts the summary line to its width
    assert suite.messages[f"{T}test_message_is_long"].endswith("x the end")
    assert suite.messages[f"{T}test_setup_error"] == "RuntimeError: setup failed"
    assert suite.collection_errors == []


def test_a_selected_run_with_spaced_ids(env):
    # ids with spaces and " - " are passed to pytest as they are and come back under the same name
    run = ProcessSandbox(python=sys.executable).run_tests(env, [], SPACED[:2], 60)
    assert run.exit_code == 0 and run.statuses == {t: "PASSED" for t in SPACED[:2]}


def test_a_missing_id_is_no_verdict_and_no_invention(env):
    run = ProcessSandbox(python=sys.executable).run_tests(env, [], [f"{T}test_nothing_here"], 60)
    assert run.exit_code == 4 and run.statuses == {}
    assert not grade(run.statuses, [f"{T}test_nothing_here"], [])["resolved"]


def test_a_collection_error_is_reported(env, tmp_path):
    broken = TaskEnv(env.repo, tmp_path / "copy", env.commit)
    (broken.source / "tests").mkdir(parents=True)
    (broken.source / "rangelib").mkdir()
    (broken.source / "rangelib" / "__init__.py").write_text("raise ImportError('nope')\n")
    (broken.source / "tests" / "test_range.py").write_text(TESTS)
    run = ProcessSandbox(python=sys.executable).run_tests(broken, [], None, 60)
    assert run.statuses == {} and run.collection_errors == ["tests/test_range.py"]


def test_representable_is_what_a_whitespace_split_keeps():
    assert representable(f"{T}test_x[1.2.3]") and representable("tests/t.py::test_a[a-b]")
    for bad in SPACED + ["", "tests/t.py::test[a\tb]", "tests/t.py::test[a\u00a0b]"]:
        assert not representable(bad)


def test_grade_rules():
    f2p, p2p = ["f"], ["p"]
    assert grade({"f": "PASSED", "p": "PASSED"}, f2p, p2p)["resolved"]
    assert grade({"f": "XFAIL", "p": "PASSED"}, f2p, p2p)["resolved"]
    for status in ("SKIPPED", "FAILED", "ERROR", "XPASS", None):
        statuses = {"f": "PASSED", "p": status} if status else {"f": "PASSED"}
        assert not grade(statuses, f2p, p2p)["resolved"], status  # SKIPPED fails P2P too
        assert grade(statuses, f2p, p2p)["failing"] == ["p"]


def test_parse_results_keeps_what_a_killed_run_wrote():
    rows = [{"id": "a", "when": "setup", "outcome": "passed", "xfail": False},
            {"id": "a", "when": "call", "outcome": "passed", "xfail": False},
            {"id": "b", "when": "setup", "outcome": "passed", "xfail": False}]
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"id": "b", "when": "ca'
    res = parse_results(text)
    assert res.statuses == {"a": "PASSED"} and res.exit_code is None


def test_the_command_is_pytest_with_the_runner(tmp_path):
    argv = pytest_command(["tests/t.py::test_a"], str(tmp_path / "r.jsonl"), python=sys.executable)
    assert argv[:2] == [sys.executable, "-c"] and argv[3] == str(tmp_path / "r.jsonl")
    assert argv[-1] == "tests/t.py::test_a" and "-rA" in argv
    assert len(command_digest()) == 64 and command_digest() == command_digest()


def test_process_sandbox_refuses_a_temp_folder_below_a_pytest_config(tmp_path, monkeypatch):
    """pytest would root the copies' node ids at the project above them: refused, with the fix."""
    import tempfile

    from forgeline.sandbox.base import SandboxError

    project = tmp_path / "project"
    (project / "tmp").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    monkeypatch.setattr(tempfile, "tempdir", str(project / "tmp"))
    with pytest.raises(SandboxError, match=r"pyproject.toml.*TMPDIR"):
        ProcessSandbox(python=sys.executable)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest section: fine
    ProcessSandbox(python=sys.executable)
