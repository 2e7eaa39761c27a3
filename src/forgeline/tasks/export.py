"""Export the split as a dataset: SWE-smith JSONL, and a hub dataset folder with its card.

Stage `forgeline export-dataset --split-dir results/split --images results/images/*.json
--funnel results/tasks/funnel.json --out-dir results/dataset --manifest
results/dataset/manifest.json` writes:

    OUT/swe-smith/<split>.jsonl    one instance per line in SWE-smith's own fields (SWE_SMITH_FIELDS,
                                   absent optional ones as null), what swesmith/swebench tools read
    OUT/hf/data/<split>-00000-of-00001.parquet   the same rows + a `forgeline` column (below)
    OUT/hf/README.md               the dataset card: YAML metadata (license, task_categories, tags,
                                   pretty_name, configs/data_files: `datasets.load_dataset(OUT/hf)`
                                   gives every split) and a body with the digests, per-split
                                   counts and repositories, environments, the rejection funnel
                                   (per step, per repository, per reason), how to load it and
                                   every file's bytes and sha256 (what `forgeline publish` checks)
    OUT/hf/experiment.json         the digests, their parts and each data file's sha256

OUT/hf is what `forgeline publish` uploads as a dataset repository (`publish.hub.dataset_repo`),
after checking every file against the card's Files table.

Fields. SWE-smith JSONL keeps exactly SWE_SMITH_FIELDS: forgeline-only fields (bug_type,
mutation, validation, ...) are dropped there, so a file is what upstream publishes. The hub
dataset keeps them, as one JSON-encoded string column `forgeline` (canonical JSON of every
field outside SWE_SMITH_FIELDS), so its schema is fixed whatever the records carry.

The experiment digest (scheme forgeline.experiment.v1) names the split AND the environments its
tasks are graded in, so a rebuilt or drifted image gives another digest though no task changed:

    environment = sha256(canonical_json({"scheme": "forgeline.environment.v1",
        "backend": sandbox.backend, "grading_command": forgeline.sandbox.grading.command_digest(),
        "images": {repo: {"image_id", "build_input_digest"} or null (process backend)}}))
    experiment  = sha256(canonical_json({"scheme": "forgeline.experiment.v1",
        "split": <frozen split semantic digest>, "environment": <environment digest>}))

with canonical_json as in `forgeline.provenance` and `repo` the repository's snapshot folder
(`schema.repo_key`) for every repository of the split. Fields outside schema.DEFINING_FIELDS do
not change it.

Every split name, id and repository name is checked before anything is written (a split file
edited by hand with an instance_id like "../x" is refused, naming the file and line), every
written path is checked to lie inside OUT, and each output is written atomically (OUT/hf is
built beside itself and swapped in whole); the manifest is written last.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path
from typing import Iterable

from forgeline.config import ConfigError, as_dict
from forgeline.provenance import (Manifest, atomic_dir, atomic_path, canonical_json,
                                  sha256_bytes, sha256_file, write_json, write_jsonl,
                                  write_text)
from forgeline.sandbox.grading import command_digest
from forgeline.tasks.schema import DEFINING_FIELDS, repo_key
from forgeline.tasks.split import DIGEST_SCHEME, SPLIT_JSON, frozen_split_digest, load_instances

log = logging.getLogger(__name__)

EXPERIMENT_SCHEME = "forgeline.experiment.v1"
ENVIRONMENT_SCHEME = "forgeline.environment.v1"
EXPORT_FORMAT = "forgeline.dataset.v1"
# SWE-smith's record fields, in the order upstream's hub dataset lists its columns.
SWE_SMITH_FIELDS = ("instance_id", "repo", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "created_at",
                    "image_name", "base_commit", "problem_statement")
EXTRA_COLUMN = "forgeline"
HF_DIR, JSONL_DIR, DATA_DIR = "hf", "swe-smith", "data"
CARD, EXPERIMENT_JSON = "README.md", "experiment.json"
SPLIT_ORDER = ("train", "val", "test")
_SPLIT_NAME = re.compile(r"[a-z][a-z0-9_]*")  # also what `datasets` accepts as a split name


def data_file(split: str) -> str:
    """The split's Parquet file inside the hub folder (the hub's shard naming)."""
    return f"{DATA_DIR}/{split}-00000-of-00001.parquet"


# -- pure functions ------------------------------------------------------------------------

def swe_smith_record(instance: dict) -> dict:
    """The instance in SWE-smith's fields only (absent optional fields as null)."""
    return {f: instance.get(f) for f in SWE_SMITH_FIELDS}


def forgeline_extra(instance: dict) -> str:
    """Canonical JSON of the instance's fields outside SWE_SMITH_FIELDS ("{}" when none)."""
    return canonical_json({k: v for k, v in instance.items() if k not in SWE_SMITH_FIELDS})


def hub_row(instance: dict) -> dict:
    """One row of the hub dataset: SWE-smith's fields + the `forgeline` column."""
    return {**swe_smith_record(instance), EXTRA_COLUMN: forgeline_extra(instance)}


def environments(split: dict[str, list[dict]], images: dict[str, dict], backend: str) -> dict:
    """{repo: {"image_id", "build_input_digest"} or None} for every repository of the split.

    With the docker backend every repository must have an image record (ConfigError naming the
    ones without); with the process backend tasks run on the host and a repository without a
    record maps to None.
    """
    repos = sorted({repo_key(inst["repo"]) for rows in split.values() for inst in rows})
    missing = [r for r in repos if r not in images]
    if missing and backend == "docker":
        raise ConfigError(f"export-dataset: no image record for {', '.join(missing)} (sandbox.backend "
                          f"docker: pass results/images/<repo>.json for every repository of the split)")
    return {r: ({"image_id": images[r]["image_id"],
                 "build_input_digest": images[r]["build_input_digest"]} if r in images else None)
            for r in repos}


def environment_digest(envs: dict, grading_command: str, backend: str) -> str:
    """sha256 hex of the environments the split's tasks are graded in (module docstring)."""
    return sha256_bytes(canonical_json({"scheme": ENVIRONMENT_SCHEME, "backend": backend,
                                        "grading_command": grading_command,
                                        "images": envs}).encode("utf-8"))


def experiment_digest(split_digest: str, env_digest: str) -> str:
    """sha256 hex over the split's semantic digest and its environment digest."""
    return sha256_bytes(canonical_json({"scheme": EXPERIMENT_SCHEME, "split": split_digest,
                                        "environment": env_digest}).encode("utf-8"))


def size_category(n: int) -> str:
    """The hub's size_categories bucket of n rows."""
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def card_metadata(section: dict, splits: Iterable[str], total: int) -> dict:
    """The card's YAML header: what the hub and `datasets.load_dataset` read."""
    return {
        "license": section["license"],
        "pretty_name": section["pretty_name"],
        "task_categories": list(section["task_categories"]),
        "tags": list(section["tags"]),
        "size_categories": [size_category(total)],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": s, "path": data_file(s)} for s in splits]}],
    }


def _table(header: list[str], rows: list[list]) -> list[str]:
    def cell(v):
        return str(v).replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]


def funnel_lines(funnel: dict, total: int) -> list[str]:
    """The rejection funnel of the card: the counts at each step, per repository, and the
    rejections by category (ingest) and by check (validation), from funnel.json."""
    t = funnel.get("totals", {})
    steps = [*([f"generated {t['candidates']} candidates"] if t.get("candidates") else []),
             f"ingested {t.get('ingested', '?')}", f"validated {t.get('validated', '?')}",
             f"in the pool repositories {t.get('pool', '?')}", f"after the difficulty filter and split {total}"]
    chain = " -> ".join(steps)
    lines = [chain[0].upper() + chain[1:] + "."]
    repos = funnel.get("repos") or {}
    if repos:
        lines += ["", *_table(["repository", "role", "candidates", "ingested", "rejected at ingest", "validated",
                               "rejected by validation"],
                              [[name, r.get("role", "-"), "-" if r.get("candidates") is None else r["candidates"],
                                r.get("ingested", 0), r.get("ingest_rejected", 0), r.get("validated", 0),
                                sum((r.get("validate_rejected") or {}).values())]
                               for name, r in sorted(repos.items())])]
    extra = funnel.get("extra_sources")
    if extra:
        lines += ["", f"External sources: {extra.get('records', 0)} records read, "
                      f"{extra.get('accepted', 0)} accepted, {extra.get('rejected', 0)} rejected, "
                      f"{extra.get('unattributed', 0)} of repositories not configured."]
    for key, title in (("ingest_rejected_by_category", "Rejected at ingest, by category"),
                       ("validate_rejected_by_check", "Rejected by validation, by check")):
        counts = funnel.get(key) or {}
        lines += ["", f"{title}:", ""]
        lines += _table(["reason", "tasks"], [[k, v] for k, v in counts.items()]) if counts else ["none"]
    return lines


def render_card(section: dict, info: dict, funnel: dict | None, files: dict[str, dict]) -> str:
    """The dataset card (README.md): YAML metadata, then what the dataset is and how it was made;
    `files` ({path in the folder: {bytes, sha256}}, the card aside) is its Files table, which
    `forgeline publish` checks the folder against."""
    import yaml

    split = info["split"]
    env = info["environment"]
    splits = list(split["counts"])
    total = sum(split["counts"].values())
    repos = sorted({r for rs in split["repos"].values() for r in rs})
    meta = yaml.safe_dump(card_metadata(section, splits, total), sort_keys=False,
                          allow_unicode=True, width=1000)
    lines = [f"---\n{meta}---", "", f"# {section['pretty_name']}", "",
             f"{total} SWE-smith-format task instances over {len(repos)} repositories, split "
             f"by repository into {', '.join(splits)} (a repository lands in exactly one split). "
             f"Made by forgeline: every task passed its validation checks (structure, patch, NOP "
             f"fails, Oracle passes, not flaky) in its environment and was kept by the difficulty "
             f"filter (pass@k of the base policy). The same tasks in SWE-smith's JSONL format are "
             f"exported beside this folder (`swe-smith/<split>.jsonl`).", "",
             "## Identity", "",
             *_table(["digest", "value", "covers"], [
                 ["experiment digest", f"`{info['experiment_digest']}`",
                  "the split digest and the environment digest (one name for this experiment's tasks)"],
                 [f"split digest ({split['scheme']})", f"`{split['digest']}`",
                  "every task's defining fields and its split"],
                 [f"environment digest ({ENVIRONMENT_SCHEME})", f"`{env['digest']}`",
                  f"each repository's image and the grading command (backend: {env['backend']})"],
                 ["grading command", f"`{env['grading_command']}`",
                  "sha256 of the exact pytest invocation forgeline grades with"]]),
             "", "A rebuilt or drifted image changes the environment digest and so the experiment "
             "digest, though no task changed. `experiment.json` holds every part and each data "
             "file's sha256.", "",
             "## Splits", "",
             *_table(["split", "tasks", "repositories"],
                     [[s, split["counts"][s], ", ".join(split["repos"][s]) or "-"] for s in splits]),
             "", "## Environments", ""]
    if any(env["images"].values()):
        lines += _table(["repository", "image_id", "build_input_digest"],
                        [[r, f"`{e['image_id']}`" if e else "-",
                          f"`{e['build_input_digest']}`" if e else "-"]
                         for r, e in env["images"].items()])
    else:
        lines.append(f"Backend `{env['backend']}`: the tasks were graded on the host, not in "
                     f"recorded images; the environment digest covers the backend and the grading "
                     f"command only.")
    lines += ["", "## How the tasks were filtered", ""]
    lines += funnel_lines(funnel, total) if funnel else ["No funnel was given to this export."]
    lines += ["", "## Fields", "",
              f"`{'`, `'.join(SWE_SMITH_FIELDS)}` as in SWE-smith: `patch` INTRODUCES the bug "
              f"(the fix is its reverse); `FAIL_TO_PASS` / `PASS_TO_PASS` are lists of pytest node "
              f"ids. `{EXTRA_COLUMN}` is a JSON string of forgeline's own fields (bug type, "
              f"mutation, validation record); the SWE-smith JSONL export leaves it out.", "",
              "## Load", "", "```python", "from datasets import load_dataset", "",
              "ds = load_dataset(\"<this folder or hub repo>\")  # splits: "
              + ", ".join(splits), "```", "",
              "## Recompute the digests", "",
              "The split digest: for each task, C = sha256 of canonical JSON (sorted keys, no "
              "whitespace, UTF-8) of its fields " + ", ".join(split["defining_fields"]) + "; one "
              "line `[split, instance_id, C]` per task in canonical JSON plus a newline, lines "
              "sorted, sha256 of the concatenation. The environment and experiment digests: see "
              "`experiment.json` (`schemes`).", "",
              "## Files", "",
              *_table(["file", "bytes", "sha256"], [[f"`{path}`", files[path]["bytes"], f"`{files[path]['sha256']}`"]
                                                    for path in sorted(files)]), ""]
    return "\n".join(lines)


def export_info(split: dict[str, list[dict]], envs: dict, backend: str, grading: str) -> dict:
    """The digests and what they cover (experiment.json without the data files' hashes)."""
    split_digest = frozen_split_digest(split)
    env_digest = environment_digest(envs, grading, backend)
    return {
        "format": EXPORT_FORMAT,
        "experiment_digest": experiment_digest(split_digest, env_digest),
        "split": {"digest": split_digest, "scheme": DIGEST_SCHEME,
                  "defining_fields": list(DEFINING_FIELDS),
                  "counts": {s: len(rows) for s, rows in split.items()},
                  "repos": {s: sorted({repo_key(i["repo"]) for i in rows}) for s, rows in split.items()}},
        "environment": {"digest": env_digest, "backend": backend, "grading_command": grading,
                        "images": envs},
        "schemes": {
            "experiment": f"{EXPERIMENT_SCHEME}: sha256(canonical_json({{scheme, split, environment}}))",
            "environment": f"{ENVIRONMENT_SCHEME}: sha256(canonical_json({{scheme, backend, "
                           f"grading_command, images: {{repo: {{image_id, build_input_digest}} | null}}}}))",
        },
    }


# -- the edge ------------------------------------------------------------------------------

def read_split(split_dir: Path) -> tuple[dict[str, list[dict]], list[Path]]:
    """({split: instances sorted by id}, files read); checks names and split.json's digest.

    Raises ConfigError naming the file and line of a record that is not a safe task instance.
    """
    summary_path = split_dir / SPLIT_JSON
    if not summary_path.is_file():
        raise ConfigError(f"{summary_path} not found: run `forgeline split` first")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    names = sorted(summary.get("counts") or summary.get("instances") or {},
                   key=lambda n: (SPLIT_ORDER.index(n) if n in SPLIT_ORDER else len(SPLIT_ORDER), n))
    bad = [n for n in names if not (isinstance(n, str) and _SPLIT_NAME.fullmatch(n))]
    if bad or not names:
        raise ConfigError(f"{summary_path}: split names {bad or names!r} are not plain lowercase "
                          f"names; the file was edited or is not a split.json")
    split: dict[str, list[dict]] = {}
    paths = [split_dir / f"{n}.jsonl" for n in names]
    for name, path in zip(names, paths):
        if not path.is_file():
            raise ConfigError(f"{split_dir}: split file {path.name} missing")
        try:  # normalize_instance: types, and ids / repos / paths safe to use as names
            split[name] = sorted(load_instances([path]), key=lambda i: i["instance_id"])
        except ValueError as exc:
            raise ConfigError(f"export-dataset refuses the split: {exc}. The split files were "
                              f"edited or written by an older forgeline; rerun `forgeline split`.") from None
    seen: dict[str, str] = {}
    for name, rows in split.items():
        for inst in rows:
            if inst["instance_id"] in seen:
                raise ConfigError(f"export-dataset: {inst['instance_id']} is in both {seen[inst['instance_id']]} "
                                  f"and {name}")
            seen[inst["instance_id"]] = name
    digest = frozen_split_digest(split)
    if summary.get("digest") != digest:
        raise ConfigError(f"{summary_path} states digest {summary.get('digest')}, but its <split>.jsonl "
                          f"files give {digest}: the split folder was edited or is half-written; "
                          f"rerun `forgeline split`")
    return split, [*paths, summary_path]


def read_images(paths: Iterable[str | Path]) -> dict[str, dict]:
    """{repo: image record} from `forgeline image` records (results/images/<repo>.json)."""
    out: dict[str, dict] = {}
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if not all(isinstance(record.get(k), str) for k in ("repo", "image_id", "build_input_digest")):
            raise ConfigError(f"{path}: not an image record (repo, image_id, build_input_digest)")
        if record["repo"] in out:
            raise ConfigError(f"{path}: a second image record for {record['repo']}")
        out[record["repo"]] = record
    return out


def _inside(root: Path, rel: str) -> Path:
    """root/rel, refused unless it stays inside root (no path from data escapes OUT)."""
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()) or path == root.resolve():
        raise ConfigError(f"export-dataset: {rel!r} would be written outside {root}")
    return root / rel


def write_parquet(path: Path, rows: list[dict]) -> Path:
    """The rows as one Parquet file with a fixed schema, written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    strings = pa.list_(pa.string())
    schema = pa.schema([(f, strings if f in ("FAIL_TO_PASS", "PASS_TO_PASS") else pa.string())
                        for f in (*SWE_SMITH_FIELDS, EXTRA_COLUMN)])
    table = pa.Table.from_pylist(rows, schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=10_000)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split-dir", required=True, type=Path,
                        help="the split: <split>.jsonl + split.json (`forgeline split`)")
    parser.add_argument("--images", nargs="*", default=[], metavar="JSON",
                        help="image records results/images/<repo>.json (docker backend)")
    parser.add_argument("--funnel", type=Path, help="results/tasks/funnel.json, for the card")
    parser.add_argument("--out-dir", required=True, type=Path,
                        help="writes swe-smith/<split>.jsonl and hf/ (the hub dataset folder)")
    parser.add_argument("--manifest", required=True, type=Path)


def run(cfg, args: argparse.Namespace) -> None:
    section = as_dict(cfg.tasks.export)
    backend = cfg.sandbox.backend
    manifest = Manifest(stage="export-dataset", params={"tasks.export": section,
                                                        "sandbox.backend": backend},
                        code=__name__)
    with manifest.timed("read"):
        split, inputs = read_split(args.split_dir)
        images = read_images(args.images)
        funnel = None
        if args.funnel is not None:
            funnel = json.loads(args.funnel.read_text(encoding="utf-8"))
        envs = environments(split, images, backend)
        info = export_info(split, envs, backend, command_digest())
    manifest.inputs = [*map(str, inputs), *map(str, args.images),
                       *([str(args.funnel)] if args.funnel else [])]
    out = args.out_dir
    # every name below comes from split.json and was checked in read_split; _inside re-checks
    jsonl = {s: _inside(out, f"{JSONL_DIR}/{s}.jsonl") for s in split}
    hf = _inside(out, HF_DIR)
    for s in split:
        _inside(hf, data_file(s))
    with manifest.timed("write"):
        with atomic_dir(hf, owned=(CARD, EXPERIMENT_JSON)) as tmp:
            files = {}
            for s, rows in split.items():
                files[data_file(s)] = sha256_file(write_parquet(tmp / data_file(s),
                                                                [hub_row(i) for i in rows]))
            info["files"] = files
            write_json(tmp / EXPERIMENT_JSON, info)
            listed = {rel: {"bytes": (tmp / rel).stat().st_size, "sha256": sha256_file(tmp / rel)}
                      for rel in [*files, EXPERIMENT_JSON]}
            write_text(tmp / CARD, render_card(section, info, funnel, listed))
        outputs = [write_jsonl(jsonl[s], (swe_smith_record(i) for i in rows))
                   for s, rows in split.items()]
    outputs.append(hf)
    manifest.notes = {"experiment_digest": info["experiment_digest"],
                      "split_digest": info["split"]["digest"],
                      "environment_digest": info["environment"]["digest"],
                      "counts": info["split"]["counts"]}
    manifest.write(args.manifest, outputs=outputs)
    log.info("export-dataset: %s in %s; experiment digest %s (split %s, environment %s)",
             ", ".join(f"{s} {n}" for s, n in info["split"]["counts"].items()), out,
             info["experiment_digest"], info["split"]["digest"][:12],
             info["environment"]["digest"][:12])


__all__ = ["SWE_SMITH_FIELDS", "environment_digest", "environments", "experiment_digest",
           "export_info", "hub_row", "render_card", "swe_smith_record"]
