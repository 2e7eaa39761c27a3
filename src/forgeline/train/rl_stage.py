"""What the PPO and GRPO stages share around their update: where the policy generates, the step
loop with resume, checkpoints and the adapter series, warm start from a parent checkpoint, and
the artifact both write.

- The series. At every checkpoint step (`checkpoint_every`, and the last step) the adapter is
  also exported, in PEFT's format, to `<checkpoints>/series/step-NNNNNN/` (never pruned: it is
  not resume state), with `checkpoint-summary.json` and whatever the stage adds (PPO: its critic
  in `critic/`). The artifact carries them as `checkpoints/step-NNNNNN/` and lists them in
  `checkpoints.json`: a policy of the evaluation can be any of them (evaluation.policies.*.step).
- Warm start (resume is not warm start). A run started from a parent checkpoint (`--parent`, a
  series folder of another run) takes the parent's adapter weights (PPO: and its critic), a
  FRESH optimizer, and counts its steps from the parent's: the child of step 8 runs steps 9, 10,
  ..., so its tasks and episode seeds are those the parent run drew (or would have drawn) at
  those steps. Its resume state is its own (the parent's digest is in the fingerprint).
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm import tqdm

from forgeline.policy.engine import HFEngine, OpenAIEngine
from forgeline.policy.serve import load_lora_adapter
from forgeline.provenance import MANIFEST_NAME, atomic_dir, canonical_json, write_json
from forgeline.train.distributed import barrier
from forgeline.train.ppo_checkpoints import (SUMMARY, checkpoint_summary, resume, save_adapter,
                                             save_checkpoint)
from forgeline.params import checkpoint_steps
from forgeline.train.series import SERIES, SERIES_INDEX, STEP_DIR, TRAIN_LOG, series_dir

log = logging.getLogger(__name__)

# what a series entry's row in checkpoints.json takes from the train log line of its step
SERIES_KEYS = ("success_rate", "reward_mean", "kl", "clip_frac")


# -- warm start -------------------------------------------------------------------------------

def add_warm_start_arguments(parser) -> None:
    parser.add_argument("--parent", help="warm start from this checkpoint of another run (a series folder, "
                        f"e.g. results/adapter/{SERIES}/{series_dir(8)}): its adapter, a fresh optimizer, "
                        "steps counted from its step")
    parser.add_argument("--steps", type=int, default=0,
                        help="steps to run (after the parent's, with --parent; default: the config's steps)")


def parent_step(parent: str | Path) -> int:
    """The step a series folder (or a final adapter folder) was written at (its summary)."""
    path = Path(parent) / SUMMARY
    if not path.is_file():
        raise SystemExit(f"{parent}: not a checkpoint of a PPO/GRPO run (no {SUMMARY}); a parent is "
                         f"a folder like results/adapter/{SERIES}/{series_dir(8)}")
    return int(json.loads(path.read_text(encoding="utf-8"))["step"])


def load_parent_adapter(actor, parent: str | Path) -> int:
    """Copy the parent's LoRA weights into `actor` (built with the same adapter config);
    returns the parent's step. A parent of another rank, alpha or target modules stops the run,
    naming both."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    parent = Path(parent)
    step = parent_step(parent)
    theirs = json.loads((parent / "adapter_config.json").read_text(encoding="utf-8"))
    mine = actor.peft_config["default"]
    want = {"r": mine.r, "lora_alpha": mine.lora_alpha, "target_modules": sorted(mine.target_modules)}
    have = {"r": theirs.get("r"), "lora_alpha": theirs.get("lora_alpha"),
            "target_modules": sorted(theirs.get("target_modules") or [])}
    if want != have:
        raise SystemExit(f"{parent}/adapter_config.json: the parent's adapter {have} is not the one this run "
                         f"builds {want}: set the run's lora section to the parent's")
    result = set_peft_model_state_dict(actor, load_file(str(parent / "adapter_model.safetensors")))
    if result.unexpected_keys:
        raise SystemExit(f"{parent}/adapter_model.safetensors: tensors this model has no place for: "
                         f"{sorted(result.unexpected_keys)[:5]}")
    return step


# -- the loop ---------------------------------------------------------------------------------

def open_engine(actor, tokenizer, base_url: str | None, served_model: str | None):
    """Generate in process (the actor itself), or with the vLLM server at `base_url`."""
    if not base_url:
        return HFEngine(actor, tokenizer)
    if not served_model:
        raise SystemExit("--base-url needs --served-model")
    return OpenAIEngine(base_url, served_model, tokenizer=tokenizer)


def train_steps(name: str, trainer, tokenizer, ckpt_root: Path, fingerprint: str, first: int, last: int,
                every: int, keep: int, base_ref: Mapping[str, Any], run_step: Callable[[int, Any], dict],
                postfix: Sequence[str], base_url: str | None = None, served_model: str | None = None,
                policy_name: str = "policy", save_extra: Callable[[Path], None] | None = None,
                stop_after: int = 0) -> tuple[list[dict], int] | None:
    """Run steps first+1..last (or from the newest checkpoint of `fingerprint` under
    `ckpt_root`), `run_step(step, engine)` returning each train-log line; after each checkpoint
    step the series entry, then the resume state. Returns (the train log, the step it resumed
    from: 0 = none), or None when `stop_after` stopped it (as an interruption would: nothing
    exported)."""
    rank, world = trainer.rank, trainer.world
    actor = trainer.actor
    rows, resumed, latest = resume(ckpt_root, fingerprint, trainer)
    if latest is not None and rank == 0:
        log.info("resuming from %s (step %d)", latest, resumed)
    start = max(resumed, first)
    engine = open_engine(actor, tokenizer, base_url, served_model)
    served: str | None = None
    stops = set(checkpoint_steps(first, last, every))
    bar = tqdm(range(start + 1, last + 1), desc=name, unit="step", disable=rank != 0, initial=start - first,
               total=last - first)
    for step in bar:
        if base_url:  # the current adapter into the vLLM server, before generating
            live = ckpt_root / "live" / series_dir(step)
            if rank == 0:
                save_adapter(actor, live)
                load_lora_adapter(engine, f"{policy_name}-{name}-{step}", live, served)
            barrier(world)
            served = engine.model = f"{policy_name}-{name}-{step}"
        row = run_step(step, engine)
        rows.append(row)
        bar.set_postfix({k: row.get(k) for k in postfix})
        if step in stops:
            if rank == 0:
                save_series(ckpt_root / "series" / series_dir(step), actor, step, base_ref, save_extra)
                save_checkpoint(ckpt_root, step, trainer, rows, fingerprint, keep)
            barrier(world)
        if stop_after and step >= stop_after:
            log.info("stopping after step %d (--stop-after): no outputs written", step)
            return None
    return rows, resumed


def save_series(folder: Path, actor, step: int, base_ref: Mapping[str, Any],
                save_extra: Callable[[Path], None] | None) -> None:
    with atomic_dir(folder, owned=(SUMMARY,)) as tmp:
        save_adapter(actor, tmp, base_ref)
        if save_extra is not None:
            save_extra(tmp)
        write_json(tmp / SUMMARY, checkpoint_summary(tmp, step))


def series_index(rows: Sequence[Mapping[str, Any]], steps: Sequence[int]) -> list[dict[str, Any]]:
    """checkpoints.json: per series entry its folder and the train-log numbers of its step."""
    by_step = {r["step"]: r for r in rows}
    return [{"step": s, "path": f"{SERIES}/{series_dir(s)}",
             **{k: by_step.get(s, {}).get(k) for k in SERIES_KEYS}} for s in steps]


def export(out: Path, actor, rows: Sequence[Mapping[str, Any]], ckpt_root: Path, first: int, last: int,
           base_ref: Mapping[str, Any], plot: Callable[[Sequence[Mapping[str, Any]], Path], Any]) -> list[Path]:
    """The artifact, atomically: the final adapter, train_log.jsonl, the plots, its summary,
    and the series of this run (steps first+1..last); returns what the manifest lists."""
    series = ckpt_root / "series"
    found = (int(m.group(1)) for p in (series.iterdir() if series.is_dir() else ()) if (m := STEP_DIR.match(p.name)))
    # a longer earlier run of the same fingerprint may have left later entries
    steps = sorted(s for s in found if first < s <= last)
    with atomic_dir(out, owned=(MANIFEST_NAME, "adapter_config.json")) as tmp:
        save_adapter(actor, tmp, base_ref)
        (tmp / TRAIN_LOG).write_text("".join(canonical_json(r) + "\n" for r in rows), encoding="utf-8")
        plot(rows, tmp)
        write_json(tmp / SUMMARY, checkpoint_summary(tmp, last))
        for s in steps:
            shutil.copytree(series / series_dir(s), tmp / SERIES / series_dir(s))
        write_json(tmp / SERIES_INDEX, series_index(rows, steps))
    return sorted(p for p in out.iterdir() if p.name != MANIFEST_NAME)


def run_notes(rows: Sequence[Mapping[str, Any]], first: int, last: int, resumed: int | None,
              parent: str | None, gates: Sequence[str], last_keys: Sequence[str], **extra: Any) -> dict[str, Any]:
    """The manifest notes PPO and GRPO share: the steps (and the parent they count from),
    episode and drop totals, the last step's `last_keys`; `extra` adds the stage's own."""
    tail = rows[-1] if rows else {}
    return {"steps": last - first, "last_step": last, "resumed_from": resumed,
            "parent": {"path": parent, "step": first} if parent else None,
            "episodes": sum(r["episodes"] for r in rows), "kept": sum(r["kept"] for r in rows),
            "drops": {g: sum(r["drops"][g] for r in rows) for g in gates},
            "last": {k: tail.get(k) for k in last_keys}, **extra}
