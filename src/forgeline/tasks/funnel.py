"""The task funnel: candidates -> ingested -> validated -> split, with rejections per check
(and the clean tests no grader could name, excluded by the generator).

With the external files' report (records sharded to configured repositories, rejected, or
unattributed), every record read is counted once.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

from forgeline.config import as_dict
from forgeline.provenance import Manifest, write_json

log = logging.getLogger(__name__)


def funnel(ingest_reports: dict[str, dict], validate_reports: dict[str, dict], split: dict,
           pool: list[str], generate_notes: dict[str, dict] | None = None) -> dict:
    """Counts at each step, per repository and in total (plain data in, plain data out).

    `generate_notes` (the generator's manifest notes per repository) adds the clean tests the
    generator never used because the reference graders' log parsers cannot name them
    (docs/grading.md), and the candidates kept."""
    per_repo = {}
    generate_notes = generate_notes or {}
    for repo in sorted(ingest_reports):
        ing, val = ingest_reports[repo], validate_reports.get(repo, {})
        gen = generate_notes.get(repo, {})
        per_repo[repo] = {
            "candidates": gen.get("kept"),
            "unnameable_tests": len(gen.get("baseline", {}).get("unnameable", [])),
            "ingested": ing["accepted"],
            "ingest_rejected": ing["rejected"],
            "validated": val.get("validated", 0),
            "validate_rejected": val.get("rejected", {}),
            "role": "pool" if repo in pool else "other",
        }
    checks: Counter = Counter()
    for val in validate_reports.values():
        checks.update(val.get("rejected", {}))
    ingest_categories: Counter = Counter()
    for ing in ingest_reports.values():
        ingest_categories.update(ing["rejected_by_category"])
    return {
        "repos": per_repo,
        "totals": {
            "candidates": sum(r["candidates"] or 0 for r in per_repo.values()),
            "unnameable_tests": sum(r["unnameable_tests"] for r in per_repo.values()),
            "ingested": sum(r["ingested"] for r in per_repo.values()),
            "validated": sum(r["validated"] for r in per_repo.values()),
            "pool": sum(r["validated"] for n, r in per_repo.items() if n in pool),
            "split": split.get("counts", {}),
        },
        "ingest_rejected_by_category": dict(sorted(ingest_categories.items())),
        "validate_rejected_by_check": dict(sorted(checks.items())),
        "split_digest": split.get("digest"),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generate-manifests", nargs="*", default=[], metavar="JSON",
                        help="the generator's manifests (results/candidates/REPO.manifest.json)")
    parser.add_argument("--ingest-reports", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--validate-reports", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--extra-report", required=True, help="report.json of ingest-extra")
    parser.add_argument("--split", required=True, help="split.json")
    parser.add_argument("--out", required=True, help="funnel.json")
    parser.add_argument("--manifest", required=True)


def _by_repo(paths: list[str]) -> dict[str, dict]:
    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    return {r["repo"]: r for r in reports}


def run(cfg, args: argparse.Namespace) -> None:
    repos = cfg.repos
    inputs = [*args.generate_manifests, *args.ingest_reports, *args.validate_reports,
              args.extra_report, args.split]
    manifest = Manifest(stage="funnel", params={"repos": as_dict(repos)}, inputs=inputs,
                        code=__name__)
    extra = json.loads(Path(args.extra_report).read_text(encoding="utf-8"))
    summary = funnel(_by_repo(args.ingest_reports), _by_repo(args.validate_reports),
                     json.loads(Path(args.split).read_text(encoding="utf-8")), list(repos.pool),
                     {n["repo"]: n for n in (json.loads(Path(p).read_text(encoding="utf-8"))["notes"]
                                             for p in args.generate_manifests)})
    summary["extra_sources"] = {k: extra[k] for k in ("records", "accepted", "rejected",
                                                      "rejected_by_category", "unattributed")}
    write_json(args.out, summary)
    manifest.notes = summary["totals"]
    manifest.write(args.manifest, outputs=[args.out])
    t = summary["totals"]
    log.info("funnel: %d ingested -> %d validated -> %d in the pool -> split %s", t["ingested"],
             t["validated"], t["pool"], t["split"])
