"""Do forgeline, SWE-bench and SWE-smith grade forgeline's validated tasks alike?

    .venv/bin/python bench/grader_agreement.py results/validated/*.jsonl \\
        [--repos-root data/repos] [--backend docker|process] [--config params.yaml] \\
        [--limit N] [--threads 2] [--out bench/out/grader_agreement.json]

For every task: the buggy run (the bug patch applied) and the gold run (the bug patch, then the
gold fix `forgeline.sandbox.verify.gold_fix`), each `sandbox.run_tests` on FAIL_TO_PASS +
PASS_TO_PASS in a fresh sandbox. Both runs are graded three ways:
  - forgeline: `forgeline.sandbox.grading.grade(run.statuses, F2P, P2P)` (pytest's own reports);
  - swebench 5.0.2 and swesmith 0.0.9: scripts/reference_grade.py on the runs' console logs, under
    .venv-swebench/ and .venv-swesmith/ (created on first use, as `make graders` does);
and swesmith's `get_valid_report(pregold=buggy log, postgold=gold log)` derives F2P/P2P from the
two logs, compared with the record's. Expected: every grader says buggy unresolved and gold
resolved, and the derived lists equal the record's. Printed per repository: tasks, gold runs
resolved per grader, buggy runs unresolved by all three, tasks whose derived lists match, and the
instance ids of every disagreement. The JSON result holds every task's grades.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_GRADE = ROOT / "scripts" / "reference_grade.py"
GRADERS = ("forgeline", "swebench", "swesmith")


FULL_LOG = 8_000_000  # bytes of console output kept per docker run (the process backend keeps 64 kB)


# -- the runs (forgeline's sandbox) -----------------------------------------------------------

def task_runs(sandbox, env, record: dict, timeout_s: float) -> dict:
    """The buggy and the gold run of one task, each graded by forgeline.

    Returns {"buggy": {...}, "gold": {...}}, each with the console log, pytest's exit code,
    the forgeline grade (`grading.grade`) and `resolved`."""
    from forgeline.sandbox.grading import grade
    from forgeline.sandbox.verify import gold_fix

    f2p, p2p = list(record["FAIL_TO_PASS"]), list(record["PASS_TO_PASS"])
    patches = {"buggy": [record["patch"]], "gold": [record["patch"], gold_fix(record["patch"])]}
    out = {}
    for which, applied in patches.items():
        run = sandbox.run_tests(env, applied, f2p + p2p, timeout_s=timeout_s)
        graded = grade(run.statuses, f2p, p2p)
        out[which] = {"log": run.log, "exit_code": run.exit_code, "timed_out": run.timed_out,
                      "resolved": graded["resolved"], "failing": graded["failing"],
                      "duration_s": round(run.duration_s, 3)}
    return out


# -- the reference graders (their own venvs) --------------------------------------------------

def grader_pythons() -> dict[str, Path]:
    """{"swebench": python, "swesmith": python} of the graders' venvs, made on first use
    (tests/venvs.py: the same code as the tests' fixtures and `make graders`)."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import venvs
    finally:
        sys.path.pop(0)
    return {"swebench": venvs.ensure(venvs.SWEBENCH), "swesmith": venvs.ensure(venvs.SWESMITH)}


def reference_grades(python: str | os.PathLike, cases: list[dict], timeout_s: float = 600) -> dict:
    """scripts/reference_grade.py under `python` on `cases` ({instance, logs, exit_codes});
    its JSON result. RuntimeError with its stderr when it fails."""
    with tempfile.TemporaryDirectory(prefix="grader-agreement-") as tmp:
        src, dst = Path(tmp) / "cases.json", Path(tmp) / "graded.json"
        src.write_text(json.dumps(cases), encoding="utf-8")
        res = subprocess.run([str(python), str(REFERENCE_GRADE), str(src), "--out", str(dst)],
                             capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "PYTHONNOUSERSITE": "1"})
        if res.returncode != 0 or not dst.is_file():
            raise RuntimeError(f"{REFERENCE_GRADE.name} under {python} failed "
                               f"({res.returncode}): {res.stderr[-3000:]}")
        return json.loads(dst.read_text(encoding="utf-8"))


def case_of(record: dict, runs: dict) -> dict:
    return {"instance": record, "logs": {w: runs[w]["log"] for w in ("buggy", "gold")},
            "exit_codes": {w: runs[w]["exit_code"] for w in ("buggy", "gold")}}


# -- agreement ----------------------------------------------------------------------------------

def task_row(record: dict, runs: dict, references: dict[str, dict]) -> dict:
    """One task's verdicts side by side; `agree` = every grader gives the expected verdict
    (buggy unresolved, gold resolved) and none failed to grade."""
    from forgeline.tasks.schema import repo_key

    iid = record["instance_id"]
    verdicts = {"forgeline": {"buggy_resolved": runs["buggy"]["resolved"],
                              "gold_resolved": runs["gold"]["resolved"]}}
    errors = {}
    for grader, result in references.items():
        got = result["instances"].get(iid, {}).get(grader)
        if got is None or "error" in got:
            errors[grader] = (got or {}).get("error", "no result")
            continue
        verdicts[grader] = {"buggy_resolved": got["buggy_resolved"],
                            "gold_resolved": got["gold_resolved"]}
    smith = references.get("swesmith", {}).get("instances", {}).get(iid, {}).get("swesmith", {})
    expected = {"buggy_resolved": False, "gold_resolved": True}
    return {
        "instance_id": iid, "repo": repo_key(record["repo"]),
        "verdicts": verdicts, "errors": errors,
        "agree": not errors and len(verdicts) == len(GRADERS)
                 and all(v == expected for v in verdicts.values()),
        "registry": smith.get("registry"),
        "valid_report": smith.get("valid_report"),
        "valid_report_matches_record": smith.get("valid_report_matches_record"),
        "forgeline_failing": {w: runs[w]["failing"] for w in ("buggy", "gold")},
        "reference_failing": {g: {w: r["instances"].get(iid, {}).get(g, {}).get(w, {}).get("failing")
                                  for w in ("buggy", "gold")} for g, r in references.items()},
    }


def summarise(rows: list[dict]) -> dict[str, dict]:
    """Per repository: tasks, gold runs resolved per grader, buggy runs unresolved by all three,
    derived lists equal to the record's, registry round trips, disagreeing instance ids."""
    out: dict[str, dict] = {}
    by_repo = defaultdict(list)
    for row in rows:
        by_repo[row["repo"]].append(row)
    for repo, items in sorted(by_repo.items()):
        out[repo] = {
            "tasks": len(items),
            **{f"{g}_gold_resolved": sum(bool(r["verdicts"].get(g, {}).get("gold_resolved"))
                                         for r in items) for g in GRADERS},
            "buggy_unresolved_by_all": sum(
                len(r["verdicts"]) == len(GRADERS)
                and not any(v["buggy_resolved"] for v in r["verdicts"].values()) for r in items),
            "valid_report_matches_record": sum(bool(r["valid_report_matches_record"]) for r in items),
            "registry_round_trip": sum(bool(r["registry"] and r["registry"]["image_name_matches"]
                                            and r["registry"]["mirror_name_matches"]) for r in items),
            "disagreements": sorted(r["instance_id"] for r in items if not r["agree"]),
            "valid_report_mismatches": sorted(r["instance_id"] for r in items
                                              if not r["valid_report_matches_record"]),
        }
    return out


def table(summary: dict[str, dict]) -> str:
    cols = [("repository", None), ("tasks", "tasks"), ("forgeline gold", "forgeline_gold_resolved"),
            ("swebench gold", "swebench_gold_resolved"), ("swesmith gold", "swesmith_gold_resolved"),
            ("buggy unresolved (all 3)", "buggy_unresolved_by_all"),
            ("valid_report == record", "valid_report_matches_record"),
            ("registry round trip", "registry_round_trip"), ("disagree", None)]
    rows = [[repo, *(str(s[k]) for _, k in cols[1:-1]), str(len(s["disagreements"]))]
            for repo, s in summary.items()]
    if summary:
        rows.append(["total", *(str(sum(s[k] for s in summary.values())) for _, k in cols[1:-1]),
                     str(sum(len(s["disagreements"]) for s in summary.values()))])
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, (c, _) in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for (c, _), w in zip(cols, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    for repo, s in summary.items():
        for iid in s["disagreements"]:
            lines.append(f"disagreement  {repo}: {iid}")
        for iid in s["valid_report_mismatches"]:
            lines.append(f"valid_report != record  {repo}: {iid}")
    return "\n".join(lines)


def check_tasks(records: list[dict], repos_root: Path, sandbox, pythons: dict[str, Path],
                timeout_s: float = 120.0, threads: int = 1) -> dict:
    """Run, grade and compare every record; the bench's JSON result (without timings)."""
    from forgeline.tasks.repos import RepoSnapshot
    from forgeline.tasks.schema import repo_key

    snapshots = {}
    for key in sorted({repo_key(r["repo"]) for r in records}):
        snapshots[key] = RepoSnapshot.load(repos_root, key)

    def one(record: dict) -> dict:
        return task_runs(sandbox, snapshots[repo_key(record["repo"])].env(), record, timeout_s)

    with ThreadPoolExecutor(max(1, threads)) as pool:
        runs = list(pool.map(one, records))
    cases = [case_of(rec, r) for rec, r in zip(records, runs)]
    references = {g: reference_grades(python, cases) for g, python in pythons.items()}
    rows = [task_row(rec, r, references) for rec, r in zip(records, runs)]
    return {
        "graders": {"forgeline": None, **{g: references[g]["graders"].get(g) for g in references}},
        "guard": {g: references[g]["guard"] for g in references},
        "sandbox": sandbox.name,
        "tasks": rows,
        "repositories": summarise(rows),
    }


def main(argv: list[str] | None = None) -> int:
    import yaml

    from forgeline.provenance import read_jsonl
    from forgeline.sandbox import get_sandbox

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", nargs="+", help="validated task JSONL files (results/validated/*.jsonl)")
    ap.add_argument("--config", default=str(ROOT / "params.yaml"),
                    help="params file: repos.root, sandbox (default: params.yaml)")
    ap.add_argument("--repos-root", help="repository snapshots (default: the config's repos.root)")
    ap.add_argument("--backend", choices=("docker", "process"), default="docker",
                    help="docker (default; images from `forgeline image`) or process")
    ap.add_argument("--limit", type=int, default=0, help="at most N tasks per file (0 = all)")
    ap.add_argument("--threads", type=int, default=2, help="task runs at once")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "grader_agreement.json"))
    args = ap.parse_args(argv)

    params = yaml.safe_load(Path(args.config).read_text())
    repos_root = Path(args.repos_root or params["repos"]["root"])
    if not repos_root.is_absolute() and not repos_root.exists():
        repos_root = Path(args.config).resolve().parent / repos_root
    records = []
    for path in args.tasks:
        rows = read_jsonl(path)
        records += rows[:args.limit] if args.limit else rows
    # the reference graders read the console log: keep all of it (a long suite's -v -rA log
    # is cut in the middle at the sandbox's usual 64 kB, and their verdicts with it)
    docker = {**params["sandbox"].get("docker", {}), "output_limit": FULL_LOG}
    section = {**params["sandbox"], "backend": args.backend, "docker": docker}
    sandbox = get_sandbox(section)
    t0 = time.perf_counter()
    pythons = grader_pythons()
    try:
        result = check_tasks(records, repos_root, sandbox, pythons,
                             float(params["sandbox"].get("test_timeout_s", 120)), args.threads)
    finally:
        close = getattr(sandbox, "close", None)
        if close:
            close()
    result["inputs"] = [str(p) for p in args.tasks]
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(table(result["repositories"]))
    print(f"\n{len(records)} tasks, {args.backend} sandbox, graders {result['graders']}, "
          f"{result['wall_s']} s; network/process attempts by the reference graders: "
          f"{sum(len(v) for g in result['guard'].values() for v in g.values())}; written {out}")
    return 0 if all(r["agree"] for r in result["tasks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
