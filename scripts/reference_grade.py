#!/usr/bin/env python3
"""Grade task runs with the REAL reference graders, swebench 5.0.2 and swesmith 0.0.9.

Standalone: imports no forgeline code and runs under the python of either grader venv
(.venv-swebench/: swebench 5.0.2; .venv-swesmith/: swesmith 0.0.9 + swebench 4.1.0, because
swesmith 0.0.9 does not import beside swebench 5). Each grader found in the venv grades; the
other is skipped (swebench 4.1.0, present in the swesmith venv as swesmith's dependency, is not
a reference of its own).

Input (JSON): a list of cases

    {"instance": <SWE-smith record: instance_id, repo, image_name, patch, FAIL_TO_PASS,
                  PASS_TO_PASS, base_commit, ...>,
     "logs": {"buggy": <pytest -v -rA console log with the bug in>,
              "gold": <the same tests' log with the bug fixed>},
     "exit_codes": {"buggy": 1, "gold": 0}}          # optional: pytest's exit status

Output (JSON, stdout or --out):

    {"graders": {"swebench": "5.0.2"}, "guard": {"network": [], "processes": []},
     "instances": {<instance_id>: {<grader>: {"buggy_resolved": bool, "gold_resolved": bool,
                                              ...details}}}}

swebench: each log is written as an eval run's test_output.txt (the eval script's set -x trace
around the markers), then graded by `swebench.harness.grading.get_eval_report` on a TestSpec
from `swebench.harness.utils.make_test_spec` (log_parser parse_log_pytest, eval_type
pass_and_fail): get_logs_eval -> get_eval_tests_report -> get_resolution_status == FULL.

swesmith: a PythonProfile subclass is registered per repository (owner, name and commit8 read
from `repo` = "swesmith/<owner>__<name>.<commit8>", org_dh from image_name), then the record
must round-trip through the registry (`get_from_inst` finds it; `profile.image_name` equals the
record's image_name), and `swesmith.harness.grading.get_eval_report` grades each log;
`get_valid_report(pregold=buggy log, postgold=gold log)` derives FAIL_TO_PASS / PASS_TO_PASS
the way SWE-smith's validation does. Records in forgeline's old form (bare `repo`, e.g.
"ledgerkit") are graded under owner "forgeline" and say `"repo_normalised": true`.

Nothing here may touch the network or start a process: a guard installed before the graders
are imported refuses (and records) every socket connect, name lookup and subprocess; the
output lists what was attempted (expected: nothing).

    .venv-swebench/bin/python scripts/reference_grade.py cases.json --out swebench.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

# The markers of an SWE-bench / SWE-smith eval script (swebench.harness.constants).
START, END, EXIT = ">>>>> Start Test Output", ">>>>> End Test Output", ">>>>> Test Exit Code"
TEST_COMMAND = "python -m pytest -v -rA --tb=short -p no:cacheprovider"
DEFAULT_OWNER = "forgeline"  # forgeline's owner for a bare repository folder
_REPO_NAME = re.compile(r"^(?P<owner>[^/]+?)__(?P<name>[^/]+)\.(?P<commit8>[0-9a-f]{8})$")


# -- the guard --------------------------------------------------------------------------------

class Refused(RuntimeError):
    """A grader tried to reach the network or start a process."""


GUARD: dict[str, list[str]] = {"network": [], "processes": []}


def install_guard() -> None:
    """Refuse and record every socket connect / name lookup and every subprocess from now on."""
    import socket
    import subprocess

    def refuse(kind: str, what: str):
        GUARD[kind].append(what[:300])
        raise Refused(f"reference_grade.py: {kind} refused: {what[:300]}")

    socket.socket.connect = lambda self, addr: refuse("network", f"connect {addr!r}")
    socket.socket.connect_ex = lambda self, addr: refuse("network", f"connect_ex {addr!r}")
    socket.create_connection = lambda addr, *a, **k: refuse("network", f"create_connection {addr!r}")
    socket.getaddrinfo = lambda host, *a, **k: refuse("network", f"getaddrinfo {host!r}")
    socket.gethostbyname = lambda host: refuse("network", f"gethostbyname {host!r}")
    subprocess.Popen.__init__ = lambda self, args, *a, **k: refuse("processes", f"Popen {args!r}")
    os.system = lambda cmd: refuse("processes", f"os.system {cmd!r}")
    for name in ("execv", "execve", "execvp", "execvpe", "posix_spawn", "posix_spawnp", "fork"):
        if hasattr(os, name):
            setattr(os, name, lambda *a, _n=name, **k: refuse("processes", f"os.{_n} {a[:1]!r}"))


# -- records ----------------------------------------------------------------------------------

def repo_parts(instance: dict) -> dict:
    """owner, name, commit8 and commit of the record's repository, and whether `repo` had to be
    normalised (old forgeline form: a bare folder name; owner forgeline, commit8 from the id).
    ValueError when neither form fits."""
    repo = instance["repo"]
    bare = repo.removeprefix("swesmith/")
    m = _REPO_NAME.match(bare)
    normalised = False
    if m is None:
        # old form: repo "ledgerkit", instance_id "ledgerkit.<commit8>.<bug_type>__<hash8>"
        prefix = instance["instance_id"].rsplit(".", 1)[0]
        head, _, commit8 = prefix.rpartition(".")
        if "/" in repo or head != repo or not re.fullmatch(r"[0-9a-f]{8}", commit8):
            raise ValueError(f"{instance['instance_id']}: repo {repo!r} is neither "
                             "swesmith/<owner>__<name>.<commit8> nor a bare folder name")
        owner, sep, name = repo.partition("__")
        owner, name = (owner, name) if sep and owner and name else (DEFAULT_OWNER, repo)
        normalised = True
    else:
        owner, name, commit8 = m.group("owner"), m.group("name"), m.group("commit8")
    base = instance.get("base_commit") or ""
    commit = base if base.startswith(commit8) else commit8
    return {"owner": owner, "name": name, "commit8": commit8, "commit": commit,
            "repo_name": f"{owner}__{name}.{commit8}", "normalised": normalised}


def wrapped_log(log: str, tests: list[str], exit_code: int | None) -> str:
    """A pytest console log as an eval run's test_output.txt: `bash -x` of the eval script."""
    lines = ["+ cd /testbed", f"+ : '{START}'", f"+ {TEST_COMMAND} {' '.join(tests)}",
             log.rstrip("\n")]
    if exit_code is not None:
        lines.append(f"+ SWEBENCH_TEST_EXIT_CODE={exit_code}")
    lines.append(f"+ : '{END}'")
    if exit_code is not None:
        lines += [f"+ echo '{EXIT}: {exit_code}'", f"{EXIT}: {exit_code}"]
    return "\n".join(lines) + "\n"


def eval_script(tests: list[str]) -> str:
    """The eval script the wrapped log is the trace of (SWE-bench's shape)."""
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", "cd /testbed", f": '{START}'",
                      f"{TEST_COMMAND} {' '.join(tests)}", f": '{END}'"]) + "\n"


def write_logs(case: dict, tmp: Path) -> dict[str, str]:
    """{"buggy": path, "gold": path} of the case's wrapped logs."""
    inst = case["instance"]
    tests = list(inst["FAIL_TO_PASS"]) + list(inst["PASS_TO_PASS"])
    codes = case.get("exit_codes") or {}
    folder = tmp / re.sub(r"[^A-Za-z0-9_.-]", "_", inst["instance_id"])
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for which in ("buggy", "gold"):
        path = folder / f"{which}.test_output.txt"
        path.write_text(wrapped_log(case["logs"][which], tests, codes.get(which)), encoding="utf-8")
        paths[which] = str(path)
    return paths


# -- swebench 5 ------------------------------------------------------------------------------

def swebench_grade(case: dict, logs: dict[str, str]) -> dict:
    from swebench.harness.grading import get_eval_report, get_logs_eval
    from swebench.harness.utils import make_test_spec

    inst = case["instance"]
    tests = list(inst["FAIL_TO_PASS"]) + list(inst["PASS_TO_PASS"])
    spec = make_test_spec({**inst, "image": inst["image_name"], "version": inst.get("version", "0.0"),
                           "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
                           "eval_script": eval_script(tests)})
    out: dict = {}
    for which, path in logs.items():
        prediction = {"instance_id": inst["instance_id"], "model_name_or_path": "reference",
                      "model_patch": inst["patch"]}
        report = get_eval_report(spec, prediction, path, include_tests_status=True)[inst["instance_id"]]
        status_map, found = get_logs_eval(spec, path)
        tests_status = report.get("tests_status") or {}
        out[f"{which}_resolved"] = bool(report["resolved"])
        out[which] = {
            "log_parsed": found,
            "failing": sorted(set(tests_status.get("FAIL_TO_PASS", {}).get("failure", []))
                              | set(tests_status.get("PASS_TO_PASS", {}).get("failure", []))),
            "not_in_log": sorted(t for t in tests if t not in status_map),
        }
    return out


# -- swesmith --------------------------------------------------------------------------------

_PROFILES: dict[str, type] = {}


def swesmith_profile(instance: dict, parts: dict):
    """Register (once) a PythonProfile subclass for the record's repository; return its class."""
    from dataclasses import dataclass

    from swesmith.profiles import registry
    from swesmith.profiles.python import PythonProfile

    key = parts["repo_name"]
    if key in _PROFILES:
        return _PROFILES[key]
    image = instance.get("image_name") or ""
    org_dh = image.split("/", 1)[0] if "/" in image else "swebench"
    # the registry skips classes named like its base types: this name is never one of them
    cls_name = "Reference_" + re.sub(r"\W", "_", key)
    cls = dataclass(type(cls_name, (PythonProfile,), {
        "__module__": __name__,
        "__annotations__": {"owner": str, "repo": str, "commit": str, "org_dh": str},
        "owner": parts["owner"], "repo": parts["name"], "commit": parts["commit"],
        "org_dh": org_dh}))
    registry.register_profile(cls)
    _PROFILES[key] = cls
    return cls


def swesmith_grade(case: dict, logs: dict[str, str]) -> dict:
    from swesmith.harness.grading import get_eval_report, get_valid_report
    from swesmith.profiles import registry

    inst = dict(case["instance"])
    parts = repo_parts(inst)
    if parts["normalised"]:
        inst["repo"] = f"swesmith/{parts['repo_name']}"
    swesmith_profile(inst, parts)
    profile = registry.get_from_inst(inst)
    out: dict = {
        "repo_normalised": parts["normalised"],
        "registry": {
            "get_from_inst": profile.repo_name,
            "repo_name_matches": profile.repo_name == inst["repo"].removeprefix("swesmith/"),
            "mirror_name_matches": profile.mirror_name == inst["repo"],
            "image_name": profile.image_name,
            "image_name_matches": profile.image_name == case["instance"].get("image_name"),
            "instance_id_prefix_matches":
                inst["instance_id"].rsplit(".", 1)[0] == profile.repo_name,
        },
    }
    for which, path in logs.items():
        # get_eval_report may filter the test lists in place (f2p_only): give it a copy
        prediction = {"instance_id": inst["instance_id"], "model_patch": inst["patch"]}
        report = get_eval_report(prediction, dict(inst), path)
        tests_status = report.get("tests_status") or {}
        out[f"{which}_resolved"] = bool(report["resolved"])
        out[which] = {"failing": sorted(
            set(tests_status.get("FAIL_TO_PASS", {}).get("failure", []))
            | set(tests_status.get("PASS_TO_PASS", {}).get("failure", [])))}
    valid = get_valid_report(val_pregold_path=logs["buggy"], val_postgold_path=logs["gold"],
                             instance=inst)
    out["valid_report"] = {k: sorted(valid.get(k, [])) for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}
    out["valid_report_matches_record"] = all(
        out["valid_report"][k] == sorted(inst[k]) for k in ("FAIL_TO_PASS", "PASS_TO_PASS"))
    return out


# -- the program ------------------------------------------------------------------------------

def available_graders() -> dict[str, str]:
    """{grader: version} of the reference graders importable here."""
    from importlib.metadata import PackageNotFoundError, version
    found = {}
    try:
        found["swesmith"] = version("swesmith")
    except PackageNotFoundError:
        try:
            v = version("swebench")
            if int(v.split(".")[0]) >= 5:
                found["swebench"] = v
        except PackageNotFoundError:
            pass
    return found


GRADERS = {"swebench": swebench_grade, "swesmith": swesmith_grade}


def grade_cases(cases: list[dict], graders: dict[str, str]) -> dict:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="reference-grade-") as tmp:
        for case in cases:
            iid = case["instance"]["instance_id"]
            logs = write_logs(case, Path(tmp))
            results[iid] = {}
            for grader in graders:
                try:
                    results[iid][grader] = GRADERS[grader](case, logs)
                except Exception as exc:  # one broken record must not hide the others' grades
                    results[iid][grader] = {"error": f"{type(exc).__name__}: {exc}"}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", help="JSON list of {instance, logs: {buggy, gold}, exit_codes?}")
    parser.add_argument("--out", help="write the result here (default: stdout)")
    parser.add_argument("--graders", help="comma-separated subset of the importable graders")
    args = parser.parse_args(argv)
    cases = json.loads(Path(args.cases).read_text(encoding="utf-8"))
    install_guard()  # before the graders are imported: their import time is guarded too
    graders = available_graders()
    if args.graders:
        wanted = args.graders.split(",")
        missing = [g for g in wanted if g not in graders]
        if missing:
            parser.error(f"not importable here: {', '.join(missing)} (have: {', '.join(graders) or 'none'})")
        graders = {g: graders[g] for g in wanted}
    if not graders:
        parser.error("neither swebench>=5 nor swesmith is installed in this python")
    result = {"graders": graders, "python": sys.version.split()[0],
              "instances": grade_cases(cases, graders), "guard": GUARD}
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
