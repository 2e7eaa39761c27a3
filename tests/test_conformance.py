"""forgeline's grading against the REAL reference graders: swebench 5.0.2 (.venv-swebench/) and
swesmith 0.0.9 with swebench 4.1.0 (.venv-swesmith/), through scripts/reference_grade.py.

A tiny repository whose tests include parametrized ids with a space and with " - " (which the
reference graders' log parsers cut at the first whitespace); tasks made by forgeline's own
generator plus two hand-built records (one listing such ids); forgeline's validation; then, for
every validated task, the buggy run and the gold run (bug patch + `verify.gold_fix`) graded by
forgeline, by swebench and by swesmith (bench/grader_agreement.py does the same at scale):
buggy unresolved and gold resolved by all three, swesmith's registry round trip and its
`get_valid_report` F2P/P2P equal to the record's. The runs go through the process sandbox and,
where an engine answers, through the docker one. Where the graders' rules differ (a SKIPPED
listed test) is measured on one real run of a second repository. The graders' venvs are made on first use
(tests/venvs.py: both ~1 min with a warm pip cache, ~3 min from PyPI; `make graders` makes
them beforehand).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, unavailable
from forgeline import cli
from forgeline.provenance import read_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.grading import representable
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import instance_id
from forgeline.tasks.validate import Options, validate_batch
import venvs


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


reference_grade = _load("reference_grade", ROOT / "scripts" / "reference_grade.py")
grader_agreement = _load("grader_agreement", ROOT / "bench" / "grader_agreement.py")

NAME = "semverish"  # a bare folder: owner forgeline
SOURCE = '''\
def bump(version, part="patch"):
    """The next version: part is "major", "minor" or "patch"."""
    major, minor, patch = (int(x) for x in version.split("."))
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def key(version):
    """A version as a tuple that sorts the way versions do."""
    return tuple(int(x) for x in version.split("."))


def in_range(version, spec):
    """spec is "LOW - HIGH", both ends included."""
    low, high = spec.split(" - ")
    return key(low) <= key(version) <= key(high)


def words(text):
    """The words of text, split at runs of spaces."""
    return [w for w in text.split(" ") if w]
'''
TESTS = '''\
import pytest

from semverish import bump, in_range, key, words


def test_bump_patch():
    assert bump("1.2.3") == "1.2.4"


def test_bump_minor():
    assert bump("1.2.3", "minor") == "1.3.0"


def test_bump_major():
    assert bump("1.2.3", "major") == "2.0.0"


def test_key_orders_numerically():
    assert key("1.10.0") > key("1.9.0")


@pytest.mark.parametrize("spec", ["1.2.3 - 2.0.0", "2.0.0 - 2.0.0"])
def test_in_range_edges(spec):
    assert in_range("2.0.0", spec)


@pytest.mark.parametrize("version", ["1.2.3", "1.5.0"])
def test_in_range(version):
    assert in_range(version, "1.2.3 - 2.0.0")


@pytest.mark.parametrize("text", ["a b", "one  two"])
def test_words(text):
    assert words(text) == text.split()


@pytest.mark.parametrize("text", ["solo"])
def test_words_single(text):
    assert words(text) == [text]
'''
T = f"tests/test_{NAME}.py::"
SPACED = [f"{T}test_in_range_edges[1.2.3 - 2.0.0]", f"{T}test_in_range_edges[2.0.0 - 2.0.0]",
          f"{T}test_words[a b]", f"{T}test_words[one  two]"]


def make_patch(rel: str, before: str, after: str) -> str:
    import difflib
    body = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{rel}", f"b/{rel}"))
    return f"diff --git a/{rel} b/{rel}\n{body}"


def hand_record(snap: RepoSnapshot, label: str, old: str, new: str, f2p: list[str],
                p2p: list[str]) -> dict:
    """A record built with forgeline's naming helpers (as an external SWE-smith file holds)."""
    patch = make_patch(f"{NAME}/__init__.py", SOURCE, SOURCE.replace(old, new, 1))
    assert patch
    return {"instance_id": instance_id(snap.repo_name, "func_pm_hand",
                                       hashlib.sha256(label.encode()).hexdigest()),
            "repo": snap.repo, "base_commit": snap.commit, "image_name": snap.image,
            "created_at": "2026-01-01T00:00:00Z", "patch": patch,
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
            "problem_statement": f"`{f2p[0].split('::')[-1]}` fails: in_range and bump "
                                 "misbehave.\n"}


# -- the helper venvs -------------------------------------------------------------------------

def _venv_python(venv: venvs.HelperVenv) -> Path:
    try:
        return venvs.ensure(venv)
    except venvs.VenvError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def grader_pythons() -> dict[str, Path]:
    return {"swebench": _venv_python(venvs.SWEBENCH), "swesmith": _venv_python(venvs.SWESMITH)}


# -- the tasks: generated, hand-built, validated ----------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The repository, forgeline's candidates for it, and what validation kept of them."""
    tmp = tmp_path_factory.mktemp("conformance")
    repos = tmp / "repos"
    (repos / NAME / NAME).mkdir(parents=True)
    (repos / NAME / "tests").mkdir()
    (repos / NAME / NAME / "__init__.py").write_text(SOURCE)
    (repos / NAME / "tests" / f"test_{NAME}.py").write_text(TESTS)
    snap = RepoSnapshot.load(repos, NAME)

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["repos"] = {"root": str(repos), "pool": [NAME], "sft": [], "panel": []}
    params["sandbox"]["backend"] = "process"
    params["tasks"]["generate"].update(max_per_repo=5, max_tries_per_repo=14)
    config = tmp / "params.yaml"
    config.write_text(yaml.safe_dump(params, sort_keys=False))
    generated = tmp / "candidates.jsonl"
    try:
        assert cli.main(["generate", "--config", str(config), "--repo", NAME, "--out",
                         str(generated), "--manifest", str(tmp / "candidates.manifest.json")]) == 0
    finally:
        import logging
        logging.getLogger().handlers.clear()
    candidates = read_jsonl(generated)

    sandbox = get_sandbox("process")
    clean = sandbox.run_tests(snap.env(), [], None)
    passing = sorted(t for t, s in clean.statuses.items() if s == "PASSED")
    bump_bug = ("patch + 1}", "patch + 2}")
    nameable = [t for t in passing if representable(t)]
    hand = [
        # only ids the reference graders can name
        hand_record(snap, "hand", *bump_bug, [f"{T}test_bump_patch"],
                    [t for t in nameable if t != f"{T}test_bump_patch"]),
        # an external record listing ids with whitespace: forgeline must not keep them
        hand_record(snap, "spaced", "<= key(high)", "< key(high)", SPACED[:2],
                    [t for t in passing if t not in SPACED[:2]]),
    ]
    batch = validate_batch(candidates + hand, snap, sandbox, Options(gold_runs=1), progress=False)
    return {"snap": snap, "repos": repos, "clean": clean, "candidates": candidates, "hand": hand,
            "batch": batch, "sandbox": sandbox}


def test_the_repository_has_ids_the_reference_parsers_cut(project):
    """The premise: pytest reports ids with a space and with " - ", all passing on the clean
    snapshot, and `representable` says no to exactly those."""
    statuses = project["clean"].statuses
    assert set(SPACED) <= set(statuses) and {statuses[t] for t in SPACED} == {"PASSED"}
    assert any(" - " in t for t in SPACED) and any(" " in t and " - " not in t for t in SPACED)
    assert sorted(t for t in statuses if not representable(t)) == sorted(SPACED)


def test_forgeline_never_lists_an_id_with_whitespace(project):
    """Neither the generator's candidates nor the validated tasks list an id that the
    SWE-bench / SWE-smith parsers cannot represent; the hand-built record that does is rejected."""
    batch = project["batch"]
    assert project["candidates"], "the generator kept no candidate"
    for rec in project["candidates"] + batch.validated:
        for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            bad = [t for t in rec[field] if not representable(t) or t.split() != [t]]
            assert not bad, f"{rec['instance_id']} {field} lists {bad}"
    spaced = project["hand"][1]["instance_id"]
    assert spaced not in {r["instance_id"] for r in batch.validated}
    assert {r["instance_id"]: r["check"] for r in batch.rejections}.get(spaced) == "structure"
    assert project["hand"][0]["instance_id"] in {r["instance_id"] for r in batch.validated}
    # the premise: some generated bug does fail a spaced test, and the generator left it out
    env, left_out = project["snap"].env(), []
    for rec in project["candidates"]:
        statuses = project["sandbox"].run_tests(env, [rec["patch"]], None).statuses
        left_out += [t for t in SPACED if statuses.get(t) == "FAILED"]
    assert left_out, "no generated bug fails a test whose id has whitespace: change the repository"


@pytest.fixture(scope="module")
def graded(project, grader_pythons):
    """Every validated task run (process sandbox) and graded three ways."""
    records = project["batch"].validated
    assert len(records) >= 2
    return grader_agreement.check_tasks(records, project["repos"], project["sandbox"],
                                        grader_pythons, timeout_s=60)


def test_reference_graders_are_the_pinned_ones_and_stay_offline(graded):
    assert graded["graders"] == {"forgeline": None, "swebench": "5.0.2", "swesmith": "0.0.9"}
    assert graded["guard"] == {g: {"network": [], "processes": []} for g in ("swebench", "swesmith")}


def test_every_task_buggy_unresolved_gold_resolved_by_all_three(graded):
    problems = []
    for row in graded["tasks"]:
        for grader in grader_agreement.GRADERS:
            got = row["verdicts"].get(grader)
            if got != {"buggy_resolved": False, "gold_resolved": True}:
                problems.append(f"{row['instance_id']}: {grader} says {got} "
                                f"{row['errors'].get(grader, '')} failing={row['reference_failing']}")
    assert not problems, "\n".join(problems)
    assert all(row["agree"] for row in graded["tasks"])


def test_swesmith_registry_round_trip(graded, project):
    snap = project["snap"]
    for row in graded["tasks"]:
        reg = row["registry"]
        assert reg["get_from_inst"] == snap.repo_name == f"forgeline__{NAME}.{snap.commit[:8]}"
        assert reg["image_name"] == snap.image
        assert reg["image_name_matches"] and reg["mirror_name_matches"] and reg["repo_name_matches"]
        assert reg["instance_id_prefix_matches"]


def test_swesmith_valid_report_equals_the_record(graded, project):
    """SWE-smith's own validation rule (get_valid_report on the buggy and gold logs) derives the
    same FAIL_TO_PASS / PASS_TO_PASS as forgeline wrote."""
    by_id = {r["instance_id"]: r for r in project["batch"].validated}
    for row in graded["tasks"]:
        rec = by_id[row["instance_id"]]
        assert row["valid_report"] == {"FAIL_TO_PASS": sorted(rec["FAIL_TO_PASS"]),
                                       "PASS_TO_PASS": sorted(rec["PASS_TO_PASS"])}, row["instance_id"]


def test_the_bench_table_counts_every_task(graded):
    summary = graded["repositories"]
    assert list(summary) == [NAME]
    s, n = summary[NAME], len(graded["tasks"])
    assert s["tasks"] == n == s["forgeline_gold_resolved"] == s["swebench_gold_resolved"] \
        == s["swesmith_gold_resolved"] == s["buggy_unresolved_by_all"] == s["registry_round_trip"]
    assert s["disagreements"] == []
    text = grader_agreement.table(summary)
    assert NAME in text and "total" in text


@pytest.mark.docker
def test_docker_runs_grade_the_same(project, graded, grader_pythons, docker_client, base_image):
    """The same tasks run in containers of the repository's image: same verdicts everywhere."""
    from forgeline.sandbox.docker import DockerSandbox
    from embedded import PARAMS
    from forgeline.sandbox.images import build_repo_image
    snap = project["snap"]
    record, _ = build_repo_image(docker_client, snap.env(), (ROOT / "envs" / "repo.Dockerfile").read_text(),
                                 base_image, base_section=PARAMS.sandbox.docker.base_image)
    assert record["tag"] == snap.image
    sandbox = DockerSandbox(client=docker_client, warm=1)
    try:
        in_docker = grader_agreement.check_tasks(project["batch"].validated, project["repos"],
                                                 sandbox, grader_pythons, timeout_s=60)
    finally:
        sandbox.close()
    assert [r["verdicts"] for r in in_docker["tasks"]] == [r["verdicts"] for r in graded["tasks"]]
    assert all(r["agree"] for r in in_docker["tasks"]), grader_agreement.table(in_docker["repositories"])
    assert [r["valid_report"] for r in in_docker["tasks"]] == [r["valid_report"] for r in graded["tasks"]]


# -- scripts/reference_grade.py, piece by piece -----------------------------------------------

def test_repo_parts_new_and_old_forms():
    new = {"instance_id": "forgeline__ledgerkit.1a2b3c4d.func_pm_op_swap__0a1b2c3d",
           "repo": "swesmith/forgeline__ledgerkit.1a2b3c4d", "base_commit": "1a2b3c4d" + "e" * 32}
    assert reference_grade.repo_parts(new) == {
        "owner": "forgeline", "name": "ledgerkit", "commit8": "1a2b3c4d",
        "commit": "1a2b3c4d" + "e" * 32, "repo_name": "forgeline__ledgerkit.1a2b3c4d",
        "normalised": False}
    dotted = {"instance_id": "acme__py.lib.0123abcd.x__1", "repo": "swesmith/acme__py.lib.0123abcd"}
    assert reference_grade.repo_parts(dotted)["name"] == "py.lib"
    old = {"instance_id": "ledgerkit.1a2b3c4d.op_swap__0a1b2c3d", "repo": "ledgerkit",
           "base_commit": "f" * 40}  # a base_commit of another snapshot is not used
    parts = reference_grade.repo_parts(old)
    assert parts["repo_name"] == "forgeline__ledgerkit.1a2b3c4d" and parts["normalised"]
    assert parts["commit"] == "1a2b3c4d"
    with pytest.raises(ValueError):
        reference_grade.repo_parts({"instance_id": "x.y", "repo": "acme/ledgerkit"})


def test_wrapped_log_is_what_both_harnesses_slice():
    log = "tests/t.py::test_a PASSED\n\nPASSED tests/t.py::test_a\n"
    text = reference_grade.wrapped_log(log, ["tests/t.py::test_a"], 0)
    start, end = f"+ : '{reference_grade.START}'", f"+ : '{reference_grade.END}'"
    assert text.index(start) < text.index(log.rstrip()) < text.index(end)  # swesmith's markers
    assert text.rstrip().endswith(f"{reference_grade.EXIT}: 0")  # after the end marker (swebench)
    assert reference_grade.EXIT not in reference_grade.wrapped_log(log, [], None)
    script = reference_grade.eval_script(["tests/t.py::test_a"])
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n") and reference_grade.END in script


def test_guard_refuses_and_records_network_and_processes(tmp_path):
    code = ("import json, socket, subprocess, sys\n"
            f"sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
            "import reference_grade as r\n"
            "r.install_guard()\n"
            "for attempt in (lambda: socket.create_connection(('127.0.0.1', 9)),\n"
            "                lambda: socket.getaddrinfo('example.org', 443),\n"
            "                lambda: socket.socket().connect(('127.0.0.1', 9)),\n"
            "                lambda: subprocess.run(['true'])):\n"
            "    try:\n"
            "        attempt()\n"
            "    except r.Refused:\n"
            "        pass\n"
            "print(json.dumps(r.GUARD))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    guard = json.loads(res.stdout)
    assert len(guard["network"]) == 3 and len(guard["processes"]) == 1


def test_reference_grade_on_real_logs_with_cut_ids(project, grader_pythons):
    """Run by hand, the spaced record shows the known disagreement: both reference graders
    cannot find the spaced ids in the logs, so even the gold run is not resolved for them,
    while forgeline (pytest's own reports) resolves it. That is why forgeline never lists them."""
    spaced = project["hand"][1]
    sandbox = project["sandbox"]
    runs = grader_agreement.task_runs(sandbox, project["snap"].env(), spaced, timeout_s=60)
    assert not runs["buggy"]["resolved"] and runs["gold"]["resolved"]
    case = grader_agreement.case_of(spaced, runs)
    for grader, python in grader_pythons.items():
        got = grader_agreement.reference_grades(python, [case])["instances"][spaced["instance_id"]]
        assert got[grader]["buggy_resolved"] is False
        assert got[grader]["gold_resolved"] is False, grader
        assert set(SPACED[:2]) <= set(got[grader]["gold"]["failing"])


# -- where the rules differ: measured on one real run ------------------------------------------

EDGE_TESTS = '''\
import pytest


@pytest.fixture
def bad_teardown():
    yield 1
    raise RuntimeError("teardown broke")


def test_a():
    assert True


def test_skipped():
    pytest.skip("skipped at run time")


@pytest.mark.xfail(reason="expected to fail")
def test_xpass():
    assert True


@pytest.mark.xfail(reason="expected to fail")
def test_xfail():
    assert False


def test_teardown_error(bad_teardown):
    assert bad_teardown == 1
'''
E = "tests/test_edge.py::"
# (FAIL_TO_PASS, PASS_TO_PASS) graded on the run above as a "gold" run -> resolved by
# (forgeline, swebench 5.0.2, swesmith 0.0.9). swebench's parser reads `-rA` lines that start
# with a status; pytest names a skipped test there only as "SKIPPED [1] file:line: reason", so
# the test is absent and fails. swesmith reads the `-v` lines, sees SKIPPED, and its report
# counts a skipped test neither as passed nor failed: ignored, and with nothing else listed
# the ratio is 1. forgeline: every listed test PASSED on the clean snapshot, so a skip fails.
EDGE_CASES = {
    "f2p_skipped": ([f"{E}test_skipped"], [f"{E}test_a"], (False, False, True)),
    "p2p_skipped": ([f"{E}test_a"], [f"{E}test_skipped"], (False, False, True)),
    "f2p_one_of_two_skipped": ([f"{E}test_a", f"{E}test_skipped"], [], (False, False, True)),
    "p2p_xfail": ([f"{E}test_a"], [f"{E}test_xfail"], (True, True, True)),
    "p2p_xpass": ([f"{E}test_a"], [f"{E}test_xpass"], (False, False, False)),
    "p2p_teardown_error": ([f"{E}test_a"], [f"{E}test_teardown_error"], (False, False, False)),
    "all_pass": ([f"{E}test_a"], [], (True, True, True)),
}


def test_where_the_graders_differ(tmp_path, grader_pythons):
    """The documented differences (docs/grading.md), measured with the real packages: only a
    SKIPPED listed test separates them, and forgeline never lists one (it lists PASSED tests)."""
    from forgeline.sandbox import TaskEnv
    from forgeline.sandbox.grading import grade
    repo = tmp_path / "edgy"
    (repo / "edgy").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "edgy" / "__init__.py").write_text("")
    (repo / "tests" / "test_edge.py").write_text(EDGE_TESTS)
    run = get_sandbox("process").run_tests(TaskEnv("edgy", repo, "0" * 40, "none"), [], None,
                                           timeout_s=60)
    assert run.statuses == {f"{E}test_a": "PASSED", f"{E}test_skipped": "SKIPPED",
                            f"{E}test_xpass": "XPASS", f"{E}test_xfail": "XFAIL",
                            f"{E}test_teardown_error": "ERROR"}
    cases, expected = [], {}
    for label, (f2p, p2p, want) in EDGE_CASES.items():
        iid = f"forgeline__edgy.00000000.{label}__00000000"
        cases.append({"instance": {
            "instance_id": iid, "repo": "swesmith/forgeline__edgy.00000000",
            "image_name": "forgeline/swesmith.x86_64.forgeline_1776_edgy.00000000",
            "base_commit": "0" * 40, "patch": "", "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
            "problem_statement": label},
            "logs": {"buggy": run.log, "gold": run.log},
            "exit_codes": {"buggy": run.exit_code, "gold": run.exit_code}})
        expected[iid] = want
        assert grade(run.statuses, f2p, p2p)["resolved"] is want[0], label
    measured = {iid: [None, None, None] for iid in expected}
    for i, grader in ((1, "swebench"), (2, "swesmith")):
        out = grader_agreement.reference_grades(grader_pythons[grader], cases)
        for iid, got in out["instances"].items():
            measured[iid][i] = got[grader]["gold_resolved"]
    for iid, want in expected.items():
        measured[iid][0] = want[0]
        assert tuple(measured[iid]) == want, iid
