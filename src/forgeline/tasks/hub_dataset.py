"""Upstream SWE-smith from the Hugging Face hub: a dataset repository of Parquet shards, pinned.

`tasks.ingest.hub` names a dataset repository (e.g. `SWE-bench/SWE-smith`, files such as
`data/train-00000-of-00010.parquet`) at a full 40-hex commit; `ingest-extra` reads it into the
same path as `tasks.ingest.extra_sources`: every row is accepted or rejected with its file, row
and category (`forgeline.tasks.ingest`), then sharded by repository (`forgeline.tasks.extra`).

Reproducibility rules, as for the base policy (`forgeline.policy.hub`):
- the revision must be a full commit hash: a branch or tag ("main") moves, so it is refused;
- the token (a private or gated dataset) is read from $HF_TOKEN only, never from the hub's
  stored-token file, and written nowhere;
- offline ($HF_HUB_OFFLINE=1) the snapshot must already be in the hub cache ($HF_HUB_CACHE, else
  the hub's default), and every cached LFS blob (the Parquet shards) is re-hashed against its
  name: a damaged download fails the stage; a shard that upstream published broken is one
  `bad_parquet_file` rejection.
Rows are named in the rejections as `hf://datasets/<repo_id>@<revision>/<file>` (row N), the
hub's own file-system address, so rejections.jsonl does not depend on where the cache is.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Iterator

from forgeline.policy import hub
from forgeline.policy.hub import HubError, RevisionError, verify_lfs_blobs
from forgeline.tasks.ingest import PARQUET_SUFFIX, SourceRead, read_parquet

REPO_TYPE = "dataset"
DEFAULT_PATTERNS = ("data/*.parquet",)


def check_revision(repo_id: str, revision: str | None) -> str:
    """`revision` if it is a full commit hash, else RevisionError (tasks.ingest.hub.revision)."""
    try:
        return hub.check_revision(repo_id, revision, repo_type="dataset")
    except RevisionError as exc:
        raise RevisionError(f"tasks.ingest.hub.revision: {exc}") from None


def resolve_dataset(repo_id: str, revision: str, allow_patterns: list[str] | None = None,
                    cache_dir: str | os.PathLike | None = None,
                    local_files_only: bool | None = None, verify: bool = True) -> Path:
    """The local snapshot folder of dataset `repo_id` at commit `revision`, downloaded if needed.

    Inputs: a dataset repository id ("org/name"); a full commit hash; the file patterns to
    fetch (default DEFAULT_PATTERNS); the hub cache (default: $HF_HUB_CACHE at call time, else
    the hub's default); local_files_only (default: true when $HF_HUB_OFFLINE is set at call
    time). With `verify`, cached LFS blobs are re-hashed against their names. Raises
    RevisionError for a non-commit revision, HubError with the remedy otherwise.
    """
    check_revision(repo_id, revision)
    patterns = list(allow_patterns or DEFAULT_PATTERNS)
    if local_files_only is None:  # read now: huggingface_hub reads it once, at import
        local_files_only = hub.env_true("HF_HUB_OFFLINE")
    folder = hub.download_snapshot(repo_id, revision, REPO_TYPE, cache_dir, local_files_only, patterns)
    if verify:
        verify_lfs_blobs(folder)
    return folder


def parquet_files(snapshot: str | os.PathLike,
                  allow_patterns: list[str] | None = None) -> list[str]:
    """The snapshot's Parquet files that match the patterns, as sorted POSIX relative paths.

    The cache folder of a commit can hold files fetched earlier under other patterns: only
    the configured ones are read, so what is ingested depends on the config alone.
    """
    snapshot = Path(snapshot)
    patterns = list(allow_patterns or DEFAULT_PATTERNS)
    out = []
    for path in snapshot.rglob("*" + PARQUET_SUFFIX):
        rel = path.relative_to(snapshot).as_posix()
        if ".cache" in Path(rel).parts or not path.is_file():
            continue
        if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            out.append(rel)
    return sorted(out)


def source_name(repo_id: str, revision: str, relpath: str) -> str:
    """How a shard is named in the rejections and reports: the hub's file-system address."""
    return f"hf://datasets/{repo_id}@{revision}/{relpath}"


def hub_reads(snapshot: str | os.PathLike, files: list[str], repo_id: str, revision: str,
              max_record_bytes: int, max_records: int | None = None) -> Iterator[SourceRead]:
    """One lazy `SourceRead` per shard, in `files` order, at most `max_records` rows in all.

    The generator must be consumed in order (as `ingest.ingest` does): the rows left for the
    next shard are known when the previous one has been read.
    """
    left = max_records
    for rel in files:
        if left is not None and left <= 0:
            return
        read = read_parquet(source_name(repo_id, revision, rel), Path(snapshot) / rel,
                            max_record_bytes, max_rows=left)
        yield read
        if left is not None:
            left -= read.rows


__all__ = ["DEFAULT_PATTERNS", "HubError", "check_revision", "hub_reads", "parquet_files",
           "resolve_dataset", "source_name"]
