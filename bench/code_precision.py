"""Does a code edit rerun exactly the jobs that execute the edited code, and their descendants?

    .venv/bin/python bench/code_precision.py [--out bench/out/code-precision]

The ground truth is not the DAG's own declaration. The tiny workflow of the tests
(tests/tiny_project.py, process backend) is built once with every `forgeline` command under
coverage, which records the functions each job executed. For each code edit below (a function's
body, a docstring, a comment), the truth is the jobs that executed the edited function plus every
job downstream of their outputs; it is compared with the jobs `snakemake -n` plans, and with the
stages `dvc status` reports after `dvc repro code` has refreshed the stamps (plus their
descendants, which DVC only finds once their inputs change). Exit 1 when any row differs.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import tiny_project as tp  # noqa: E402
import yaml  # noqa: E402


# (label, file under src/forgeline, what, target): what = "body" (a statement added at the top
# of function `target`, "Class.method" for a method), "docstring" (of `target`, "" = the
# module's), "comment" (a line above `target`).
EDITS = [
    ("sandbox/images.py: build an image", "sandbox/images.py", "body", "build_repo_image"),
    ("policy/tokenizer.py: train the tokenizer", "policy/tokenizer.py", "body", "train_bpe"),
    ("provenance.py: write JSON lines", "provenance.py", "body", "write_jsonl"),
    ("config.py: merge config files", "config.py", "body", "deep_merge"),
    ("train/ppo.py: module docstring", "train/ppo.py", "docstring", ""),
    ("evaluation/report.py: a comment", "evaluation/report.py", "comment", "funnel_steps"),
    ("evaluation/report.py: funnel rows", "evaluation/report.py", "body", "funnel_steps"),
    ("evaluation/stats.py: exact McNemar", "evaluation/stats.py", "body", "mcnemar_exact_p"),
    ("tasks/split.py: the frozen digest", "tasks/split.py", "body", "frozen_split_digest"),
    ("agent/rewards.py: process reward", "agent/rewards.py", "body", "process_reward"),
    ("sandbox/grading.py: grade a run", "sandbox/grading.py", "body", "grade"),
    ("tasks/checks.py: a docstring", "tasks/checks.py", "docstring", "check_nop"),
    ("train/rl.py: explained variance", "train/rl.py", "body", "explained_variance"),
    ("tasks/statement.py: a problem statement", "tasks/statement.py", "body", "write_problem_statement"),
]


SHIM = """#!{python}
# `forgeline` under coverage: one data file per command, and its argv beside it
import json, os, sys, time
import coverage
name = os.path.join({covdir!r}, f"{{time.time_ns()}}.{{os.getpid()}}")
with open(name + ".argv", "w") as f:
    json.dump(sys.argv[1:], f)
cov = coverage.Coverage(data_file=name + ".cov", include=[{src!r} + "/*"])
cov.start()
try:
    from forgeline.cli import main
    rc = main(sys.argv[1:])
finally:
    cov.stop()
    cov.save()
sys.exit(rc)
"""


def executed(covdir: Path, jobs: list[dict], src: Path) -> dict[str, set[str]]:
    """{job's stage name: {"module-relative file:function", ...}} from the coverage data."""
    import coverage

    trees: dict[str, dict[str, set[int]]] = {}
    out: dict[str, set[str]] = {}
    for argv_file in sorted(covdir.glob("*.argv")):
        argv = json.loads(argv_file.read_text())
        job = next((j for j in jobs if shlex.split(j["cmd"])[1:] == argv), None)
        if job is None:
            continue  # a tool run outside the DAG (export-dvc)
        data = coverage.CoverageData(basename=str(argv_file.with_suffix(".cov")))
        data.read()
        ran = out.setdefault(job["name"], set())
        for filename in data.measured_files():
            rel = Path(filename).resolve().relative_to(src).as_posix()
            if rel not in trees:
                tree = ast.parse(Path(filename).read_text())
                trees[rel] = {name: tp.body_lines(node) for name, node in tp.function_nodes(tree).items()}
            hit = set(data.lines(filename) or ())
            ran |= {f"{rel}:{name}" for name, lines in trees[rel].items() if lines & hit}
    return out


def descendants(jobs: list[dict], names: set[str]) -> set[str]:
    """`names` and every job that reads, transitively, what they write."""
    found = set(names)
    outs = {o for j in jobs if j["name"] in found for o in j["outs"]}
    grew = True
    while grew:
        grew = False
        for j in jobs:
            if j["name"] in found:
                continue
            if any(d in outs or any(d.startswith(o + "/") for o in outs) for d in j["deps"]):
                found.add(j["name"])
                outs |= set(j["outs"])
                grew = True
    return found


def dag_jobs(project: Path) -> list[dict]:
    """The jobs as dvc.yaml lists them (from the project's own code, not this process's)."""
    tp.run(project, "forgeline", "export-dvc")
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    paths = lambda entries: [e if isinstance(e, str) else next(iter(e)) for e in entries or []]
    return [{"name": name, "cmd": st["cmd"], "deps": paths(st.get("deps")),
             "outs": paths(st.get("outs")) + paths(st.get("metrics")) + paths(st.get("plots"))}
            for name, st in stages.items() if name != "code"]


def planned(project: Path) -> set[str]:
    """Planned jobs named like dvc.yaml stages ("validate-alpha"), `all` aside."""
    return {re.sub(r"\w+=", "", j).replace(", ", "-")
            for j in tp.planned_jobs(project, sep="-{}")} - {"all"}


def dvc_changed(project: Path) -> set[str]:
    tp.run(project, "dvc", "repro", "-q", "--single-item", "code")
    status = json.loads(tp.run(project, "dvc", "status", "--json").stdout or "{}")
    return set(status) - {"code"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "code-precision")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the workflow built (and measured) by the last run in --out")
    args = ap.parse_args()
    project = args.out / "pipeline"
    src = (project / "src" / "forgeline").resolve()
    covdir = args.out / "coverage"
    shim = args.out / "bin" / "forgeline"
    # tp.env() puts BIN first on PATH: the shim's folder, then the venv's (snakemake, dvc)
    os.environ["PATH"] = f"{tp.BIN}:{os.environ['PATH']}"
    tp.BIN = shim.parent
    if not args.reuse:
        if args.out.exists():
            shutil.rmtree(args.out)
        tp.make_project(project)
        covdir.mkdir(parents=True)
        shim.parent.mkdir()
        shim.write_text(SHIM.format(python=sys.executable, covdir=str(covdir), src=str(src)))
        shim.chmod(0o755)
        print("building the tiny workflow under coverage ...", file=sys.stderr)
        tp.run(project, "snakemake", "--cores", "2")
    jobs = dag_jobs(project)
    ran = executed(covdir, jobs, src)
    missing = sorted({j["name"] for j in jobs} - set(ran))
    assert not missing, f"no coverage for {missing}"
    if not (project / ".dvc").is_dir():
        for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "commit", "-f", "-q")):
            tp.run(project, *cmd)
    assert planned(project) == set() and dvc_changed(project) == set()

    print(f"\ncode edits: jobs planned vs the jobs that executed the edited code + descendants "
          f"({len(jobs)} jobs; truth from coverage)")
    print(f"{'edit':<42}{'truth':>6}{'snakemake':>10}{'dvc':>5}  equal")
    ok = True
    stamps = sorted((project / ".forgeline" / "code").glob("*.json"))
    for label, rel, what, target in EDITS:
        path = src / rel
        original = path.read_text()
        times = {s: s.stat().st_mtime_ns for s in stamps}
        key = f"{rel}:{target}"
        truth = (descendants(jobs, {name for name, funcs in ran.items() if key in funcs})
                 if what == "body" else set())
        path.write_text(tp.edited(original, what, target))
        try:
            by_snakemake = planned(project)
            by_dvc = descendants(jobs, dvc_changed(project))
        finally:
            path.write_text(original)
            dvc_changed(project)  # the stamps as they were
            for s, ns in times.items():
                os.utime(s, ns=(ns, ns))
        equal = by_snakemake == truth == by_dvc
        ok &= equal
        print(f"{label:<42}{len(truth):>6}{len(by_snakemake):>10}{len(by_dvc):>5}  {equal}"
              + ("" if equal else f"  snakemake extra {sorted(by_snakemake - truth)} missing "
                 f"{sorted(truth - by_snakemake)}; dvc extra {sorted(by_dvc - truth)} missing "
                 f"{sorted(truth - by_dvc)}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
