"""Running pytest the same way in every backend, reading its verdicts, grading like SWE-bench.

Verdicts come from pytest itself, never from its console. The test process is pytest with a
small plugin (RUNNER) that appends every test report, under its exact node id, as one JSON line
to a results file; `parse_results` turns those lines into one status per test. The console log
(`-v -rA`) is still written: people read it, problem statements quote it, and the reference
graders (swebench, swesmith) parse it.

Rules, the same for generation, validation, the verifier and the Harbor export:
- a test's status is the worst of its setup/call/teardown reports
  (PASSED < XFAIL < SKIPPED < XPASS < FAILED < ERROR);
- resolved = every FAIL_TO_PASS and every PASS_TO_PASS test PASSED or XFAILed. Every listed
  test PASSED on the clean snapshot, so a SKIPPED (or absent) one counts as failed in both
  lists: a `pytest.skip()` reached from the package cannot win (swebench 5.0.2 agrees, as its
  parser never names a skipped test; swesmith 0.0.9 ignores one: docs/grading.md);
- ids the SWE-bench / SWE-smith log parsers cannot represent (`representable`: they split
  status lines on whitespace) never enter FAIL_TO_PASS / PASS_TO_PASS.

This module imports only the standard library: the Harbor export ships it verbatim.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# -v prints one line per test with its node id; -rA repeats every outcome at the end (the lines
# SWE-bench's parser reads).
PYTEST_ARGS = ["-v", "-rA", "--tb=short", "-p", "no:cacheprovider", "-o", "addopts=",
               "--color=no", "-W", "ignore::DeprecationWarning"]
STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_RANK = {s: i for i, s in enumerate(("PASSED", "XFAIL", "SKIPPED", "XPASS", "FAILED", "ERROR"))}

# The test process: `python3 -c RUNNER RESULTS_FILE PYTEST_ARGS... TESTS...`. A line per report,
# flushed at once, so a run that is killed or that calls os._exit keeps what it had decided.
RUNNER = r'''
import json, sys
import pytest

class ForgelineResults:
    def __init__(self, path):
        self.out = open(path, "a", encoding="utf-8")

    def write(self, row):
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()

    def pytest_runtest_logreport(self, report):
        message = None
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)[-4000:]
        self.write({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
                    "xfail": hasattr(report, "wasxfail"), "message": message})

    def pytest_collectreport(self, report):
        if report.failed:
            self.write({"collect_error": report.nodeid})

results = ForgelineResults(sys.argv[1])
code = int(pytest.main(sys.argv[2:], plugins=[results]))
results.write({"exit_code": code})
sys.exit(code)
'''


def pytest_command(tests: Sequence[str] | None, results: str, python: str = "python3") -> list[str]:
    """argv of one graded pytest run: `tests` (node ids; None = the suite under tests/), the
    per-test results appended to the file `results`."""
    return [python, "-c", RUNNER, results, *PYTEST_ARGS, *(tests if tests else ["tests"])]


def pytest_shell(tests: Sequence[str] | None, results: str, python: str = "python3") -> str:
    return shlex.join(pytest_command(tests, results, python))


def command_digest() -> str:
    """sha256 of how forgeline runs and reads a graded test run: part of an environment's identity."""
    spec = json.dumps({"pytest_args": PYTEST_ARGS, "runner": RUNNER}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()


@dataclass
class Results:
    """What one run's results file says."""

    statuses: dict[str, str] = field(default_factory=dict)  # node id -> status
    messages: dict[str, str] = field(default_factory=dict)  # node id -> pytest's crash message
    collection_errors: list[str] = field(default_factory=list)  # collectors that failed
    exit_code: int | None = None  # pytest's; None when the run never finished


def _status(row: dict) -> str | None:
    when, outcome, xfail = row.get("when"), row.get("outcome"), bool(row.get("xfail"))
    if outcome == "failed":
        return "FAILED" if when == "call" else "ERROR"
    if outcome == "skipped":
        return "XFAIL" if xfail else "SKIPPED"
    if outcome == "passed" and when == "call":
        return "XPASS" if xfail else "PASSED"
    return None  # a passed setup or teardown decides nothing


def parse_results(text: str) -> Results:
    """Results from the JSON lines RUNNER wrote (a line cut by a kill is ignored)."""
    out = Results()
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if "exit_code" in row:
            out.exit_code = row["exit_code"]
        elif "collect_error" in row:
            out.collection_errors.append(str(row["collect_error"]))
        elif isinstance(row.get("id"), str):
            status = _status(row)
            test = row["id"]
            if status and (test not in out.statuses or _RANK[status] > _RANK[out.statuses[test]]):
                out.statuses[test] = status
                if row.get("message"):
                    out.messages[test] = str(row["message"])
    return out


def representable(node_id: str) -> bool:
    """Can the SWE-bench / SWE-smith pytest log parsers name this test? They take the word after
    the status on a `-rA` line, so an id with whitespace in it is cut (`test_x[a b]` -> `test_x[a`)."""
    return bool(node_id) and node_id.split() == [node_id]


def passed(status: str | None) -> bool:
    """A listed test passes when it PASSED or XFAILed (SWE-bench); SKIPPED or absent fails."""
    return status in ("PASSED", "XFAIL")


def grade(statuses: dict[str, str], fail_to_pass: Iterable[str], pass_to_pass: Iterable[str]) -> dict:
    """Resolved = every FAIL_TO_PASS and every PASS_TO_PASS test passes."""
    f2p, p2p = list(fail_to_pass), list(pass_to_pass)
    f2p_ok = [t for t in f2p if passed(statuses.get(t))]
    p2p_ok = [t for t in p2p if passed(statuses.get(t))]
    return {
        "resolved": len(f2p_ok) == len(f2p) and len(p2p_ok) == len(p2p),
        "fail_to_pass": {"passed": len(f2p_ok), "total": len(f2p)},
        "pass_to_pass": {"passed": len(p2p_ok), "total": len(p2p)},
        "failing": sorted(set(f2p) - set(f2p_ok)) + sorted(set(p2p) - set(p2p_ok)),
    }


def is_test_path(path: str) -> bool:
    """Files the verifier restores: the agent's edits to these never reach grading."""
    parts = path.split("/")
    name = parts[-1]
    return ("tests" in parts[:-1] or "test" in parts[:-1] or name.startswith("test_")
            or name.endswith("_test.py") or name in ("conftest.py", "pytest.ini", "tox.ini",
                                                     "setup.cfg", "pyproject.toml"))
