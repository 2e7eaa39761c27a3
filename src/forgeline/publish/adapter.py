"""Stage `publish-adapter`: the PPO adapter as a hub-ready model repository.

    forgeline publish-adapter --adapter results/adapter [--base results/policy/sft]
        --split-dir results/split --tables results/eval/tables/tables.json
        --out results/publish/adapter --manifest results/publish/adapter.manifest.json

OUT (built beside itself and swapped in whole; the manifest is written beside it, last, so that
every file in OUT is one its card lists):

    adapter_config.json         PEFT's config; base_model_name_or_path: the hub id with `revision`
                                its pinned commit (as the adapter records it, byte for byte), or,
                                for a local base, the absolute path of OUT/base
    adapter_model.safetensors   byte for byte the adapter's
    checkpoint-summary.json     byte for byte the adapter's
    base/                       a local base only (the tiny policy, on no hub): its model and
                                tokenizer files (BASE_FILES), byte for byte
    README.md                   the model card (`forgeline.publish.card.adapter_card`)

What is checked before anything is written, each failure naming the file: the weights and
summary agree (sha256, tensor count and bytes recounted); the adapter's manifest (stage ppo)
lists the base folder with the tree sha256 it has now (a local base) and one split file with the
sha256 it has now (the training data); the split folder's files give split.json's digest; the
tables hold the evaluated policy whose path is --adapter (evaluation.policies) against the base
on every panel. Config read: `publish.card` (license, tags) and `evaluation` (policies, panels).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from forgeline.config import ConfigError, as_dict
from forgeline.provenance import MANIFEST_NAME, Manifest, atomic_dir, sha256_file, tree_digest, write_text
from forgeline.publish.card import CARD, adapter_card
from forgeline.tasks.export import read_split
from forgeline.tasks.split import DIGEST_SCHEME, frozen_split_digest
from forgeline.train.ppo_checkpoints import SUMMARY, checkpoint_summary

log = logging.getLogger(__name__)

STAGE = "publish-adapter"
PPO_STAGE = "train.ppo"  # forgeline.train.ppo.STAGE, what its manifests say (a test holds them equal)
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
BASE_DIR = "base"
# the files of a model folder that loading it needs (not its manifest, curves or plots)
BASE_FILES = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
              "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
              "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model")


# -- reading the run's artifacts -----------------------------------------------------------------

def _same(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"{path} not found: build the run's artifacts first (snakemake)")
    return json.loads(path.read_text(encoding="utf-8"))


def recorded_input(manifest: Mapping[str, Any], where: Path, path: str | os.PathLike) -> dict:
    """The manifest's record of input `path`, or ConfigError."""
    for record in manifest.get("inputs", []):
        if _same(record["path"], path):
            return record
    raise ConfigError(f"{where}: the adapter's manifest does not list {path} among its inputs "
                      f"({', '.join(r['path'] for r in manifest.get('inputs', []))})")


def adapter_facts(adapter: Path) -> tuple[dict, dict, dict]:
    """(adapter_config.json, checkpoint-summary.json, manifest) of a ppo adapter folder, checked:
    the manifest is the ppo stage's and the weights' sha256 is the summary's."""
    config, summary = read_json(adapter / CONFIG), read_json(adapter / SUMMARY)
    manifest = read_json(adapter / MANIFEST_NAME)
    if manifest.get("stage") != PPO_STAGE:
        raise ConfigError(f"{adapter / MANIFEST_NAME}: stage {manifest.get('stage')!r}, not {PPO_STAGE}")
    weights = summary["files"].get(WEIGHTS, {}).get("sha256")
    if weights != sha256_file(adapter / WEIGHTS):
        raise ConfigError(f"{adapter / WEIGHTS}: sha256 differs from {adapter / SUMMARY} ({weights}): "
                          f"the folder was edited; rerun the ppo rule")
    return config, summary, manifest


def base_parameters(folder: Path) -> int:
    """Parameters of a model folder: the elements of every tensor in its *.safetensors files."""
    from safetensors import safe_open

    n = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                count = 1
                for dim in f.get_slice(key).get_shape():
                    count *= dim
                n += count
    return n


def base_files(folder: Path) -> list[Path]:
    """The files of `folder` that loading the model needs (BASE_FILES), sorted."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and any(fnmatch.fnmatchcase(p.name, pat) for pat in BASE_FILES))


def trained_split(split_dir: Path, split: Mapping[str, list], manifest: Mapping[str, Any],
                  where: Path) -> str:
    """The split the adapter trained on: the one whose file's sha256 the manifest records."""
    recorded = {r["sha256"] for r in manifest.get("inputs", []) if r.get("kind") != "dir"}
    found = [name for name in split if sha256_file(split_dir / f"{name}.jsonl") in recorded]
    if len(found) != 1:
        raise ConfigError(f"{where}: the adapter's manifest records {len(found)} of the files in {split_dir} "
                          f"({', '.join(found) or 'none'}) as its training data; expected one (was the split "
                          f"rebuilt after PPO ran?)")
    return found[0]


def evaluation_facts(tables: Mapping[str, Any], ev, adapter: Path, trained: list[str],
                     where: Path) -> dict[str, Any]:
    """The paired evaluation of the policy whose path is `adapter`, from tables.json.

    `ev`: the evaluation config section; `trained`: the paths of the adapter's training data
    (a panel reading one of them is marked trained_on)."""
    # a policy with a `step` is one of the run's checkpoints, not the adapter published
    names = [n for n, p in sorted(ev.policies.items()) if _same(p.path, adapter) and p.step is None]
    if len(names) != 1:
        raise ConfigError(f"evaluation.policies: {len(names)} policies have path {adapter} and no step "
                          f"({', '.join(names) or 'none'}); expected one")
    policy = names[0]
    panels: dict[str, dict] = {}
    for panel, t in tables.items():
        key = f"{policy}_vs_{t['base']}"  # tables.comparison_key
        if key not in t.get("comparisons", {}):
            raise ConfigError(f"{where}: panel {panel} has no comparison of {policy} with {t['base']}")
        panels[panel] = {"pairs": t["pairs"], "rows": {n: t["policies"][n] for n in (t["base"], policy)},
                         "comparison": t["comparisons"][key],
                         "trained_on": any(_same(f, x) for f in ev.panels.get(panel, []) for x in trained)}
    if not panels:
        raise ConfigError(f"{where}: no panel")
    bases = {t["base"] for t in tables.values()}
    return {"policy": policy, "base": bases.pop() if len(bases) == 1 else ", ".join(sorted(bases)),
            "panels": panels}


def folder_files(folder: Path) -> dict[str, dict[str, Any]]:
    """{relative POSIX path: {bytes, sha256}} of every file below `folder`, the card aside."""
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() != CARD}


# -- the stage -----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapter", required=True, type=Path, help="the ppo stage's folder (results/adapter)")
    parser.add_argument("--base", type=Path,
                        help="the local base it trained from, bundled into OUT/base (not for a hub base)")
    parser.add_argument("--split-dir", required=True, type=Path, help="the split: <split>.jsonl + split.json")
    parser.add_argument("--tables", required=True, type=Path, help="tables.json of the tables stage")
    parser.add_argument("--out", required=True, type=Path, help="the folder to publish (results/publish/adapter)")
    parser.add_argument("--manifest", required=True, type=Path, help="written beside OUT, not in it")


def run(cfg, args: argparse.Namespace) -> None:
    adapter, out = args.adapter, args.out
    config, summary, ppo_manifest = adapter_facts(adapter)
    where = adapter / MANIFEST_NAME
    hub_base = bool(config.get("revision"))
    if hub_base and args.base:
        raise ConfigError(f"{adapter / CONFIG} names a hub base ({config['base_model_name_or_path']}); "
                          f"--base is for a local one")
    if not hub_base and not args.base:
        raise ConfigError(f"{adapter / CONFIG} names a local base: pass it with --base (it is bundled)")
    split, split_inputs = read_split(args.split_dir)
    trained = trained_split(args.split_dir, split, ppo_manifest, where)
    trained_path = args.split_dir / f"{trained}.jsonl"
    trained_sha = sha256_file(trained_path)
    evaluation = evaluation_facts(read_json(args.tables), cfg.evaluation, adapter,
                                  [str(trained_path), *(r["path"] for r in ppo_manifest["inputs"]
                                                        if r.get("sha256") == trained_sha)], args.tables)
    if hub_base:
        base = {"kind": "hub", "repo_id": config["base_model_name_or_path"], "revision": config["revision"]}
    else:
        recorded, now = recorded_input(ppo_manifest, where, args.base), tree_digest(args.base)
        if recorded.get("sha256") != now:
            raise ConfigError(f"{args.base}: tree sha256 {now} is not the one the adapter trained from "
                              f"({recorded.get('sha256')}, {where}); rerun ppo or pass that base")
        base = {"kind": "bundled", "dir": BASE_DIR, "source": str(args.base), "tree_sha256": recorded["sha256"],
                "parameters": base_parameters(args.base)}
    notes = ppo_manifest.get("notes", {})
    facts: dict[str, Any] = {
        "base": base,
        "training": {"algorithm": "PPO", "split": trained, "tasks": len(split[trained]),
                     "repos": sorted({i["repo"] for i in split[trained]}),
                     "episodes": notes.get("episodes"), "kept": notes.get("kept"),
                     "split_digest": frozen_split_digest(split), "digest_scheme": DIGEST_SCHEME,
                     "counts": {name: len(rows) for name, rows in split.items()},
                     "split_sha256": trained_sha},
        "evaluation": evaluation,
        "code": {k: ppo_manifest["code"].get(k) for k in ("forgeline", "commit", "dirty")},
    }
    section = cfg.publish.card
    manifest = Manifest(stage=STAGE, params={"publish.card": as_dict(section),
                                             "evaluation": {"policies": as_dict(cfg.evaluation.policies),
                                                            "panels": as_dict(cfg.evaluation.panels)}},
                        inputs=[str(adapter), *map(str, split_inputs), str(args.tables),
                                *([str(args.base)] if args.base else [])], code=__name__)
    with atomic_dir(out, owned=(CARD, CONFIG)) as tmp:
        for name in (WEIGHTS, SUMMARY):
            shutil.copyfile(adapter / name, tmp / name)
        if hub_base:
            shutil.copyfile(adapter / CONFIG, tmp / CONFIG)
        else:
            (tmp / BASE_DIR).mkdir()
            for path in base_files(args.base):
                shutil.copyfile(path, tmp / BASE_DIR / path.name)
            # PEFT resolves the base against the CURRENT directory: an absolute path to OUT/base
            # loads from anywhere in this checkout (docs/ppo.md, "Loading the adapter")
            config = {**config, "base_model_name_or_path": str(Path(os.path.abspath(out)) / BASE_DIR)}
            (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        counted = checkpoint_summary(tmp, summary["step"])
        if (counted["tensors"], counted["tensor_bytes"]) != (summary["tensors"], summary["tensor_bytes"]):
            raise ConfigError(f"{adapter / SUMMARY}: {summary['tensors']} tensors / {summary['tensor_bytes']} "
                              f"bytes, the weights hold {counted['tensors']} / {counted['tensor_bytes']}")
        facts["adapter"] = {"r": config["r"], "alpha": config["lora_alpha"], "dropout": config["lora_dropout"],
                            "target_modules": list(config["target_modules"]), "tensors": summary["tensors"],
                            "tensor_bytes": summary["tensor_bytes"], "steps": summary["step"],
                            "weights_bytes": (tmp / WEIGHTS).stat().st_size}
        facts["files"] = folder_files(tmp)
        write_text(tmp / CARD, adapter_card(facts, section.license, list(section.tags)))
    manifest.notes = {"policy": evaluation["policy"], "base": {k: v for k, v in base.items() if k != "parameters"},
                      "split_digest": facts["training"]["split_digest"],
                      "verdicts": {p: v["comparison"]["verdict"] for p, v in evaluation["panels"].items()}}
    manifest.write(args.manifest, outputs=[out])
    for panel, v in evaluation["panels"].items():
        log.info("publish-adapter: panel %s: %s", panel, v["comparison"]["verdict"])
    log.info("publish-adapter: %s (%d files, base %s)", out, len(facts["files"]),
             base.get("repo_id") or f"bundled from {args.base}")
