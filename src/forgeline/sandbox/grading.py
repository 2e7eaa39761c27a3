"""Running pytest the same way in every backend, reading its verdicts, grading like SWE-bench."""
from __future__ import annotations

import re
import shlex
from typing import Iterable, Sequence

# -v prints one line per test with its node id; -rA repeats failures/errors at the end.
PYTEST_ARGS = ["-v", "-rA", "--tb=short", "-p", "no:cacheprovider", "-o", "addopts=",
               "--color=no", "-W", "ignore::DeprecationWarning"]
STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_VERBOSE = re.compile(r"^(?P<id>\S.*?::\S.*?) (?P<st>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s|$)")
_SUMMARY = re.compile(r"^(?P<st>PASSED|FAILED|ERROR|XFAIL|XPASS) (?P<id>\S+::\S+?)(?: - .*)?$")


def pytest_command(tests: Sequence[str] | None, python: str = "python3") -> list[str]:
    return [python, "-m", "pytest", *PYTEST_ARGS, *(tests if tests else ["tests"])]


def pytest_shell(tests: Sequence[str] | None, python: str = "python3") -> str:
    return shlex.join(pytest_command(tests, python))


def parse_pytest_log(log: str) -> dict[str, str]:
    """Node id -> status from a `pytest -v -rA` log. The worst status seen for an id wins
    (a test that PASSED but ERRORed in teardown is an ERROR)."""
    rank = {s: i for i, s in enumerate(("PASSED", "XFAIL", "SKIPPED", "XPASS", "FAILED", "ERROR"))}
    statuses: dict[str, str] = {}
    for line in log.splitlines():
        m = _VERBOSE.match(line) or _SUMMARY.match(line)
        if not m:
            continue
        test_id, status = m.group("id").strip(), m.group("st")
        if status == "ERROR" and test_id.startswith("ERROR "):
            continue
        if test_id not in statuses or rank[status] > rank[statuses[test_id]]:
            statuses[test_id] = status
    return statuses


def passed(status: str | None, *, fail_to_pass: bool) -> bool:
    """SWE-bench: XFAIL counts as a pass; SKIPPED passes for PASS_TO_PASS, fails for FAIL_TO_PASS."""
    if status in ("PASSED", "XFAIL"):
        return True
    return status == "SKIPPED" and not fail_to_pass


def grade(statuses: dict[str, str], fail_to_pass: Iterable[str], pass_to_pass: Iterable[str]) -> dict:
    """Resolved = every FAIL_TO_PASS and every PASS_TO_PASS test passes."""
    f2p, p2p = list(fail_to_pass), list(pass_to_pass)
    f2p_ok = [t for t in f2p if passed(statuses.get(t), fail_to_pass=True)]
    p2p_ok = [t for t in p2p if passed(statuses.get(t), fail_to_pass=False)]
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
