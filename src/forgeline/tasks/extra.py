"""External SWE-smith-format files, read ONCE and sharded by repository.

Each repository's ingest job then reads its own shard: a 60k-instance file is parsed once, not
once per repository, and a change in one repository's tasks reruns only that repository's
chain. Records of repositories the config does not list, and rejections that name no
repository, land in `unattributed.jsonl`: nothing is dropped silently.
"""
from __future__ import annotations

import argparse
import logging
from collections import defaultdict
from pathlib import Path

from forgeline.config import ConfigError
from forgeline.provenance import Manifest, stage_sources, write_json, write_jsonl
from forgeline.tasks.ingest import IngestResult, ingest_files, summary_line
from forgeline.tasks.schema import repo_key


def shard(result: IngestResult, configured: set[str]) -> tuple[dict, list[dict], list[dict]]:
    """(accepted instances per configured repo, rejections, unattributed records)."""
    per_repo: dict[str, list[dict]] = defaultdict(list)
    unattributed = []
    for inst in result.accepted:
        repo = repo_key(inst["repo"])
        if repo in configured:
            per_repo[repo].append(inst)
        else:
            unattributed.append({"source": None, "line": None, "instance_id": inst["instance_id"],
                                 "repo": repo, "category": "unconfigured_repo",
                                 "reason": f"repository {repo!r} is not listed in params.yaml "
                                           f"repos.pool/sft/panel"})
    rejections = [r for r in result.rejections if r["repo"] in configured]
    unattributed += [r for r in result.rejections if r["repo"] not in configured]
    return dict(per_repo), rejections, unattributed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", required=True,
                        help="writes <repo>.jsonl per configured repository, rejections.jsonl, "
                             "unattributed.jsonl and report.json")
    parser.add_argument("--manifest", required=True)


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.section("tasks.ingest")
    sources = [str(p) for p in section.get("extra_sources") or []]
    missing = [s for s in sources if not Path(s).is_file()]
    if missing:
        raise ConfigError(f"tasks.ingest.extra_sources: file(s) not found: {', '.join(missing)}")
    repos = cfg["repos"]
    configured = sorted(set(repos["pool"]) | set(repos.get("sft", [])) | set(repos.get("panel", [])))
    manifest = Manifest(stage="ingest-extra", params={"repos": repos, "tasks.ingest": section},
                        inputs=sources, code=stage_sources(__name__))
    with manifest.timed("ingest"):
        result = ingest_files(sources, int(section["max_record_bytes"]))
        per_repo, rejections, unattributed = shard(result, set(configured))
    out = Path(args.out_dir)
    outputs = [write_jsonl(out / f"{repo}.jsonl", per_repo.get(repo, [])) for repo in configured]
    report = {**result.report, "unattributed": len(unattributed),
              "per_repo": {repo: len(per_repo.get(repo, [])) for repo in configured}}
    outputs += [write_jsonl(out / "rejections.jsonl", rejections),
                write_jsonl(out / "unattributed.jsonl", unattributed),
                write_json(out / "report.json", report)]
    manifest.notes = {"accepted": result.report["accepted"], "rejected": result.report["rejected"],
                      "unattributed": len(unattributed)}
    manifest.write(args.manifest, outputs=outputs)
    if unattributed:
        logging.getLogger(__name__).warning(
            "%d record(s) belong to no configured repository: see %s", len(unattributed),
            out / "unattributed.jsonl")
    logging.getLogger(__name__).info("extra sources: %s", summary_line(result.report))
