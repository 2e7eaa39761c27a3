"""External SWE-smith-format tasks, read ONCE and sharded by repository.

The sources: the files of `tasks.ingest.extra_sources` (JSONL, JSON array or Parquet), then the
upstream dataset of `tasks.ingest.hub` (a hub dataset of Parquet shards at a pinned commit,
`forgeline.tasks.hub_dataset`), in that order: for an instance_id in both, the file wins.

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

from forgeline.config import ConfigError, as_dict
from forgeline.params import IngestHubConfig
from forgeline.policy.hub import HubError
from forgeline.provenance import Manifest, write_json, write_jsonl
from forgeline.tasks.hub_dataset import hub_reads, parquet_files, resolve_dataset
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


def hub_spec(hub: IngestHubConfig) -> IngestHubConfig | None:
    """tasks.ingest.hub when it names a dataset (repo_id set), else None (off)."""
    return hub if hub.repo_id else None


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.tasks.ingest
    max_record_bytes = int(section.max_record_bytes)
    sources = [str(p) for p in section.extra_sources]
    missing = [s for s in sources if not Path(s).is_file()]
    if missing:
        raise ConfigError(f"tasks.ingest.extra_sources: file(s) not found: {', '.join(missing)}")
    repos = cfg.repos
    configured = sorted(set(repos.pool) | set(repos.sft) | set(repos.panel))
    manifest = Manifest(stage="ingest-extra",
                        params={"repos": as_dict(repos), "tasks.ingest": as_dict(section)},
                        inputs=sources, code=__name__)
    hub, more, hub_files = hub_spec(section.hub), [], []
    if hub is not None:
        repo_id, revision = hub.repo_id, hub.revision
        try:
            with manifest.timed("hub"):
                snapshot = resolve_dataset(repo_id, revision, hub.allow_patterns)
        except HubError as exc:
            raise ConfigError(f"tasks.ingest.hub: {exc}") from None
        hub_files = parquet_files(snapshot, hub.allow_patterns)
        if not hub_files:
            raise ConfigError(f"tasks.ingest.hub: no Parquet file of {repo_id}@{revision} matches "
                              f"allow_patterns {hub.allow_patterns} in {snapshot}")
        manifest.inputs = [*sources, *(str(snapshot / f) for f in hub_files)]
        more = hub_reads(snapshot, hub_files, repo_id, revision, max_record_bytes,
                         hub.max_records)
    with manifest.timed("ingest"):
        result = ingest_files(sources, max_record_bytes, more)
        per_repo, rejections, unattributed = shard(result, set(configured))
    out = Path(args.out_dir)
    outputs = [write_jsonl(out / f"{repo}.jsonl", per_repo.get(repo, [])) for repo in configured]
    report = {**result.report, "unattributed": len(unattributed),
              "per_repo": {repo: len(per_repo.get(repo, [])) for repo in configured}}
    if hub is not None:
        rows = sum(s.get("rows", 0) for name, s in result.report["sources"].items()
                   if name.startswith("hf://"))
        report["hub"] = {"repo_id": hub.repo_id, "revision": hub.revision,
                         "files": hub_files, "rows": rows,
                         "max_records": hub.max_records,
                         "capped": hub.max_records is not None and rows >= hub.max_records}
    outputs += [write_jsonl(out / "rejections.jsonl", rejections),
                write_jsonl(out / "unattributed.jsonl", unattributed),
                write_json(out / "report.json", report)]
    manifest.notes = {"accepted": result.report["accepted"], "rejected": result.report["rejected"],
                      "unattributed": len(unattributed),
                      **({"hub": {k: report["hub"][k] for k in ("repo_id", "revision", "rows", "capped")}}
                         if hub is not None else {})}
    manifest.write(args.manifest, outputs=outputs)
    if unattributed:
        logging.getLogger(__name__).warning(
            "%d record(s) belong to no configured repository: see %s", len(unattributed),
            out / "unattributed.jsonl")
    logging.getLogger(__name__).info("extra sources: %s", summary_line(result.report))
