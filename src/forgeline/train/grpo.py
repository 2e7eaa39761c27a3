"""Stage `grpo`: GRPO of the base policy + a LoRA adapter against the real agent and verifier;
no critic (the baseline of an episode is the other episodes of its group).

Per step (top to bottom in `run_step`):

1. Groups. `tasks_per_step` tasks drawn from the train pool with random.Random(derive_seed(
   seed, "grpo.tasks", step)); G = `group_size` episodes of each (one group), episode seeds
   derive_seed(seed, "grpo.episode", step, slot, k), k < G: a group's seeds are a function of
   (step, slot) only, so a step's groups are a function of the step and the current weights
   (what makes resume exact). The G seeds differ: with `seeding: episode` one seed and one set
   of weights make one episode, so G equal seeds would be G copies of it and no signal.
2. Rollout. Fresh episodes of the CURRENT policy (base + adapter), as PPO's (`seeding:
   episode` forced; under torchrun each process runs its share).
3. Rewards and gates. Each episode's return (process + terminal rewards, `rewards.
   episode_return`); an episode failing a validity gate (PPO's gates, in PPO's order) is dropped
   and counted under the first gate it fails.
4. Group-relative advantages of the kept episodes; groups without signal (all rewards equal,
   or fewer than two kept) dropped and counted (`grpo_update.assign_advantages`).
5-6. The update (`grpo_update.GRPOTrainer`): old and reference log-probs, then the clipped
   surrogate with clip-higher and token-level normalisation (+ KL to the base).
7. Log one line of train_log.jsonl (success, KL, clip fraction, groups dropped); every
   `checkpoint_every` steps a checkpoint (adapter, optimizer, RNG states, the log so far).

Outputs (`--out`, e.g. results/adapter-grpo/): the PEFT adapter, `train_log.jsonl`,
`checkpoint-summary.json`, `grpo_curve.png`, the series (`checkpoints/step-NNNNNN/`,
`checkpoints.json`), then the manifest. Checkpoints (`--checkpoints`,
default OUT-checkpoints; in it <fingerprint>/step-NNNNNN/state.pt): a rerun resumes from the
latest one of its fingerprint (`forgeline.train.ppo_checkpoints`).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.agent.rollout import rollout
from forgeline.config import as_dict
from forgeline.params import AgentConfig
from forgeline.plots import figure, save_png
from forgeline.policy.engine import GenerationClock, open_adapter_server
from forgeline.provenance import MANIFEST_NAME, Manifest, read_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.verify import Verdicts
from forgeline.seeds import derive_seed, stage_seed
from forgeline.train.distributed import allreduce_, barrier, gather, setup_distributed, teardown_distributed
from forgeline.train.grpo_update import GRPOTrainer, assign_advantages
from forgeline.train.ppo import GATES, drop_counts, episode_sample, finite, solved_tasks
from forgeline.train.ppo_checkpoints import base_reference, folder_digest, run_fingerprint
from forgeline.train.ppo_update import make_actor
from forgeline.train.rl_stage import (add_warm_start_arguments, export, load_parent_adapter, run_notes,
                                       train_steps)

log = logging.getLogger(__name__)
STAGE = "train.grpo"

# -- groups (pure) ------------------------------------------------------------------------------


def step_groups(task_ids: Sequence[str], step: int, seed: int, tasks_per_step: int,
                group_size: int) -> list[tuple[int, str, int]]:
    """The (group, instance_id, episode seed) triples of a step, group by group: a seeded
    sample of `tasks_per_step` distinct ids (more than the pool: whole seeded shuffles,
    concatenated), `group_size` episodes each."""
    ids = sorted(task_ids)
    if not ids:
        raise ValueError("empty task pool")
    rng = random.Random(derive_seed(seed, "grpo.tasks", step))
    chosen: list[str] = []
    while len(chosen) < tasks_per_step:
        chosen += rng.sample(ids, min(tasks_per_step - len(chosen), len(ids)))
    return [(slot, iid, derive_seed(seed, "grpo.episode", step, slot, k))
            for slot, iid in enumerate(chosen) for k in range(group_size)]


# -- plots ------------------------------------------------------------------------------------

def plot_log(rows: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """grpo_curve.png: success rate, KL to the base, clip fraction and the share of groups
    dropped, per step."""
    steps = [r["step"] for r in rows]
    val = lambda key: [float("nan") if r[key] is None else r[key] for r in rows]  # noqa: E731
    panels = [("success rate (all episodes)", val("success_rate")), ("KL to the base (nats/token)", val("kl")),
              ("clip fraction", val("clip_frac")),
              ("groups dropped (share)", [r["groups_dropped"] / max(r["groups"], 1) for r in rows])]
    with figure(figsize=(9, 6), dpi=100, nrows=2, ncols=2) as (fig, axes):
        for ax, (title, ys) in zip(axes.flat, panels):
            ax.plot(steps, ys, marker=".")
            ax.set_title(title)
            ax.set_xlabel("GRPO step")
        fig.tight_layout()
        return save_png(fig, out / "grpo_curve.png")


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="the base policy folder (SFT policy)")
    parser.add_argument("--tasks", nargs="+", required=True, help="the train pool task JSONL file(s)")
    parser.add_argument("--out", required=True, help="the adapter folder to write")
    parser.add_argument("--checkpoints", help="checkpoint folder (default: OUT-checkpoints)")
    add_warm_start_arguments(parser)
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")
    parser.add_argument("--stop-after", type=int, default=0,
                        help="stop after this step without writing the outputs, as an interruption "
                             "would (a rerun resumes from the latest checkpoint)")
    parser.add_argument("--base-url", help="generate with this vLLM server (OpenAI API); the adapter "
                        "is loaded into it each step (needs --served-model)")
    parser.add_argument("--served-model", help="the base model's name on the server (with --base-url)")


def run_step(step: int, groups: Sequence[tuple[int, Mapping[str, Any], int]], trainer: GRPOTrainer, engine,
             sandbox, a: AgentConfig, repos_root: Path, test_timeout_s: float, policy: str,
             advantage: str, verdicts: Verdicts | None = None) -> dict[str, Any]:
    """One GRPO step (see the module docstring); returns its train-log line."""
    import torch

    rank, world = trainer.rank, trainer.world
    t_step = time.perf_counter()
    # 1-2. this process's share of the step's episodes, with the current policy
    index = {(t["instance_id"], s): i for i, (_, t, s) in enumerate(groups)}
    mine = [(t, s) for i, (_, t, s) in enumerate(groups) if i % world == rank]
    t0 = time.perf_counter()
    trainer.actor.eval()
    clock = GenerationClock(engine)
    records = rollout(mine, clock, sandbox, a, repos_root=repos_root, tokenizer=engine.tokenizer,
                      policy=policy, test_timeout_s=test_timeout_s, progress=False,
                      verdicts=verdicts) if mine else []
    t_roll = time.perf_counter() - t0
    t_gen = min(t_roll, clock.busy_s())
    # 3. rewards and gates; every process gets every sample
    local = []
    for r in records:
        i = index[(r["instance_id"], int(r["seed"]))]
        local.append({**episode_sample(r, i, a.reward), "group": groups[i][0]})
    samples = sorted((s for part in gather(local, world) for s in part), key=lambda s: s["index"])
    kept = [s for s in samples if s["gate"] is None]
    log.debug("step %d episodes: %s", step, [(s["key"], s["group"], s.get("ret"), s["sequence_tokens"]) for s in samples])
    times = torch.tensor([t_gen, t_roll - t_gen], dtype=torch.float64, device=trainer.device)
    allreduce_([times], world, op="max")
    # 4. group-relative advantages; 5-6. the update
    trained, counts = assign_advantages(samples, advantage)
    stats = trainer.update(trained, step) if trained else None
    return {
        "step": step,
        "reward_mean": finite(sum(s["ret"] for s in kept) / len(kept)) if kept else None,
        "success_rate": sum(s["resolved"] for s in samples) / len(samples) if samples else None,
        "kl": finite(stats["kl"]) if stats else None,
        "clip_frac": finite(stats["clip_frac"]) if stats else None,
        "approx_kl": finite(stats["approx_kl"]) if stats else None,
        "policy_loss": finite(stats["policy_loss"]) if stats else None,
        "drops": drop_counts(samples),
        "solved": solved_tasks(samples),
        "groups": counts["groups"],
        "groups_dropped": counts["dropped"],
        "episodes": len(samples),
        "kept": len(kept),
        "trained": len(trained),
        "tokens": stats["tokens"] if stats else 0,
        "wall_s": round(time.perf_counter() - t_step, 3),
        "time": {"generation": round(float(times[0]), 3), "sandbox": round(float(times[1]), 3),
                 "actor": round(stats["time"]["actor"], 3) if stats else 0.0},
    }


def run(cfg, args: argparse.Namespace) -> None:
    try:
        with contextlib.ExitStack() as stack:
            kind, base_url, served_model = open_adapter_server(stack, cfg.serving, args.policy,
                                                               stage_seed(cfg.seed, STAGE), args.base_url,
                                                               args.served_model)
            _run(cfg, args, kind, base_url, served_model)
    finally:
        teardown_distributed()


def _run(cfg, args: argparse.Namespace, engine_kind: str, base_url: str | None, served_model: str | None) -> None:
    """The stage, generating in process (`base_url` None) or with the server at `base_url`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    c = cfg.train.grpo
    a = replace(cfg.agent, rollout=replace(cfg.agent.rollout, seeding="episode"))
    rank, world, device = setup_distributed()
    torch.set_num_threads(max(1, int(c.threads)))
    torch.use_deterministic_algorithms(True)
    seed = stage_seed(cfg.seed, STAGE)
    out = Path(args.out)
    ckpt_root = Path(args.checkpoints) if args.checkpoints else out.with_name(out.name + "-checkpoints")
    tasks = {t["instance_id"]: t for f in args.tasks for t in read_jsonl(f)}
    task_ids = sorted(tasks)
    inputs = {"policy": folder_digest(args.policy), **({"parent": folder_digest(args.parent)} if args.parent else {})}
    fingerprint = run_fingerprint(c, a, task_ids, inputs)
    ckpt_root = ckpt_root / fingerprint[:16]
    manifest = Manifest(stage=STAGE, params={"train.grpo": as_dict(c), "agent": as_dict(a),
                                             "serving": as_dict(cfg.serving)},
                        seeds={"grpo": seed}, inputs=[args.policy, *args.tasks, *([args.parent] if args.parent else [])],
                        code=__name__)

    tokenizer = AutoTokenizer.from_pretrained(args.policy)
    base = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32).to(device)
    actor = make_actor(base, c.lora, seed)
    first = load_parent_adapter(actor, args.parent) if args.parent else 0
    if float(a.top_p) != 1.0:
        raise SystemExit(f"agent.top_p is {a.top_p}: GRPO needs 1.0 (its log-probs are of the whole "
                         "softmax, a nucleus would make them another distribution's); set agent.top_p: 1.0")
    trainer = GRPOTrainer(actor, c, seed, rank, world, device, temperature=float(a.temperature))
    sandbox = get_sandbox(cfg.sandbox)
    # a submission already graded in an earlier step (the same fix, found again) is not rerun
    verdicts = Verdicts()
    name = Path(args.policy).name
    last = first + (args.steps or int(c.steps))
    base_ref = base_reference(args.policy, cfg.policy.base)

    def step(n: int, engine) -> dict:
        groups = [(g, tasks[iid], s) for g, iid, s in step_groups(task_ids, n, seed, int(c.tasks_per_step),
                                                                  int(c.group_size))]
        return run_step(n, groups, trainer, engine, sandbox, a, Path(cfg.repos.root),
                        float(cfg.sandbox.test_timeout_s), name, c.advantage, verdicts)

    with manifest.timed("train"):
        done = train_steps("grpo", trainer, tokenizer, ckpt_root, fingerprint, first, last, int(c.checkpoint_every),
                           int(c.keep_checkpoints), base_ref, step, ("success_rate", "trained", "groups_dropped"),
                           base_url, served_model, name, None, args.stop_after)
    if done is None:
        return
    rows, resumed = done
    if rank == 0:
        outputs = export(out, actor, rows, ckpt_root, first, last, base_ref, plot_log)
        manifest.notes = run_notes(rows, first, last, resumed, args.parent, GATES,
                                   ("reward_mean", "success_rate", "kl", "clip_frac"), world_size=world,
                                   device=str(device), tasks=len(task_ids), engine=engine_kind,
                                   fingerprint=fingerprint, trained=sum(r["trained"] for r in rows),
                                   groups=sum(r["groups"] for r in rows),
                                   groups_dropped=sum(r["groups_dropped"] for r in rows))
        manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
        log.info("grpo: steps %d-%d; adapter in %s", first + 1, last, out)
    barrier(world)
