"""`forgeline publish`: upload the hub-ready folders, the adapter and the dataset, to the hub.

    forgeline publish [--adapter results/publish/adapter] [--dataset results/dataset/hf] [--dry-run]

A user action, never a rule. In this order, and nothing is created or uploaded unless every step
before the upload has passed for every folder:

1. Each folder is checked against its card (README.md, "## Files"): every file listed is there
   with its bytes and sha256, and every file there is listed (`.snakemake_timestamp`, which
   Snakemake drops into directory outputs, is never uploaded).
2. Where: `publish.hub.adapter_repo` (a model repository) and `dataset_repo` (a dataset
   repository); a folder whose id is null is not configured and skipped; none configured stops.
3. `--dry-run` prints what would be uploaded (repository, type, visibility, each file and its
   bytes) and stops: it needs neither a token nor the network.
4. The token comes from $HF_TOKEN only (never the hub's stored-token file); $HF_HUB_OFFLINE set
   stops.
5. The endpoint ($HF_ENDPOINT, else https://huggingface.co) must answer within
   `publish.hub.connect_timeout_s` seconds, else it stops, naming the endpoint.
6. Each repository is created if missing, private as `publish.hub.private` says; an existing
   public one is refused while private is true.
7. `upload_folder` per folder: exactly the card's files and the card; remote files not in the
   folder are deleted (the repository mirrors the folder; .gitattributes stays).
"""
from __future__ import annotations

import argparse
import logging
import os
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forgeline.provenance import sha256_file
from forgeline.publish.card import CARD, card_files

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
NEVER_UPLOADED = (".snakemake_timestamp",)


class PublishError(RuntimeError):
    """A folder, the config or the environment does not allow the upload; nothing was uploaded."""


@dataclass(frozen=True)
class Target:
    """One folder and where it goes: repo_id None = not configured."""

    name: str
    folder: Path
    repo_type: str
    repo_id: str | None


# -- checks (no network) -------------------------------------------------------------------------

def check_folder(folder: Path) -> dict[str, dict[str, Any]]:
    """The card's files ({path: {bytes, sha256}}) after checking the folder against them; a
    PublishError lists every file missing, changed or not on the card."""
    card = folder / CARD
    if not card.is_file():
        raise PublishError(f"{folder}: no {CARD} (build it: snakemake {folder})")
    try:
        listed = card_files(card.read_text(encoding="utf-8"))
    except ValueError as exc:  # e.g. a card written before it had one
        raise PublishError(f"{card}: {exc}; rebuild the folder (snakemake {folder})") from None
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
               if p.is_file() and p.name not in NEVER_UPLOADED} - {CARD}
    problems = [f"{path}: on the card, not in the folder" for path in sorted(set(listed) - present)]
    problems += [f"{path}: in the folder, not on the card" for path in sorted(present - set(listed))]
    for path in sorted(set(listed) & present):
        size, digest = (folder / path).stat().st_size, sha256_file(folder / path)
        if (size, digest) != (listed[path]["bytes"], listed[path]["sha256"]):
            problems.append(f"{path}: {size} bytes, sha256 {digest}; the card says "
                            f"{listed[path]['bytes']} bytes, {listed[path]['sha256']}")
    if problems:
        raise PublishError(f"{folder} does not match its card ({card}); rebuild it:\n  " + "\n  ".join(problems))
    return listed


def targets(hub, adapter: Path, dataset: Path) -> list[Target]:
    """The two folders and their repositories (`hub`: the publish.hub config section)."""
    return [Target("adapter", adapter, "model", hub.adapter_repo),
            Target("dataset", dataset, "dataset", hub.dataset_repo)]


def plan(items: list[Target]) -> dict[str, dict[str, dict[str, Any]]]:
    """{target name: the card's files} for every folder that exists, each checked; a folder that
    is missing is an error only where its repository is configured."""
    out = {}
    for t in items:
        if t.folder.is_dir():
            out[t.name] = check_folder(t.folder)
        elif t.repo_id:
            raise PublishError(f"{t.folder}: missing (publish.hub.{t.name}_repo is {t.repo_id}); build it first")
    if not any(t.repo_id and t.name in out for t in items):
        raise PublishError("nothing to publish: set publish.hub.adapter_repo and/or publish.hub.dataset_repo "
                           "(an overlay: configs/<name>.yaml)")
    return out


def describe(items: list[Target], files: dict[str, dict], private: bool) -> str:
    """What would be uploaded, one line per repository and per file."""
    lines = []
    for t in items:
        if t.name not in files:
            lines.append(f"{t.name}: {t.folder} missing; not configured (publish.hub.{t.name}_repo: null)")
            continue
        listed = files[t.name]
        where = f"{t.repo_type} repository {t.repo_id} ({'private' if private else 'public'})" if t.repo_id \
            else f"nowhere: publish.hub.{t.name}_repo is null"
        total = sum(f["bytes"] for f in listed.values()) + (t.folder / CARD).stat().st_size
        lines.append(f"{t.name}: {t.folder} -> {where}: {len(listed) + 1} files, {total} bytes")
        lines += [f"  {CARD} ({(t.folder / CARD).stat().st_size} bytes, the card)"]
        lines += [f"  {path} ({f['bytes']} bytes, sha256 {f['sha256']})" for path, f in sorted(listed.items())]
    return "\n".join(lines)


# -- the environment -----------------------------------------------------------------------------

def endpoint() -> str:
    """The hub endpoint: $HF_ENDPOINT (read now), else the public hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str:
    """$HF_TOKEN; PublishError when it is unset or $HF_HUB_OFFLINE is set."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise PublishError("HF_HUB_OFFLINE is set: unset it to upload (nothing was uploaded)")
    value = os.environ.get("HF_TOKEN", "").strip()
    if not value:
        raise PublishError("HF_TOKEN is not set: export a token with write access to the repositories "
                           "(the hub's stored token is not read); nothing was uploaded")
    return value


def unreachable(url: str, timeout_s: float) -> str | None:
    """None when `url` answers HTTP within timeout_s (any status counts), else why not. Name
    resolution included: the probe runs in a thread that is given up on after timeout_s."""
    result: list[str | None] = ["no answer"]

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s).close()
            result[0] = None
        except urllib.error.HTTPError:  # it answered
            result[0] = None
        except (OSError, ValueError) as exc:
            result[0] = str(getattr(exc, "reason", exc))

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s + 1)
    return f"no answer within {timeout_s:g} s" if thread.is_alive() else result[0]


# -- the upload ----------------------------------------------------------------------------------

def upload(items: list[Target], files: dict[str, dict], private: bool, hub_token: str, url: str) -> list[str]:
    """Create (or find) every configured repository, refusing a public one when `private`, then
    upload each folder: its card's files and the card, remote files not in it deleted. Returns
    the commit URLs."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=url, token=hub_token)
    chosen = [t for t in items if t.repo_id and t.name in files]
    for t in chosen:  # every repository first: a refusal uploads nothing
        api.create_repo(t.repo_id, repo_type=t.repo_type, private=private, exist_ok=True, token=hub_token)
        info = api.repo_info(t.repo_id, repo_type=t.repo_type, token=hub_token)
        if private and not getattr(info, "private", False):
            raise PublishError(f"{t.repo_type} repository {t.repo_id} exists and is public while "
                               f"publish.hub.private is true: make it private or set private: false; "
                               f"nothing was uploaded")
    commits = []
    for t in chosen:
        commit = api.upload_folder(repo_id=t.repo_id, repo_type=t.repo_type, folder_path=str(t.folder),
                                   allow_patterns=[CARD, *sorted(files[t.name])], delete_patterns="*",
                                   commit_message=f"forgeline publish: {t.name} ({len(files[t.name]) + 1} files)",
                                   commit_description=f"{CARD} sha256 {sha256_file(t.folder / CARD)}",
                                   token=hub_token)
        commits.append(str(getattr(commit, "commit_url", commit)))
        log.info("publish: %s -> %s (%s)", t.folder, t.repo_id, commits[-1])
    return commits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapter", type=Path, default=Path("results/publish/adapter"),
                        help="the adapter's folder (rule publish_adapter)")
    parser.add_argument("--dataset", type=Path, default=Path("results/dataset/hf"),
                        help="the dataset's folder (rule export_dataset)")
    parser.add_argument("--dry-run", action="store_true", help="check and print what would be uploaded; no network")


def run(cfg, args: argparse.Namespace) -> None:
    hub = cfg.publish.hub
    items = targets(hub, args.adapter, args.dataset)
    try:
        files = plan(items)
        print(describe(items, files, hub.private))
        if args.dry_run:
            print("dry run: nothing was uploaded")
            return
        hub_token, url = token(), endpoint()
        why = unreachable(url, float(hub.connect_timeout_s))
        if why is not None:
            raise PublishError(f"the hub endpoint {url} is not reachable ({why}): no network? Nothing was "
                               f"uploaded; retry where {url} answers (or set HF_ENDPOINT)")
        for commit in upload(items, files, hub.private, hub_token, url):
            print(f"uploaded: {commit}")
    except PublishError as exc:
        raise SystemExit(f"forgeline publish: {exc}") from None
