"""The task front on real code: what generate -> ingest -> validate made of each PyPI project.

    .venv/bin/python scripts/fetch_pypi_projects.py
    PATH=$PWD/.venv/bin:$PATH snakemake --cores 2 --configfile configs/pypi.yaml -- \
        $(.venv/bin/python bench/pypi_front.py --targets)
    .venv/bin/python bench/pypi_front.py --json bench/out/pypi_front.json

Reads the artifacts of each pool repository of configs/pypi.yaml (results/images, candidates,
tasks, validated and their manifests) and prints one Markdown row per project: source size,
test dependencies, the clean suite, candidates, validated, rejections per check (and the
reasons, in the JSON), stage wall times.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from forgeline import config  # noqa: E402
from forgeline.tasks.repos import RepoSnapshot  # noqa: E402

OVERLAY = ROOT / "configs" / "pypi.yaml"


def projects() -> dict:
    """scripts/fetch_pypi_projects.py's table, by folder."""
    spec = importlib.util.spec_from_file_location("fetch_pypi_projects", ROOT / "scripts" / "fetch_pypi_projects.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return {p.folder: p for p in module.PROJECTS}


def load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def reason_kind(reason: str) -> str:
    """A rejection reason without its specifics (test ids, identifiers, numbers): for counting."""
    text = re.sub(r"\(.*?\)", "(...)", reason.split(": ")[0] if ": " in reason[:90] else reason)
    return re.sub(r"\d+", "N", text)[:120]


def summarize(repo: str, root: Path, table: dict) -> dict:
    res = ROOT / "results"
    snap = RepoSnapshot.load(root, repo)
    sources = snap.source_files()
    project = table.get(repo)
    image = load(res / "images" / f"{repo}.json")
    gen = load(res / "candidates" / f"{repo}.manifest.json") or {}
    candidates = jsonl(res / "candidates" / f"{repo}.jsonl")
    ingest = load(res / "tasks" / f"{repo}.report.json") or {}
    report = load(res / "validated" / f"{repo}.report.json") or {}
    validated = jsonl(res / "validated" / f"{repo}.jsonl")
    rejections = jsonl(res / "validated" / f"{repo}.rejections.jsonl")
    by_reason: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rejections:
        by_reason[r["check"]][reason_kind(r.get("reason", ""))] += 1
    notes = gen.get("notes", {})
    baseline = notes.get("baseline", {})

    def wall(stage: str, name: str) -> float | None:
        m = load(res / stage / name)
        return (m or {}).get("timings", {}).get("wall_s")

    return {
        "repo": repo,
        "dist": f"{project.dist}=={project.version}" if project else None,
        "sdist_sha256": project.sha256 if project else None,
        "commit": snap.commit,
        "source_files": len(sources),
        "source_lines": sum(len(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in sources),
        "test_dependencies": image["wheels"] if image else None,
        "image": {k: image[k] for k in ("tag", "build_input_digest", "testbed_head")} if image else None,
        "clean_suite": {"tests": baseline.get("tests"), "passed": baseline.get("passed"),
                        "not_passing": len(baseline.get("not_passing", [])),
                        "unnameable_ids": len(baseline.get("unnameable", []))},
        "generate": {"sites": sum(notes.get("sites_found", {}).values()) or None, "tried": notes.get("tried"),
                     "kept": notes.get("kept"), "discarded": notes.get("discarded"),
                     "kept_per_kind": notes.get("kept_per_kind")},
        "candidates": len(candidates),
        "ingested": ingest.get("accepted"),
        "ingest_rejected": ingest.get("rejected"),
        "validated": len(validated),
        "rejected": {c: n for c, n in (report.get("rejected") or {}).items() if n},
        "rejection_reasons": {c: dict(v.most_common()) for c, v in sorted(by_reason.items())},
        "flaky_tests": report.get("flaky_tests"),
        "fail_to_pass_median": statistics.median(len(t["FAIL_TO_PASS"]) for t in validated) if validated else None,
        "wall_s": {"image": wall("images", f"{repo}.manifest.json"),
                   "generate": wall("candidates", f"{repo}.manifest.json"),
                   "ingest": wall("tasks", f"{repo}.manifest.json"),
                   "validate": wall("validated", f"{repo}.manifest.json")},
        "why": project.why if project else None,
    }


def markdown(rows: list[dict]) -> str:
    out = ["| project | source (files/lines) | test deps | clean suite (passed/tests, ids w/ spaces) | "
           "candidates (tried) | validated | rejected by check | wall s (generate / validate) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        deps = ", ".join(f"{w['name']} {w['version']}" for w in r["test_dependencies"] or []) or "-"
        cs = r["clean_suite"]
        rej = ", ".join(f"{c} {n}" for c, n in r["rejected"].items()) or "-"
        w = r["wall_s"]
        fmt = lambda x: f"{x:.0f}" if x is not None else "-"  # noqa: E731
        out.append(f"| {r['dist']} | {r['source_files']} / {r['source_lines']} | {deps} | "
                   f"{cs['passed']}/{cs['tests']}, {cs['unnameable_ids']} | {r['candidates']} "
                   f"({r['generate']['tried']}) | {r['validated']} | {rej} | "
                   f"{fmt(w['generate'])} / {fmt(w['validate'])} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the per-project summary here")
    ap.add_argument("--targets", action="store_true", help="print the validate targets and exit")
    args = ap.parse_args()
    cfg = config.load([ROOT / "params.yaml", OVERLAY])
    pool = cfg.section("repos.pool")
    if args.targets:
        print(" ".join(f"results/validated/{r}.jsonl" for r in pool))
        return 0
    table = projects()
    rows = [summarize(r, ROOT / cfg.section("repos.root"), table) for r in pool]
    print(markdown(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"overlay": "configs/pypi.yaml", "projects": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
