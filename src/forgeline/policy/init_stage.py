"""Stage `policy-init`: the tiny base policy before any agent data.

Trains the byte-level BPE tokenizer (Qwen3 special tokens and chat format) on the SFT
repositories' sources and a sample of Python's standard library, initialises a tiny
Qwen3ForCausalLM from a seed derived from the root seed, pre-trains it to copy from its context
(`policy.init.copy`, see `copy_pretrain`; 0 steps = none), and writes one Hugging Face folder
(config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
chat_template.jinja, and with copy pre-training copy_curve.json/.png) that
AutoModelForCausalLM / AutoTokenizer.from_pretrained load, and that vLLM serves. Same params
and inputs => byte-identical files.

The workflow runs it as three jobs: `tokenizer` (`--tokenizer-only`) trains and writes the
tokenizer alone, in seconds, so the SFT repositories' oracle, which needs nothing else, does
not wait for the repeat phase; `policy_init` (`--tokenizer DIR --phases repeat`) initialises the
model and runs the repeat phase on one core beside the task front, and writes the folder plus
`copy_state.pt` (AdamW, the batches' RNG, the curve so far); `copy_pretrain` goes on from it
(`--resume`) with the recall and match phases on both cores. They give the weights one job of
all three phases gives, byte for byte (tested).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import platform
from pathlib import Path

from forgeline.policy import copy_pretrain
from forgeline.policy.model import (LORA_TARGET_MODULES, describe, init_tiny_qwen3,
                                    lora_target_names, parameter_count, tiny_qwen3_config)
from forgeline.policy.tokenizer import (build_tokenizer, check_special_tokens, collect_corpus,
                                        corpus_digest, portable_tokenizer_config, stdlib_dir)
from forgeline.config import as_dict
from forgeline.provenance import MANIFEST_NAME, Manifest, atomic_dir, sha256_file, write_json
from forgeline.seeds import stage_seed

log = logging.getLogger(__name__)
STAGE = "policy.init"
STATE_NAME = "copy_state.pt"  # what --resume needs besides the HF folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the model folder to write")
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the job's cores)")
    parser.add_argument("--phases", nargs="+", choices=copy_pretrain.PHASES, default=list(copy_pretrain.PHASES),
                        help="the copy pre-training phases this job runs, in order (default: all); with "
                             f"phases left after them the folder also gets {STATE_NAME}")
    parser.add_argument("--resume", metavar="DIR",
                        help="go on from the folder an earlier policy-init wrote with --phases: its "
                             f"tokenizer, model and {STATE_NAME}")
    parser.add_argument("--tokenizer-only", action="store_true",
                        help="train the tokenizer and write only it (its folder and manifest)")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="the tokenizer a --tokenizer-only run wrote (default: train it here)")


def train_tokenizer(corpus, tok_params: dict):
    """The byte-level BPE tokenizer trained on `corpus`. tok_params: vocab_size, min_frequency,
    model_max_length, split (optional: qwen)."""
    return build_tokenizer(corpus, vocab_size=int(tok_params["vocab_size"]),
                           min_frequency=int(tok_params["min_frequency"]),
                           model_max_length=int(tok_params["model_max_length"]),
                           split=str(tok_params.get("split", "qwen")))


def init_model(tokenizer, model_params: dict, seed: int):
    """A new tiny Qwen3ForCausalLM over `tokenizer`'s ids. model_params: the keyword arguments
    of `tiny_qwen3_config` except vocab_size and token ids, plus `embedding_std` (optional; see
    `init_tiny_qwen3`)."""
    model_params = dict(model_params)
    embedding_std = model_params.pop("embedding_std", None)
    config = tiny_qwen3_config(
        vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **model_params)
    model = init_tiny_qwen3(config, seed, embedding_std)
    # like Qwen3's generation_config.json: a turn ends at <|im_end|> or <|endoftext|>
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def run(cfg, args: argparse.Namespace) -> None:
    out = Path(args.out)
    manifest_path = Path(args.manifest) if args.manifest else out / MANIFEST_NAME
    if args.tokenizer_only:
        return _write_tokenizer(cfg, out, manifest_path)
    import torch

    section = cfg.policy.init
    seed = stage_seed(cfg.seed, STAGE)
    torch.set_num_threads(max(1, args.threads))
    phases = tuple(args.phases)
    if args.resume:
        manifest, tokenizer, model, state, corpus_notes = _resumed(Path(args.resume), section, seed)
    else:
        manifest, tokenizer, model, corpus_notes = _built(cfg, seed, args.tokenizer)
        state = None
    special_ids = check_special_tokens(tokenizer)
    counts = parameter_count(model)
    log.info("model: %s parameters (%s non-embedding)", f"{counts['total']:,}",
             f"{counts['non_embedding']:,}")
    with manifest.timed("copy_pretrain"):
        torch.use_deterministic_algorithms(True)
        ids = [i for i in range(len(tokenizer)) if i not in set(tokenizer.all_special_ids)]
        curve, state = copy_pretrain.pretrain(model, ids, tokenizer.pad_token_id, section.copy, seed,
                                              phases=phases, state=state)
    if curve:
        log.info("copy pre-training (%s): %d steps, loss %.3f (chance %.2f), copy accuracy %.1f%%",
                 ", ".join(phases), curve[-1]["step"], curve[-1]["loss"], math.log(len(ids)),
                 100 * curve[-1]["copy_accuracy"])
    later = copy_pretrain.PHASES[copy_pretrain.PHASES.index(phases[-1]) + 1:]
    if later:  # a folder the next job goes on from: its manifest names only the params that made it
        manifest.params = {**_shaping(manifest.params), "threads": manifest.params.get("threads")}

    with atomic_dir(out, owned=(MANIFEST_NAME, "config.json")) as tmp:
        with manifest.timed("save"):
            tokenizer.save_pretrained(tmp)
            model.save_pretrained(tmp)
            portable_tokenizer_config(tmp / "tokenizer_config.json")
            if curve:
                write_json(tmp / "copy_curve.json", curve)
                copy_pretrain.plot_curve(curve, tmp / "copy_curve.png", math.log(len(ids)))
            if later:
                torch.save(state, tmp / STATE_NAME)
    outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    manifest.notes = {
        "parameters": counts,
        "architecture": describe(model.config),
        "lora_target_modules": list(LORA_TARGET_MODULES),
        "lora_target_count": len(lora_target_names(model)),
        "special_token_ids": special_ids,
        "vocab_size": len(tokenizer),
        "corpus": corpus_notes,
        "tokenizer_json_sha256": sha256_file(out / "tokenizer.json"),
        "model_safetensors_sha256": sha256_file(out / "model.safetensors"),
        "copy_phases": list(phases),
        "copy_phases_left": list(later),
        "copy_pretraining": ({"steps": curve[-1]["step"], "phase": curve[-1]["phase"], "loss": curve[-1]["loss"],
                              "chance_loss": round(math.log(len(ids)), 4),
                              "copy_accuracy": curve[-1]["copy_accuracy"]} if curve else None),
    }
    manifest.write(manifest_path, outputs=outputs)
    log.info("wrote %s (%d files) and %s", out, len(outputs), manifest_path)


def _corpus(cfg, manifest: Manifest):
    """(the tokenizer's training corpus, its notes for the manifest)."""
    tok_params = as_dict(cfg.policy.init.tokenizer)
    corpus_repos = sorted(cfg.repos.sft)
    repo_dirs = [Path(cfg.repos.root) / name for name in corpus_repos]
    missing = [str(d) for d in repo_dirs if not d.is_dir()]
    if missing:
        raise FileNotFoundError(f"corpus repositories not found: {missing}")
    manifest.inputs = [str(d) for d in repo_dirs]
    with manifest.timed("corpus"):
        corpus = collect_corpus(repo_dirs, stdlib_dir(),
                                stdlib_max_bytes=int(tok_params["stdlib_max_bytes"]),
                                max_file_bytes=int(tok_params["max_file_bytes"]))
    log.info("tokenizer corpus: %d files, %d characters", len(corpus), sum(len(f.text) for f in corpus))
    notes = {"repos": corpus_repos, "files": len(corpus), "characters": sum(len(f.text) for f in corpus),
             "stdlib_python": platform.python_version(), "digest": corpus_digest(corpus)}
    return corpus, notes


def _tok_params(section) -> dict:
    tok_params = as_dict(section.tokenizer)
    return {k: tok_params[k] for k in ("vocab_size", "min_frequency", "model_max_length", "split") if k in tok_params}


def _write_tokenizer(cfg, out: Path, manifest_path: Path) -> None:
    """`--tokenizer-only`: the trained tokenizer's folder (what AutoTokenizer loads) and manifest."""
    section = cfg.policy.init
    manifest = Manifest(stage=STAGE, params={"tokenizer": as_dict(section.tokenizer)}, code=__name__)
    corpus, notes = _corpus(cfg, manifest)
    with manifest.timed("build"):
        tokenizer = train_tokenizer(corpus, _tok_params(section))
    check_special_tokens(tokenizer)
    with atomic_dir(out, owned=(MANIFEST_NAME,)) as tmp:
        tokenizer.save_pretrained(tmp)
        portable_tokenizer_config(tmp / "tokenizer_config.json")
    outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    manifest.notes = {"vocab_size": len(tokenizer), "corpus": notes,
                      "tokenizer_json_sha256": sha256_file(out / "tokenizer.json")}
    manifest.write(manifest_path, outputs=outputs)
    log.info("wrote %s (%d files): the tokenizer, %d ids", out, len(outputs), len(tokenizer))


def _built(cfg, seed: int, tokenizer_dir: str | None = None):
    """(manifest, tokenizer, model, corpus notes) of a new model, and of a new tokenizer unless
    `tokenizer_dir` holds one (`--tokenizer-only`'s folder, made with these tokenizer params)."""
    from transformers import AutoTokenizer

    section = cfg.policy.init
    manifest = Manifest(stage=STAGE, params=as_dict(section), seeds={"model_init": seed}, code=__name__)
    if tokenizer_dir is None:
        corpus, notes = _corpus(cfg, manifest)
        with manifest.timed("build"):
            tokenizer = train_tokenizer(corpus, _tok_params(section))
    else:
        folder = Path(tokenizer_dir)
        if not (folder / MANIFEST_NAME).is_file() or not (folder / "tokenizer.json").is_file():
            raise SystemExit(f"policy-init --tokenizer {folder}: no tokenizer.json and {MANIFEST_NAME} "
                             "there; it must be the folder of a policy-init --tokenizer-only run")
        earlier = json.loads((folder / MANIFEST_NAME).read_text())
        if (earlier.get("params") or {}).get("tokenizer") != as_dict(section.tokenizer):
            raise SystemExit(f"policy-init --tokenizer {folder}: {folder / MANIFEST_NAME} says it was "
                             "trained with other policy.init.tokenizer params; rebuild it with this config first")
        manifest.inputs = [str(folder)]
        tokenizer = AutoTokenizer.from_pretrained(folder)
        notes = earlier["notes"]["corpus"]
    with manifest.timed("build"):
        model = init_model(tokenizer, as_dict(section.model), seed)
    return manifest, tokenizer, model, notes


def _resumed(folder: Path, section, seed: int):
    """(manifest, tokenizer, model, copy state, corpus notes) of a folder an earlier policy-init
    wrote with phases left, checked before any work."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = [n for n in (STATE_NAME, MANIFEST_NAME, "model.safetensors") if not (folder / n).is_file()]
    if missing:
        raise SystemExit(f"policy-init --resume {folder}: no {', '.join(missing)} there; it must be the "
                         "folder of a policy-init run with --phases that left phases to run")
    earlier = json.loads((folder / MANIFEST_NAME).read_text())
    if _shaping(earlier.get("params") or {}) != _shaping(as_dict(section)) \
            or (earlier.get("seeds") or {}).get("model_init") != seed:
        raise SystemExit(f"policy-init --resume {folder}: {folder / MANIFEST_NAME} says it was made with "
                         "another seed or other policy.init params (tokenizer, model, copy.repeat or the "
                         "optimizer's); rebuild it with this config first")
    manifest = Manifest(stage=STAGE, params=as_dict(section), seeds={"model_init": seed},
                        inputs=[str(folder)], code=__name__)
    with manifest.timed("load"):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        state = torch.load(folder / STATE_NAME, weights_only=True)
    return manifest, tokenizer, model, state, earlier["notes"]["corpus"]


def _shaping(params: dict) -> dict:
    """The policy.init params that shape a folder `--resume` goes on from: the tokenizer, the
    model, the repeat phase and the optimizer (not the later phases or the thread counts)."""
    copy = {k: v for k, v in (params.get("copy") or {}).items() if k not in ("recall", "match", "threads")}
    return {"tokenizer": params.get("tokenizer"), "model": params.get("model"), "copy": copy}
