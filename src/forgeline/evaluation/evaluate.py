"""Stage `evaluate`: one policy on one panel, under the shared protocol, resumable.

The protocol every policy gets (what makes two results files pairable): the same task file(s),
the same agent config (section `agent`: tools, step and context limits, sampling), the same
episode seeds `forgeline.agent.rollout.sample_seeds(root seed, k)` (k = 1 sample per task by
default), and the verifier as the only judge of `resolved`.

A policy is
- an HF model folder (weights + tokenizer), loaded with `HFEngine.from_pretrained`; or
- a PEFT adapter folder (`adapter_config.json` present): its base model (`--base DIR`, else the
  adapter's `base_model_name_or_path`) is loaded, the adapter put on it with
  `PeftModel.from_pretrained`, and generation runs with the adapter active (not merged, so the
  weights are exactly the trained ones); the tokenizer comes from the adapter folder when it
  has one, else from the base; or
- a model served by an OpenAI-compatible server (`--engine openai --base-url URL --model NAME
  --tokenizer DIR`; with vLLM, an adapter is served as a LoRA module and named by `--model`).

Outputs: the per-task results JSONL (one line per (instance_id, seed), sorted; see
`task_result`), the full episodes JSONL (forgeline.agent record format), then the manifest.
`wall_s` is machine-dependent (load, hardware, sandbox backend); every other field is a
function of task, seed, policy and config (with `agent.rollout.seeding: episode`).
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.agent.rollout import run_policy_on_tasks, sample_seeds
from forgeline.config import as_dict
from forgeline.params import EvaluationConfig
from forgeline.policy.engine import PolicySpec, add_engine_arguments
from forgeline.provenance import Manifest, read_jsonl, write_jsonl

log = logging.getLogger(__name__)
STAGE = "evaluation.evaluate"

def episode_seeds(ev: EvaluationConfig, root_seed: int, panel: str | None = None) -> list[int]:
    """The k episode seeds of a panel (k: `k_per_panel[panel]`, else `k`): explicit ones, else
    sample_seeds(root seed, k) (the same for every policy, which is what pairs the results)."""
    if ev.seeds is not None:
        return [int(s) for s in ev.seeds]
    return sample_seeds(int(root_seed), int(ev.k_per_panel.get(panel, ev.k)))


# -- pure -----------------------------------------------------------------------------------

RESULT_FIELDS = ("policy", "panel", "instance_id", "repo", "seed", "resolved", "outcome",
                 "termination", "steps", "input_tokens", "output_tokens", "wall_s", "config_digest")


def task_result(episode: Mapping[str, Any], policy: str, panel: str) -> dict[str, Any]:
    """One per-task result line from one episode record.

    resolved: outcome == "resolved" (the verifier's verdict, submitted); termination: the
    episode's exit_status (submitted, step_limit, token_limit, wall_time, context_exceeded,
    invalid_calls); steps: assistant turns; input_tokens: sum of prompt lengths over turns;
    output_tokens: generated tokens; wall_s: seconds (machine-dependent); config_digest: the
    agent config's digest (tables refuse to pair results made under different configs).
    """
    stats = episode["stats"]
    return {
        "policy": policy, "panel": panel,
        "instance_id": episode["instance_id"], "repo": episode.get("repo"), "seed": int(episode["seed"]),
        "resolved": episode["outcome"] == "resolved", "outcome": episode["outcome"],
        "termination": episode["exit_status"],
        "steps": int(stats["steps"]), "input_tokens": int(stats["input_tokens"]),
        "output_tokens": int(stats["output_tokens"]),
        "wall_s": (episode.get("timing") or {}).get("wall_s"),
        "config_digest": episode.get("config_digest"),
    }


def task_results(episodes: Sequence[Mapping[str, Any]], policy: str, panel: str) -> list[dict]:
    """task_result of every episode, sorted by (instance_id, seed)."""
    rows = [task_result(ep, policy, panel) for ep in episodes]
    return sorted(rows, key=lambda r: (r["instance_id"], r["seed"]))


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, help="the panel: task JSONL file(s)")
    parser.add_argument("--panel", help="the panel's name in the results (default: first task file's stem)")
    add_engine_arguments(parser)
    parser.add_argument("--out", required=True, help="per-task results JSONL")
    parser.add_argument("--episodes", help="episodes JSONL (default: OUT with .episodes.jsonl)")
    parser.add_argument("--partial", help="resumable episode record (default: OUT.partial)")
    parser.add_argument("--manifest", help="manifest path (default: OUT with .manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    # `threads` is the job's share of the machine: the engine generates on one thread
    # (HFEngine's default), the containers use the rest
    ev, a = cfg.evaluation, cfg.agent
    panel = args.panel or Path(args.tasks[0]).name.split(".")[0]
    seeds = episode_seeds(ev, cfg.seed, panel)
    tasks = sorted((t for f in args.tasks for t in read_jsonl(f)), key=lambda t: t["instance_id"])
    ids = [t["instance_id"] for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"panel {panel}: duplicate instance_id in {args.tasks}")
    out = Path(args.out)
    episodes_path = Path(args.episodes) if args.episodes else out.with_name(out.stem + ".episodes.jsonl")
    partial = Path(args.partial) if args.partial else out.with_name(out.name + ".partial")
    manifest = Manifest(stage=STAGE, params={"evaluation": {"k": len(seeds), "seeds": ev.seeds, "dtype": ev.dtype},
                                             "agent": as_dict(a), "serving": as_dict(cfg.serving)},
                        seeds={"episodes": seeds}, inputs=[*args.tasks], code=__name__)
    done = run_policy_on_tasks(cfg, STAGE, PolicySpec.from_args(args), tasks, seeds, partial, dtype=str(ev.dtype),
                               manifest=manifest)
    name, loaded = done.name, done.loaded
    # what the results depend on: the panel, the weights (adapter and base) or the served tokenizer
    manifest.inputs += [p for p in (loaded.get("path"), loaded.get("base"), loaded.get("tokenizer")) if p]
    results = task_results(done.episodes, name, panel)
    write_jsonl(out, results)
    write_jsonl(episodes_path, done.episodes)
    resolved = sum(r["resolved"] for r in results)
    manifest.notes = {"policy": name, "panel": panel, "loaded": loaded, "engine": done.engine,
                      "episodes": len(results), "resolved": resolved,
                      "success_rate": resolved / len(results) if results else 0.0,
                      "wall_s_is_machine_dependent": True}
    manifest.write(args.manifest or out.with_suffix(".manifest.json"), outputs=[out, episodes_path])
    partial.unlink(missing_ok=True)
    log.info("evaluate %s on %s: %d/%d resolved", name, panel, resolved, len(results))
