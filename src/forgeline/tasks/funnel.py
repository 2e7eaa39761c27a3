"""The task funnel: candidates -> ingested -> validated -> split, with rejections per check.

It also accounts for what no per-repository job keeps: records of external sources that name a
repository the config does not list, and rejections that name none. Together with the
per-repository reports, every record read is counted once.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

from forgeline.provenance import Manifest, stage_sources, write_json, write_jsonl
from forgeline.tasks.ingest import ingest_files
from forgeline.tasks.schema import repo_key

log = logging.getLogger(__name__)


def unattributed(result, configured: set[str]) -> tuple[list[dict], dict]:
    """Records (accepted or rejected) of external sources that no configured repo's job keeps."""
    rows = [{"source": None, "line": None, "instance_id": inst["instance_id"],
             "repo": repo_key(inst["repo"]), "category": "unconfigured_repo",
             "reason": f"repository {repo_key(inst['repo'])!r} is not listed in params.yaml "
                       f"repos.pool/sft/panel"}
            for inst in result.accepted if repo_key(inst["repo"]) not in configured]
    rows += [r for r in result.rejections if r["repo"] is None or r["repo"] not in configured]
    counts = Counter(r["category"] for r in rows)
    return rows, dict(sorted(counts.items()))


def funnel(ingest_reports: dict[str, dict], validate_reports: dict[str, dict], split: dict,
           pool: list[str]) -> dict:
    """Counts at each step, per repository and in total (plain data in, plain data out)."""
    per_repo = {}
    for repo in sorted(ingest_reports):
        ing, val = ingest_reports[repo], validate_reports.get(repo, {})
        per_repo[repo] = {
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
    parser.add_argument("--ingest-reports", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--validate-reports", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--split", required=True, help="split.json")
    parser.add_argument("--out", required=True, help="funnel.json")
    parser.add_argument("--unattributed", required=True, help="JSONL of records no repo kept")
    parser.add_argument("--manifest", required=True)


def _by_repo(paths: list[str], key: str) -> dict[str, dict]:
    out = {}
    for path in paths:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        out[report.get(key) or Path(path).name.split(".")[0]] = report
    return out


def run(cfg, args: argparse.Namespace) -> None:
    repos = cfg["repos"]
    configured = set(repos["pool"]) | set(repos.get("sft", [])) | set(repos.get("panel", []))
    extra = [str(p) for p in cfg.section("tasks.ingest").get("extra_sources") or []]
    manifest = Manifest(stage="funnel", params={"repos": repos, "extra_sources": extra},
                        inputs=[*args.ingest_reports, *args.validate_reports, args.split, *extra],
                        code=stage_sources(__name__))
    rows, counts = [], {}
    if extra:
        with manifest.timed("extra_sources"):
            result = ingest_files(extra, int(cfg.section("tasks.ingest")["max_record_bytes"]))
            rows, counts = unattributed(result, configured)
        if rows:
            log.warning("%d record(s) of extra sources belong to no configured repository: %s "
                        "(see %s)", len(rows), counts, args.unattributed)
    summary = funnel(_by_repo(args.ingest_reports, "repo"), _by_repo(args.validate_reports, "repo"),
                     json.loads(Path(args.split).read_text(encoding="utf-8")), list(repos["pool"]))
    summary["unattributed"] = counts
    write_json(args.out, summary)
    write_jsonl(args.unattributed, rows)
    manifest.notes = summary["totals"]
    manifest.write(args.manifest, outputs=[args.out, args.unattributed])
    t = summary["totals"]
    log.info("funnel: %d ingested -> %d validated -> %d in the pool -> split %s", t["ingested"],
             t["validated"], t["pool"], t["split"])
