"""The repository-disjoint train/val/test split and its frozen split semantic digest.

Every repository lands in exactly one split (an agent never trains on the code it is tested
on). The split is identified by a digest over what defines its tasks, so a frozen split can be
pinned in params.yaml (`tasks.split.frozen_digest`): a run that would change it fails and names
the tasks that moved, compared with the frozen split's split.json when
`tasks.split.frozen_manifest` points at a copy of it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
from collections import Counter
from pathlib import Path
from typing import Iterable

from forgeline.config import ConfigError, as_dict
from forgeline.provenance import (Manifest, canonical_json, gc_paused, write_json,
                                  write_jsonl)
from forgeline.tasks.schema import (DEFINING_FIELDS, InstanceError, defining_fields,
                                    normalize_instance)

log = logging.getLogger(__name__)

DIGEST_SCHEME = "forgeline.split.v1"
SPLIT_JSON = "split.json"


class FrozenSplitError(ConfigError):
    """The split differs from the one pinned by tasks.split.frozen_digest; says what moved."""


# -- the split -----------------------------------------------------------------------------

def _check_fractions(fractions: dict[str, float]) -> list[str]:
    if not fractions:
        raise ValueError("split fractions are empty; expected e.g. "
                         "{train: 0.7, val: 0.15, test: 0.15}")
    for name, frac in fractions.items():
        if not isinstance(frac, (int, float)) or isinstance(frac, bool) or frac < 0 \
                or not math.isfinite(frac):
            raise ValueError(f"split fraction {name}={frac!r}: expected a number >= 0")
    total = sum(fractions.values())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"split fractions sum to {total:g}, not 1: {fractions}")
    return sorted(name for name, frac in fractions.items() if frac > 0)


def assign_repos(repo_counts: dict[str, int], fractions: dict[str, float],
                 seed: int) -> dict[str, list[str]]:
    """Assign each repository to one split; returns {split: sorted repository names}.

    Inputs: tasks per repository, the wanted share of tasks per split (summing to 1), a seed.
    The repositories, sorted by name, are shuffled with random.Random(seed); each in turn goes
    to the split furthest below its target task count (fraction * total tasks; ties go to the
    split whose name sorts first). Then each positive-fraction split left without a repository
    (in name order) takes the smallest repository (ties: by name) of the split furthest above
    its target among those holding two or more. So every split with a positive fraction gets at
    least one repository. Last, while moving one repository to another split or swapping two
    lowers sum |tasks - target| over the splits, the best such change is made (ties: the first
    found, scanning splits and repositories in name order). Depends only on (repo_counts,
    fractions, seed), never on input order.
    Raises ValueError when there are fewer repositories than positive-fraction splits.
    """
    names = _check_fractions(fractions)
    if len(repo_counts) < len(names):
        raise ValueError(
            f"cannot split {len(repo_counts)} repositories into {len(names)} non-empty "
            f"repository-disjoint splits ({', '.join(names)}); add repositories to the pool "
            f"(repos.pool) or set the fraction of a split to 0")
    total = sum(repo_counts.values())
    target = {n: fractions[n] * total for n in names}
    load = dict.fromkeys(names, 0)
    assigned: dict[str, list[str]] = {n: [] for n in sorted(fractions)}
    order = sorted(repo_counts)
    random.Random(seed).shuffle(order)
    for repo in order:
        best = max(names, key=lambda n: (target[n] - load[n], -names.index(n)))
        assigned[best].append(repo)
        load[best] += repo_counts[repo]
    for name in names:  # a split left empty gets the smallest repo of the fullest split
        if assigned[name]:
            continue
        donor = max((n for n in names if len(assigned[n]) > 1),
                    key=lambda n: (load[n] - target[n], -names.index(n)))
        repo = min(assigned[donor], key=lambda r: (repo_counts[r], r))
        assigned[donor].remove(repo)
        assigned[name].append(repo)
        load[donor] -= repo_counts[repo]
        load[name] += repo_counts[repo]
    _rebalance(assigned, load, target, repo_counts, names)
    return {n: sorted(repos) for n, repos in assigned.items()}


def _rebalance(assigned: dict[str, list[str]], load: dict[str, int], target: dict[str, float],
               repo_counts: dict[str, int], names: list[str]) -> None:
    """Best-improvement local search, in place: move one repository to another split, or swap
    two, while that lowers sum |load - target| (and leaves no positive split empty)."""
    def error(changes: dict[str, int]) -> float:
        return sum(abs(load[n] + changes.get(n, 0) - target[n]) for n in names)

    for _ in range(10 * sum(len(v) for v in assigned.values())):  # bound; it converges sooner
        base = error({})
        best: tuple[float, tuple] | None = None
        for a in names:
            for b in names:
                if a == b:
                    continue
                for r in sorted(assigned[a]):
                    cr = repo_counts[r]
                    if len(assigned[a]) > 1:  # move r: a -> b
                        gain = base - error({a: -cr, b: cr})
                        if gain > 1e-9 and (best is None or gain > best[0] + 1e-9):
                            best = (gain, (a, r, b, None))
                    if a < b:
                        for q in sorted(assigned[b]):  # swap r (in a) with q (in b)
                            d = repo_counts[q] - cr
                            if d and (gain := base - error({a: d, b: -d})) > 1e-9 and \
                                    (best is None or gain > best[0] + 1e-9):
                                best = (gain, (a, r, b, q))
        if best is None:
            return
        a, r, b, q = best[1]
        assigned[a].remove(r)
        assigned[b].append(r)
        load[a] -= repo_counts[r]
        load[b] += repo_counts[r]
        if q is not None:
            assigned[b].remove(q)
            assigned[a].append(q)
            load[b] -= repo_counts[q]
            load[a] += repo_counts[q]


def repo_disjoint_split(instances: Iterable[dict], fractions: dict[str, float],
                        seed: int) -> dict[str, list[dict]]:
    """Split instances by repository: {split name: instances sorted by instance_id}.

    Every repository lands in exactly one split; task-count shares aim at `fractions` (see
    `assign_repos`). Deterministic given the set of repositories, their task counts and the
    seed; independent of input order. Every name in `fractions` is a key (a 0 fraction gives
    an empty list). Raises ValueError on duplicate instance_ids or too few repositories.
    """
    instances = list(instances)
    ids = Counter(inst["instance_id"] for inst in instances)
    dupes = sorted(i for i, n in ids.items() if n > 1)
    if dupes:
        raise ValueError(f"duplicate instance_id(s) in the split input: {', '.join(dupes[:10])}"
                         + (f" and {len(dupes) - 10} more" if len(dupes) > 10 else ""))
    counts = Counter(inst["repo"] for inst in instances)
    repos = assign_repos(dict(counts), fractions, seed)
    split_of = {repo: name for name, rs in repos.items() for repo in rs}
    out: dict[str, list[dict]] = {name: [] for name in repos}
    for inst in instances:
        out[split_of[inst["repo"]]].append(inst)
    for rows in out.values():
        rows.sort(key=lambda inst: inst["instance_id"])
    return out


# -- the digest ----------------------------------------------------------------------------

def instance_content_digest(instance: dict) -> str:
    """sha256 hex of canonical_json(defining_fields(instance)), UTF-8 encoded.

    defining_fields: the fields of schema.DEFINING_FIELDS (absent -> null, test lists as lists).
    """
    return hashlib.sha256(canonical_json(defining_fields(instance)).encode("utf-8")).hexdigest()


def _digest_rows(rows: Iterable[tuple[str, str, str]]) -> str:
    h = hashlib.sha256()
    for name, iid, content in sorted(rows):
        h.update((canonical_json([name, iid, content]) + "\n").encode("utf-8"))
    return h.hexdigest()


def frozen_split_digest(split: dict[str, list[dict]]) -> str:
    """The frozen split semantic digest: sha256 hex over what defines the split.

    Serialization (scheme forgeline.split.v1), so it can be recomputed by hand:

    1. For each instance, its content digest C = sha256 hex of the UTF-8 bytes of
       canonical_json({f: instance.get(f) for f in DEFINING_FIELDS}), where DEFINING_FIELDS =
       instance_id, repo, base_commit, patch, FAIL_TO_PASS, PASS_TO_PASS, problem_statement,
       image_name; an absent field is null and JSON-encoded test lists are decoded to lists.
       canonical_json = json.dumps(obj, sort_keys=True, separators=(",", ":"),
       ensure_ascii=False).
    2. One line per instance: canonical_json([split_name, instance_id, C]) + "\\n", e.g.
       `["test","owner__repo.1a2b3c4d.lm_modify__0f0f0f0f","9c...e1"]`.
    3. Lines sorted by (split_name, instance_id), concatenated, UTF-8 encoded, sha256 hex.

    A split with no instances contributes no line. File order, JSON whitespace, key order and
    fields outside DEFINING_FIELDS do not change the digest; moving a task between splits or
    changing any defining field does. split.json lists [instance_id, C] per split, so the
    digest can also be recomputed from it alone (`digest_of_split_json`).
    """
    return _digest_rows((name, inst["instance_id"], instance_content_digest(inst))
                        for name, rows in split.items() for inst in rows)


def digest_of_split_json(summary: dict) -> str:
    """Recompute the frozen split digest from a split.json's per-split [instance_id, C] lists."""
    return _digest_rows((name, iid, content)
                        for name, rows in summary["instances"].items() for iid, content in rows)


def split_summary(split: dict[str, list[dict]], fractions: dict[str, float], seed: int) -> dict:
    """The content of split.json: digest, fractions/seed, repos, counts, shares, and per split
    the sorted [instance_id, content digest] pairs (what `split_moves` compares)."""
    instances = {name: sorted([inst["instance_id"], instance_content_digest(inst)]
                              for inst in rows)
                 for name, rows in sorted(split.items())}
    total = sum(len(rows) for rows in split.values())
    return {
        "digest": digest_of_split_json({"instances": instances}),
        "digest_scheme": DIGEST_SCHEME,
        "defining_fields": list(DEFINING_FIELDS),
        "fractions": dict(sorted(fractions.items())),
        "seed": seed,
        "counts": {name: len(rows) for name, rows in sorted(split.items())},
        "shares": {name: round(len(rows) / total, 4) if total else 0.0
                   for name, rows in sorted(split.items())},
        "repos": {name: sorted({inst["repo"] for inst in rows})
                  for name, rows in sorted(split.items())},
        "instances": instances,
    }


# -- what moved ----------------------------------------------------------------------------

def split_moves(expected_manifest: dict, actual: dict) -> dict[str, list[dict]]:
    """Which tasks moved between two split.json contents (`split_summary` outputs).

    Returns {"added": [{instance_id, split}], "removed": [{instance_id, split}],
    "changed_split": [{instance_id, from, to}], "changed_content": [{instance_id, split}]},
    each sorted by instance_id; a task can be both in changed_split and changed_content.
    """
    def index(summary: dict) -> dict[str, tuple[str, str]]:
        return {iid: (name, content) for name, rows in summary["instances"].items()
                for iid, content in rows}

    old, new = index(expected_manifest), index(actual)
    both = sorted(old.keys() & new.keys())
    return {
        "added": [{"instance_id": i, "split": new[i][0]}
                  for i in sorted(new.keys() - old.keys())],
        "removed": [{"instance_id": i, "split": old[i][0]}
                    for i in sorted(old.keys() - new.keys())],
        "changed_split": [{"instance_id": i, "from": old[i][0], "to": new[i][0]}
                          for i in both if old[i][0] != new[i][0]],
        "changed_content": [{"instance_id": i, "split": new[i][0]}
                            for i in both if old[i][1] != new[i][1]],
    }


def describe_moves(moves: dict[str, list[dict]], limit: int = 20) -> str:
    """Human-readable lines for `split_moves`, at most `limit` tasks per kind."""
    lines = []
    for kind, label in (("added", "added"), ("removed", "removed"),
                        ("changed_split", "changed split"), ("changed_content", "changed content")):
        rows = moves[kind]
        if not rows:
            continue
        lines.append(f"  {label} ({len(rows)}):")
        for row in rows[:limit]:
            where = (f"{row['from']} -> {row['to']}" if kind == "changed_split" else row["split"])
            lines.append(f"    {row['instance_id']} ({where})")
        if len(rows) > limit:
            lines.append(f"    ... and {len(rows) - limit} more")
    return "\n".join(lines) if lines else "  (no task moved: same ids, splits and content)"


def frozen_mismatch_message(summary: dict, frozen_digest: str, frozen: dict | None = None,
                            frozen_path: str | None = None) -> str:
    """The failure message when the split's digest is not the pinned one."""
    msg = [f"the split differs from the frozen split: tasks.split.frozen_digest pins "
           f"{frozen_digest}, these inputs give {summary['digest']}."]
    if frozen is not None:
        moves = split_moves(frozen, summary)
        counts = ", ".join(f"{len(moves[k])} {k.replace('_', ' ')}" for k in moves)
        msg.append(f"Compared with the frozen split in {frozen_path}: {counts}:")
        msg.append(describe_moves(moves))
        if frozen.get("digest") != frozen_digest:
            msg.append(f"Note: {frozen_path} has digest {frozen.get('digest')}, not the pinned "
                       f"one; it may not describe the pinned split.")
        elif digest_of_split_json(frozen) != frozen_digest:
            msg.append(f"Note: {frozen_path}'s instance lists do not hash to its digest; the file "
                       f"was edited.")
    else:
        msg.append("No frozen split.json to compare with, so the moved tasks cannot be named "
                   "(set tasks.split.frozen_manifest to a copy of the frozen split's split.json).")
    msg.append(f"Fix: restore the inputs that made the frozen split, or, if the change is "
               f"intended, set tasks.split.frozen_digest: {summary['digest']}"
               + (f" and replace {frozen_path} with the new split.json" if frozen_path else "")
               + ".")
    return "\n".join(msg)


# -- the stage -----------------------------------------------------------------------------



def load_instances(paths: Iterable[str | Path]) -> list[dict]:
    """Read JSONL files of instances (normalised); a bad record or a duplicate id raises
    ValueError naming file:line (these are the pipeline's own artifacts, so it is a bug)."""
    first_at: dict[str, str] = {}
    out: list[dict] = []
    with gc_paused():
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        inst = normalize_instance(json.loads(line))
                    except (json.JSONDecodeError, InstanceError) as exc:
                        raise ValueError(f"{path}:{lineno}: not a task instance: {exc}") from None
                    iid = inst["instance_id"]
                    if iid in first_at:
                        raise ValueError(f"{path}:{lineno}: duplicate instance_id {iid} "
                                         f"(first at {first_at[iid]})")
                    first_at[iid] = f"{path}:{lineno}"
                    out.append(inst)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, metavar="JSONL",
                        help="files of task instances (validated / difficulty-filtered)")
    parser.add_argument("--out-dir", required=True,
                        help="writes <split>.jsonl per split name and split.json")
    parser.add_argument("--manifest", required=True)


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.tasks.split
    fractions = {k: float(v) for k, v in as_dict(section.fractions).items()}
    seed = int(section.seed)
    frozen_digest = section.frozen_digest
    frozen_path = section.frozen_manifest
    if frozen_path and not Path(frozen_path).is_file():
        raise ConfigError(f"tasks.split.frozen_manifest: {frozen_path} not found (a copy of the "
                          f"frozen split's split.json)")
    manifest = Manifest(stage="split", params=as_dict(section), seeds={"split": seed},
                        inputs=[*args.tasks, *([frozen_path] if frozen_path else [])],
                        code=__name__)
    with manifest.timed("read"):
        instances = load_instances(args.tasks)
    if not instances:
        # an empty pool is a finding about the base policy (or the tasks), not a split to make
        raise SystemExit(f"split: no tasks in {', '.join(args.tasks)}. If these are the difficulty "
                         f"filter's pools, the base policy solved every or none of its episodes on "
                         f"each task: see the .difficulty.json reports beside them; fix the policy "
                         f"(train.sft) or the tasks, not tasks.difficulty.band")
    with manifest.timed("split"), gc_paused():
        split = repo_disjoint_split(instances, fractions, seed)
        summary = split_summary(split, fractions, seed)
    if frozen_digest and summary["digest"] != frozen_digest:
        frozen = None
        if frozen_path:
            frozen = json.loads(Path(frozen_path).read_text(encoding="utf-8"))
        raise FrozenSplitError(frozen_mismatch_message(summary, frozen_digest, frozen, frozen_path))
    out_dir = Path(args.out_dir)
    outputs = []
    with manifest.timed("write"), gc_paused():
        for name, rows in split.items():
            outputs.append(write_jsonl(out_dir / f"{name}.jsonl", rows))
        outputs.append(write_json(out_dir / SPLIT_JSON, summary))
    manifest.notes = {"digest": summary["digest"], "counts": summary["counts"],
                      "shares": summary["shares"],
                      "repos": {n: len(r) for n, r in summary["repos"].items()},
                      "frozen": bool(frozen_digest)}
    manifest.write(args.manifest, outputs=outputs)
    parts = ", ".join(f"{n} {summary['counts'][n]} tasks / {len(summary['repos'][n])} repos "
                      f"({summary['shares'][n]:.1%})" for n in summary["counts"])
    log.info("split: %s; digest %s%s", parts, summary["digest"],
             " (matches the frozen digest)" if frozen_digest else "")
