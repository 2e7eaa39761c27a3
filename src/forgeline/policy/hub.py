"""The real base policy from the Hugging Face hub, pinned to one commit.

`resolve_base_model(repo_id, revision)` returns the local folder of that commit's snapshot,
downloading it if needed (`huggingface_hub.snapshot_download`). Reproducibility rules:
- the revision must be a full 40-hex commit: a branch or tag ("main", "v1.0") moves;
- the access token (gated models need one) is read from the environment variable HF_TOKEN
  only: never from the hub's stored-token file, never passed on the command line, never
  written anywhere by this module;
- offline (HF_HUB_OFFLINE=1, or local_files_only=True) the snapshot must already be in the
  cache (HF_HUB_CACHE, else the hub's default), and it is checked: every cached LFS blob's
  sha256 must be its file name.

Stage `policy-hub` (`policy.base.source: hub`): resolves `policy.base.hub` and writes the
snapshot's files into the base-policy folder (hard links into the hub cache where the file
system allows, else copies), so that every later stage loads one local folder and DVC versions
the exact weights; the manifest records the repository, the commit and every file's sha256.
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)
STAGE = "policy.hub"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_TRUE = {"1", "on", "yes", "true"}


class HubError(RuntimeError):
    """The base model cannot be resolved; the message says why and what to do."""


class RevisionError(HubError, ValueError):
    """The revision is not a full commit hash."""


def check_revision(repo_id: str, revision: str | None, repo_type: str = "model") -> str:
    """Return `revision` if it is a full 40-hex commit hash, else raise RevisionError saying
    how to find the commit of the `repo_type` ("model" or "dataset") repository."""
    if isinstance(revision, str) and COMMIT_RE.fullmatch(revision):
        return revision
    dataset = repo_type == "dataset"
    url = f"https://huggingface.co/{'datasets/' if dataset else ''}{repo_id}/commits/main"
    info = "dataset_info" if dataset else "model_info"
    raise RevisionError(
        f"revision {revision!r} of {repo_type} {repo_id} is not a full commit hash: a branch or tag "
        f"(like 'main') moves when the repository changes, so the same config could load "
        f"different {'tasks' if dataset else 'weights'}. Pin the 40-hex commit instead. To find "
        f"it: open {url}, or run `python -c \"from huggingface_hub import HfApi; "
        f"print(HfApi().{info}('{repo_id}', revision='{revision or 'main'}').sha)\"` (with "
        f"HF_TOKEN set for a gated repository), or read refs/{revision or 'main'} in the cached "
        f"{repo_type}s--{repo_id.replace('/', '--')} folder.")


def env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def download_snapshot(repo_id: str, revision: str, repo_type: str,
                      cache_dir: str | os.PathLike | None, local_files_only: bool,
                      allow_patterns: list[str] | None) -> Path:
    """huggingface_hub.snapshot_download of a `repo_type` ("model" | "dataset") repository at a
    commit, the token from $HF_TOKEN only; each way it can fail becomes a HubError that says what
    to do. `cache_dir` None: $HF_HUB_CACHE at call time, else the hub's default."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, IncompleteSnapshotError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    name = f"dataset {repo_id}" if repo_type == "dataset" else repo_id
    page = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"
    if cache_dir is None:
        cache_dir = os.environ.get("HF_HUB_CACHE") or None
    token = os.environ.get("HF_TOKEN") or False  # False: never fall back to a stored token
    try:
        return Path(snapshot_download(repo_id=repo_id, repo_type=repo_type, revision=revision,
                                      cache_dir=cache_dir, local_files_only=local_files_only,
                                      token=token, allow_patterns=allow_patterns))
    except GatedRepoError:
        raise HubError(f"{name} is gated: accept its terms on {page} and export "
                       f"HF_TOKEN=<a read token of that account> before running") from None
    except RepositoryNotFoundError:
        raise HubError(f"{name} not found on the hub (or private: export HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise HubError(f"{name} has no commit {revision}") from None
    except IncompleteSnapshotError as exc:
        raise HubError(f"{name}@{revision}: the cached snapshot is incomplete ({exc}); "
                       f"download it again with network access") from None
    except LocalEntryNotFoundError:
        where = cache_dir or "the default hub cache"
        include = " ".join(f"--include '{p}'" for p in allow_patterns or [])
        raise HubError(
            f"{name}@{revision} is not in {where} and downloads are off (HF_HUB_OFFLINE / "
            f"local_files_only). Fetch it once on a machine with access: `hf download {repo_id} "
            f"--repo-type {repo_type} --revision {revision} {include} --cache-dir DIR` (HF_TOKEN "
            f"set for a gated repository), then copy the cache folder here and set "
            f"HF_HUB_CACHE=DIR.") from None


def resolve_base_model(repo_id: str, revision: str, cache_dir: str | os.PathLike | None = None,
                       local_files_only: bool | None = None,
                       allow_patterns: list[str] | None = None, verify: bool = True) -> Path:
    """The local snapshot folder of `repo_id` at commit `revision`, downloaded if needed.

    Inputs: a model repository id ("org/name"); a full commit hash; the hub cache folder
    (default: $HF_HUB_CACHE at call time, else the hub's default); local_files_only (default:
    true when $HF_HUB_OFFLINE is set at call time); file patterns to fetch (default: all).
    With `verify`, cached LFS blobs are re-hashed against their names. Raises RevisionError
    for a non-commit revision and HubError, with the remedy, when the snapshot is missing.
    """
    check_revision(repo_id, revision)
    if local_files_only is None:  # read now: huggingface_hub reads it once, at import
        local_files_only = env_true("HF_HUB_OFFLINE") or env_true("TRANSFORMERS_OFFLINE")
    folder = download_snapshot(repo_id, revision, "model", cache_dir, local_files_only, allow_patterns)
    if not (folder / "config.json").is_file():
        raise HubError(f"{folder} has no config.json: not a model snapshot")
    if verify:
        verify_lfs_blobs(folder)
    return folder


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _snapshot_files(folder: Path) -> list[Path]:
    # `.cache/` holds the hub's bookkeeping when a snapshot was downloaded with local_dir
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and ".cache" not in p.relative_to(folder).parts)


def verify_lfs_blobs(folder: str | os.PathLike) -> int:
    """In a hub-cache snapshot, files that link to a blob named by a sha256 (LFS files such as
    weights) must hash to that name. Returns how many were checked; raises HubError on a
    mismatch (a truncated or corrupted download)."""
    checked = 0
    for path in _snapshot_files(Path(folder)):
        if not path.is_symlink():
            continue
        blob = path.resolve().name
        if _SHA256_RE.fullmatch(blob):
            if _sha256(path) != blob:
                raise HubError(f"{path}: content does not match its blob hash {blob} "
                               f"(corrupted download: delete the blob and fetch it again)")
            checked += 1
    return checked



def materialize(snapshot: str | os.PathLike, dest: str | os.PathLike) -> list[Path]:
    """Put every file of `snapshot` under `dest` (same relative paths): a hard link to the
    cached blob when `dest` is on the same file system, else a copy. Returns the new paths."""
    snapshot, dest = Path(snapshot), Path(dest)
    out = []
    for src in _snapshot_files(snapshot):
        target = dest / src.relative_to(snapshot)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src.resolve(), target)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(src, target)
        out.append(target)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the base-policy folder to write")
    parser.add_argument("--manifest", help="manifest path (default: OUT/manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    from forgeline.provenance import MANIFEST_NAME, Manifest, atomic_dir

    from forgeline.config import as_dict

    section = cfg.policy.base
    repo_id, revision = section.hub.repo_id, section.hub.revision
    if section.source != "hub" or not repo_id:
        raise SystemExit("policy-hub: set policy.base.source: hub and policy.base.hub.repo_id "
                         "(and .revision, a full commit) in the config, e.g. configs/klear-8b.yaml")
    manifest = Manifest(stage=STAGE, params={"policy.base": as_dict(section)}, inputs=[],
                        code=__name__)
    with manifest.timed("resolve"):
        snapshot = resolve_base_model(repo_id, revision, allow_patterns=section.hub.allow_patterns)
    out = Path(args.out)
    with atomic_dir(out, owned=(MANIFEST_NAME, "config.json")) as tmp:
        with manifest.timed("materialize"):
            materialize(snapshot, tmp)
    outputs = sorted(p for p in out.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    size = sum(p.stat().st_size for p in outputs)
    # the manifest's outputs carry each file's sha256 (hashed once, there)
    manifest.notes = {"repo_id": repo_id, "revision": revision, "bytes": size, "files": len(outputs)}
    manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
    log.info("wrote %s: %s@%s, %d files, %.1f MB", out, repo_id, revision[:12], len(outputs), size / 1e6)
