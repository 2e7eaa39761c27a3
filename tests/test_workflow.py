"""The real DAG on tiny data: reruns are exact, dvc.yaml is current, DVC builds what Snakemake builds."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

import tiny_project as tp

pytestmark = pytest.mark.slow


def planned_jobs(project: Path) -> set[str]:
    """What `snakemake -n` would run, as {"rule" or "rule[repo=x]"}."""
    return tp.planned_jobs(project)


def rule_edges(project: Path) -> set[tuple[str, str]]:
    dot = tp.run(project, "snakemake", "--rulegraph", "--cores", "1").stdout
    names = dict(re.findall(r'(\d+)\[label = "(\w+)"', dot))
    return {(names[a], names[b]) for a, b in re.findall(r"(\d+) -> (\d+)", dot)}


def rules_of(jobs: set[str]) -> set[str]:
    return {j.split("[", 1)[0] for j in jobs}


def downstream(project: Path, rule: str) -> set[str]:
    """The rule and every rule that depends on it, transitively."""
    edges, found, todo = rule_edges(project), {rule}, [rule]
    while todo:
        current = todo.pop()
        for a, b in edges:
            if a == current and b not in found:
                found.add(b)
                todo.append(b)
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    project = tp.make_project(tmp_path_factory.mktemp("wf"))
    tp.run(project, "snakemake", "--cores", "2")
    return project


def test_pipeline_builds_every_artifact_with_manifests(built):
    split = yaml.safe_load((built / "results/split/split.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", split["digest"])
    for manifest in built.glob("results/**/*manifest.json"):
        record = yaml.safe_load(manifest.read_text())
        assert record["outputs"] and all(o["sha256"] for o in record["outputs"])
    assert (built / "results/validated/alpha.jsonl").stat().st_size > 0


def test_noop_run_does_nothing(built):
    assert planned_jobs(built) == set()


def test_param_change_reruns_that_stage_only(built):
    params = built / "params.yaml"
    original = params.read_text()
    try:
        data = yaml.safe_load(original)
        data["tasks"]["split"]["seed"] += 1
        params.write_text(yaml.safe_dump(data, sort_keys=False))
        jobs = planned_jobs(built)
        # the DAG picture reads params.yaml, so it (and the report) is redrawn on every edit
        assert rules_of(jobs) == downstream(built, "split") | downstream(built, "rulegraph")
        # the base policy on the held-out panel does not depend on the split
        assert "evaluate[panel=heldout, policy=base]" not in jobs
        assert "evaluate[panel=heldout, policy=ppo]" in jobs
    finally:
        params.write_text(original)


def planned_after_edit(project: Path, rel: str, what: str, target: str) -> set[str]:
    """What `snakemake -n` plans after `tp.edited(what, target)` of src/forgeline/`rel`; the
    file and the stamps' mtimes are put back after (a stamp rewritten twice is newer than the
    outputs, as a source file edited and reverted is for Snakemake)."""
    path = project / "src/forgeline" / rel
    original = path.read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (project / ".forgeline/code").glob("*.json")}
    try:
        path.write_text(tp.edited(original, what, target))
        return planned_jobs(project)
    finally:
        path.write_text(original)
        planned_jobs(project)  # the parse puts the stamps' contents back
        for p, ns in stamps.items():
            os.utime(p, ns=(ns, ns))


def test_stage_code_change_reruns_that_stage_and_descendants(built):
    # a line the split runs: the split and what reads it
    jobs = planned_after_edit(built, "tasks/split.py", "body", "repo_disjoint_split")
    assert rules_of(jobs) == downstream(built, "split")
    assert "evaluate[panel=heldout, policy=base]" not in jobs
    # validation, for every repository
    jobs = planned_after_edit(built, "tasks/validate.py", "body", "run")
    assert rules_of(jobs) == downstream(built, "validate")
    assert {j for j in jobs if j.startswith("validate[")} == {
        f"validate[repo={r}]" for r in [*tp.TINY_REPOS, *tp.ROLE_REPOS]}
    assert planned_jobs(built) == set()


def test_edits_no_stage_runs_rerun_nothing(built):
    """A comment, a docstring, or a function no stage calls: the code a stage runs is
    unchanged, so nothing is planned (the stamps keep their bytes and mtimes)."""
    assert planned_after_edit(built, "tasks/split.py", "comment", "repo_disjoint_split") == set()
    assert planned_after_edit(built, "train/ppo.py", "docstring", "") == set()
    never_called = built / "src/forgeline/provenance.py"
    original = never_called.read_text()
    try:
        never_called.write_text(original + "\n\ndef never_called():\n    return 1\n")
        assert planned_jobs(built) == set()
    finally:
        never_called.write_text(original)


def test_one_repo_change_reruns_only_its_chain(built, tmp_path):
    """Rebuild for real after editing one repository: unchanged repos' tasks are not revalidated."""
    project = tmp_path / "copy"
    shutil.copytree(built, project, symlinks=True)
    readme = project / "data/repos/beta/README.md"
    readme.write_text("beta: a changed snapshot\n")
    jobs = planned_jobs(project)
    per_repo = {j for j in jobs if "[repo=" in j}
    assert per_repo == {f"{rule}[repo=beta]" for rule in ("generate", "ingest", "validate", "difficulty")}
    assert rules_of(jobs - per_repo) == downstream(project, "split")
    assert "evaluate[panel=heldout, policy=base]" not in jobs
    tp.run(project, "snakemake", "--cores", "2")
    assert planned_jobs(project) == set()
    # only beta's chain changed: alpha's and gamma's validated tasks are byte-identical
    before, after = tp.artifact_digests(built), tp.artifact_digests(project)
    for repo in ("alpha", "gamma"):
        key = f"results/validated/{repo}.jsonl"
        assert before[key] == after[key]
    assert before["results/candidates/beta.jsonl"] != after["results/candidates/beta.jsonl"]


def test_dag_picture_in_readme_matches_rulegraph(built):
    real = rule_edges(built)
    readme = (tp.ROOT / "README.md").read_text()
    block = readme.split("```mermaid", 1)[1].split("```", 1)[0]
    drawn = set()
    for left, right in re.findall(r"^\s*(.+?) --> (\w+)", block, re.M):  # a & b[label] --> c
        drawn |= {(name, right) for name in re.findall(r"(\w+)(?:\[[^\]]*\])?\s*(?:&|$)", left)}
    assert drawn == real


def test_hub_base_replaces_the_tiny_policy_phase(tmp_path):
    """policy.base.source: hub (the real-scale overlay's switch): the base policy comes from
    `policy_hub`, every RL stage reads it, and no tiny-model rule is planned."""
    project = tp.make_project(tmp_path / "hub")
    overlay = {"policy": {"base": {"source": "hub", "hub": {"repo_id": "org/agent", "revision": "0" * 40}}},
               "repos": {"sft": []},
               "evaluation": {"policies": {"base": {"path": "results/policy/hub"},
                                           "ppo": {"path": "results/adapter", "base": "results/policy/hub"},
                                           "grpo": {"path": "results/adapter-grpo",
                                                    "base": "results/policy/hub"},
                                           **{name: {"base": "results/policy/hub"}
                                              for name in ("ppo-1", "ppo-more")}}}}
    (project / "hub.yaml").write_text(yaml.safe_dump(overlay))
    out = tp.run(project, "snakemake", "-n", "--cores", "2", "--configfile", "hub.yaml").stdout
    jobs = set(re.findall(r"^rule (\w+):", out, flags=re.M))
    assert "policy_hub" in jobs and not jobs & {"tokenizer", "policy_init", "copy_pretrain", "sft", "agent_oracle"}, sorted(jobs)
    dot = tp.run(project, "snakemake", "--rulegraph", "--cores", "1", "--configfile", "hub.yaml").stdout
    names = dict(re.findall(r'(\d+)\[label = "(\w+)"', dot))
    fed = {names[b] for a, b in re.findall(r"(\d+) -> (\d+)", dot) if names[a] == "policy_hub"}
    assert {"difficulty", "offline_rollouts", "critic", "ppo", "grpo", "evaluate"} <= fed, fed


def test_committed_dvc_yaml_is_current():
    """dvc.yaml is generated from the Snakemake DAG; a stale committed file fails here."""
    proc = tp.run(tp.ROOT, "forgeline", "export-dvc", "--check", check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:] + (
        "\n=> run `make dvc.yaml` and commit dvc.yaml")


def test_dvc_repro_builds_the_same_artifacts(built, tmp_path):
    project = tp.make_project(tmp_path / "dvc")
    tp.run(project, "forgeline", "export-dvc")
    tp.run(project, "git", "init", "-q")
    tp.run(project, "dvc", "init", "-q")
    tp.run(project, "dvc", "repro")
    assert tp.reproducible_digests(project) == tp.reproducible_digests(built)
    # a second repro does nothing, and status is clean
    again = tp.run(project, "dvc", "repro").stdout
    assert "didn't change, skipping" in again or "up to date" in again
    assert "changed" not in tp.run(project, "dvc", "status").stdout.replace("didn't change", "")
    # a docstring edit: DVC refreshes the stamps (stage `code`) and reruns nothing else
    split = project / "src/forgeline/tasks/split.py"
    split.write_text(split.read_text().replace('"""', '"""Edited. ', 1))
    out = tp.run(project, "dvc", "repro").stdout
    assert re.findall(r"Running stage '([^']+)'", out) == ["code"], out[-3000:]
    # a line the split runs: the split and what reads it
    split.write_text(tp.edited(split.read_text(), "body", "repo_disjoint_split"))
    tp.run(project, "dvc", "repro", "--single-item", "code")
    status = json.loads(tp.run(project, "dvc", "status", "--json").stdout)
    assert set(status) == {"split"}, status  # its descendants follow once its outputs change


def test_the_chain_to_the_adapter_runs_before_the_evaluations(built):
    """With every core taken, the jobs on the way to the adapter (priority CRITICAL_PATH) run
    before the evaluations that are ready earlier (the base policy's panels)."""
    log = sorted((built / ".snakemake" / "log").glob("*.snakemake.log"))[0].read_text()
    order = re.findall(r"^(?:local)?rule (\w+):", log, flags=re.M)
    # the tasks of every repository are upstream of the split: they too come before
    chain = {"generate", "ingest", "validate", "difficulty", "split", "offline_rollouts", "critic", "ppo"}
    assert chain <= set(order) and "evaluate" in order, order
    assert max(i for i, r in enumerate(order) if r in chain) < order.index("evaluate"), order
