"""Stage `ppo`: PPO of the base policy + a LoRA adapter against the real agent and verifier.

Per step (the loop of the original experiment, top to bottom in `run_step`):

1. Tasks. B = `tasks_per_step` tasks drawn from the train pool with random.Random(derive_seed(
   seed, "ppo.tasks", step)), `samples_per_task` episodes each, episode seeds
   derive_seed(seed, "ppo.episode", step, slot, k): a step's episodes are a function of the
   step number and the current weights only (what makes resume and torchrun exact).
2. Rollout. Fresh episodes of the CURRENT policy (base + adapter) through
   `forgeline.agent.rollout.rollout` with `seeding: episode` forced, in the sandbox of the
   config; under torchrun each process runs its share (pairs[rank::world]).
3. Rewards and gates. Per-token rewards (`rewards.token_rewards`: process rewards per turn, the
   terminal reward on the last turn). An episode that fails a validity gate (`outcome`, `labels`,
   `trajectory`, `alignment`: the record's `validity`) is dropped and counted under the FIRST
   gate it fails, in that order; the kept ones are shared with every process.
4. Old log-probs (adapter on) and reference log-probs (adapter disabled = the base policy) of the
   action tokens, values of the critic; with `kl_mode: penalty` the reward of each action token
   gets - kl_coef * k1. GAE (gamma, lam) -> returns.
5. Critic: `critic_updates` (2) passes of the clipped value loss against those returns.
6. GAE again with the UPDATED critic's values -> advantages, whitened over all kept tokens.
7. Actor: `ppo_epochs` passes over `minibatches` minibatches of the clipped surrogate
   (+ kl_coef * mean KL to the base (k3) with `kl_mode: loss`, - entropy_coef * entropy).
8. Log one line of train_log.jsonl; every `checkpoint_every` steps a checkpoint (adapter, critic,
   both optimizers, RNG states, the log so far) and an entry of the series (the adapter and the
   critic of that step, `forgeline.train.rl_stage`).

Episodes are processed one at a time in the updates (micro-batch = one episode; each forward
seeded by (step, phase, pass, episode) so LoRA dropout does not depend on the batch); every
loss is divided by the token count of the WHOLE minibatch, so the sum over episodes and
processes is the minibatch loss, and all-reduced (summed) gradients are the single-process ones.

Outputs (`--out`, e.g. results/adapter/): the PEFT adapter (`adapter_config.json`,
`adapter_model.safetensors`), `train_log.jsonl`, `checkpoint-summary.json`, plots, the series
(`checkpoints/step-NNNNNN/`, `checkpoints.json`), then the manifest. Checkpoints (`--checkpoints`,
default OUT-checkpoints; in it <fingerprint>/step-NNNNNN/state.pt): a rerun resumes from the
latest one of its fingerprint. `--parent` warm-starts from a series entry of another run.

This module is the stage: a step, episodes -> samples, the train log and its plots. The loop
around the steps (resume, series, warm start, the artifact) is `forgeline.train.rl_stage`, the
update (steps 4-7) `forgeline.train.ppo_update`, checkpoints and the adapter's files
`forgeline.train.ppo_checkpoints`, the process group `forgeline.train.distributed`, and where
the policy generates (in process, or a vLLM server the adapter is loaded into each step)
`forgeline.policy.engine.open_adapter_server`.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.agent.rewards import episode_return, token_rewards
from forgeline.agent.rollout import rollout
from forgeline.config import as_dict
from forgeline.params import AgentConfig, RewardConfig
from forgeline.plots import figure, save_png
from forgeline.policy.engine import GenerationClock, open_adapter_server
from forgeline.provenance import MANIFEST_NAME, Manifest, read_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.verify import Verdicts
from forgeline.seeds import derive_seed, stage_seed
from forgeline.train.critic import load_value_model, save_value_model
from forgeline.train.distributed import allreduce_, barrier, gather, setup_distributed, teardown_distributed
from forgeline.train.ppo_checkpoints import base_reference, folder_digest, run_fingerprint
from forgeline.train.ppo_update import PPOTrainer, make_actor
from forgeline.train.rl_stage import (add_warm_start_arguments, export, load_parent_adapter, run_notes,
                                       train_steps)

log = logging.getLogger(__name__)
STAGE = "train.ppo"
GATES = ("outcome", "labels", "trajectory", "alignment")
CRITIC_DIR = "critic"  # in each checkpoint of the series: the critic a warm start continues with

# -- episodes -> samples (pure) ----------------------------------------------------------------

def step_pairs(task_ids: Sequence[str], step: int, seed: int, tasks_per_step: int,
               samples_per_task: int) -> list[tuple[str, int]]:
    """The (instance_id, episode seed) pairs of a step, in slot order. Tasks: a seeded sample of
    `tasks_per_step` distinct ids (more than the pool: whole seeded shuffles, concatenated)."""
    ids = sorted(task_ids)
    if not ids:
        raise ValueError("empty task pool")
    rng = random.Random(derive_seed(seed, "ppo.tasks", step))
    chosen: list[str] = []
    while len(chosen) < tasks_per_step:
        take = min(tasks_per_step - len(chosen), len(ids))
        chosen += rng.sample(ids, take)
    return [(iid, derive_seed(seed, "ppo.episode", step, slot, k))
            for slot, iid in enumerate(chosen) for k in range(samples_per_task)]


def failed_gate(record: Mapping[str, Any]) -> str | None:
    """The first validity gate (GATES order) the episode fails, or None if it passes all."""
    validity = record.get("validity") or {}
    for gate in GATES:
        if not validity.get(gate):
            return gate
    return None


def episode_sample(record: Mapping[str, Any], index: int, reward_cfg: RewardConfig) -> dict[str, Any]:
    """What training needs of an episode record (small enough to send between processes):
    index (slot in the step), key, task, resolved, gate (None = kept), and for kept ones tokens,
    action_mask, per-token rewards and the episode return."""
    gate = failed_gate(record)
    out = {"index": index, "key": f"{record['instance_id']}:{record['seed']}", "task": record["instance_id"],
           "resolved": record.get("outcome") == "resolved", "gate": gate,
           "sequence_tokens": len(record["tokens"]), "generated_tokens": int(sum(record["action_mask"])),
           "timing": dict(record.get("timing") or {})}
    if gate is None:
        out.update(tokens=[int(t) for t in record["tokens"]], action_mask=[int(m) for m in record["action_mask"]],
                   rewards=token_rewards(record, reward_cfg), ret=episode_return(record, reward_cfg))
    return out


def drop_counts(samples: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """{gate: episodes dropped at that gate} for every gate."""
    return {g: sum(s["gate"] == g for s in samples) for g in GATES}


def solved_tasks(samples: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """{instance_id: resolved episodes} of a step, sorted: which tasks carry the training
    successes (the original run had 16 of its 32 from one task)."""
    solved: dict[str, int] = {}
    for s in samples:
        if s["resolved"]:
            solved[s["task"]] = solved.get(s["task"], 0) + 1
    return dict(sorted(solved.items()))


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


# -- plots ------------------------------------------------------------------------------------

def plot_log(rows: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """reward_success.png, kl.png, ev.png, drops.png from the train log."""
    steps = [r["step"] for r in rows]
    val = lambda key: [float("nan") if r[key] is None else r[key] for r in rows]  # noqa: E731
    paths = []

    def draw(name: str, title: str, ylabel: str, series: Sequence[tuple[str, list]], kind: str = "line"):
        with figure(figsize=(7, 4), dpi=100) as (fig, ax):
            if kind == "bar":
                bottom = [0.0] * len(steps)
                for label, ys in series:
                    ax.bar(steps, ys, bottom=bottom, label=label)
                    bottom = [b + y for b, y in zip(bottom, ys)]
            else:
                for label, ys in series:
                    ax.plot(steps, ys, marker=".", label=label)
            ax.set_xlabel("PPO step")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.legend()
            fig.tight_layout()
            paths.append(save_png(fig, out / name))

    draw("reward_success.png", "reward and success", "per episode",
         [("mean return (kept)", val("reward_mean")), ("success rate (all)", val("success_rate"))])
    draw("kl.png", "KL to the base policy", "nats/token", [("kl", val("kl"))])
    draw("ev.png", "critic explained variance", "EV", [("ev", val("ev"))])
    draw("drops.png", "episodes dropped per gate", "episodes",
         [(g, [r["drops"][g] for r in rows]) for g in GATES], kind="bar")
    return paths


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="the base policy folder (SFT policy)")
    parser.add_argument("--critic", help="the pretrained critic folder (stage critic); with --parent, "
                        "the parent's critic/ unless given")
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


def run_step(step: int, pairs: Sequence[tuple[Mapping[str, Any], int]], trainer: PPOTrainer, engine, sandbox,
             a: AgentConfig, repos_root: Path, test_timeout_s: float, policy: str,
             verdicts: Verdicts | None = None) -> dict[str, Any]:
    """One PPO step (see the module docstring); returns its train-log line."""
    import torch

    rank, world = trainer.rank, trainer.world
    t_step = time.perf_counter()
    # 1-2. this process's share of the step's episodes, with the current policy
    index = {(t["instance_id"], s): i for i, (t, s) in enumerate(pairs)}
    mine = [p for i, p in enumerate(pairs) if i % world == rank]
    t0 = time.perf_counter()
    trainer.actor.eval()
    clock = GenerationClock(engine)
    records = rollout(mine, clock, sandbox, a, repos_root=repos_root, tokenizer=engine.tokenizer,
                      policy=policy, test_timeout_s=test_timeout_s, progress=False,
                      verdicts=verdicts) if mine else []
    t_roll = time.perf_counter() - t0
    # sandbox = the rest of the rollout: tool calls and verification not hidden behind generation
    t_gen = min(t_roll, clock.busy_s())
    # 3. rewards, gates; every process gets every sample
    local = [episode_sample(r, index[(r["instance_id"], int(r["seed"]))], a.reward) for r in records]
    samples = sorted((s for part in gather(local, world) for s in part), key=lambda s: s["index"])
    kept = [s for s in samples if s["gate"] is None]
    times = torch.tensor([t_gen, t_roll - t_gen], dtype=torch.float64, device=trainer.device)
    allreduce_([times], world, op="max")  # the slowest process sets the pace
    # 4-7. the update
    stats = trainer.update(kept, step) if kept else None
    row = {
        "step": step,
        "reward_mean": finite(sum(s["ret"] for s in kept) / len(kept)) if kept else None,
        "success_rate": sum(s["resolved"] for s in samples) / len(samples) if samples else None,
        "kl": finite(stats["kl"]) if stats else None,
        "clip_frac": finite(stats["clip_frac"]) if stats else None,
        "value_loss": finite(stats["value_loss"]) if stats else None,
        "ev": finite(stats["ev"]) if stats else None,
        "entropy": finite(stats["entropy"]) if stats else None,
        "policy_loss": finite(stats["policy_loss"]) if stats else None,
        "drops": drop_counts(samples),
        "solved": solved_tasks(samples),
        "episodes": len(samples),
        "kept": len(kept),
        "tokens": stats["tokens"] if stats else 0,
        "wall_s": round(time.perf_counter() - t_step, 3),
        "time": {"generation": round(float(times[0]), 3), "sandbox": round(float(times[1]), 3),
                 "critic": round(stats["time"]["critic"], 3) if stats else 0.0,
                 "actor": round(stats["time"]["actor"], 3) if stats else 0.0},
    }
    return row


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
    """The stage, generating in process (`base_url` None) or with the server at `base_url`
    (`open_adapter_server`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    c = cfg.train.ppo
    # an episode = f(task, seed, weights): resume- and rank-proof
    a = replace(cfg.agent, rollout=replace(cfg.agent.rollout, seeding="episode"))
    rank, world, device = setup_distributed()
    torch.set_num_threads(max(1, int(c.threads)))
    torch.use_deterministic_algorithms(True)
    seed = stage_seed(cfg.seed, STAGE)
    out = Path(args.out)
    ckpt_root = Path(args.checkpoints) if args.checkpoints else out.with_name(out.name + "-checkpoints")
    critic_dir = args.critic or (args.parent and str(Path(args.parent) / CRITIC_DIR))
    if not critic_dir:
        raise SystemExit("ppo needs --critic (the pretrained critic), or --parent (its critic/ is used)")
    tasks = {t["instance_id"]: t for f in args.tasks for t in read_jsonl(f)}
    task_ids = sorted(tasks)
    inputs = {"policy": folder_digest(args.policy), "critic": folder_digest(critic_dir),
              **({"parent": folder_digest(args.parent)} if args.parent else {})}
    fingerprint = run_fingerprint(c, a, task_ids, inputs)
    # one folder per (config, pool, inputs): an interrupted run resumes, a changed one starts afresh
    ckpt_root = ckpt_root / fingerprint[:16]
    manifest = Manifest(stage=STAGE, params={"train.ppo": as_dict(c), "agent": as_dict(a),
                                             "serving": as_dict(cfg.serving)},
                        seeds={"ppo": seed},
                        inputs=[args.policy, critic_dir, *args.tasks, *([args.parent] if args.parent else [])],
                        code=__name__)

    tokenizer = AutoTokenizer.from_pretrained(args.policy)
    base = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32).to(device)
    actor = make_actor(base, c.lora, seed)
    first = load_parent_adapter(actor, args.parent) if args.parent else 0
    critic = load_value_model(critic_dir, c.critic_mode, c.critic_lora, seed).to(device)
    if float(a.top_p) != 1.0:
        raise SystemExit(f"agent.top_p is {a.top_p}: PPO needs 1.0 (its log-probs are of the whole "
                         "softmax, a nucleus would make them another distribution's); set agent.top_p: 1.0")
    trainer = PPOTrainer(actor, critic, c, seed, rank, world, device, temperature=float(a.temperature))
    sandbox = get_sandbox(cfg.sandbox)
    # a submission already graded in an earlier step (the same fix, found again) is not rerun
    verdicts = Verdicts()
    name = Path(args.policy).name
    last = first + (args.steps or int(c.steps))
    base_ref = base_reference(args.policy, cfg.policy.base)

    def step(n: int, engine) -> dict:
        pairs = [(tasks[iid], s) for iid, s in step_pairs(task_ids, n, seed, int(c.tasks_per_step),
                                                          int(c.samples_per_task))]
        return run_step(n, pairs, trainer, engine, sandbox, a, Path(cfg.repos.root),
                        float(cfg.sandbox.test_timeout_s), name, verdicts)

    def save_critic(folder: Path) -> None:  # a warm start continues with this critic
        (folder / CRITIC_DIR).mkdir()
        save_value_model(trainer.critic, folder / CRITIC_DIR)

    with manifest.timed("train"):
        done = train_steps("ppo", trainer, tokenizer, ckpt_root, fingerprint, first, last, int(c.checkpoint_every),
                           int(c.keep_checkpoints), base_ref, step, ("reward_mean", "success_rate", "kept"),
                           base_url, served_model, name, save_critic, args.stop_after)
    if done is None:
        return
    rows, resumed = done
    if rank == 0:
        outputs = export(out, actor, rows, ckpt_root, first, last, base_ref, plot_log)
        manifest.notes = run_notes(rows, first, last, resumed, args.parent, GATES,
                                   ("reward_mean", "success_rate", "kl", "ev"), world_size=world,
                                   device=str(device), tasks=len(task_ids), engine=engine_kind,
                                   fingerprint=fingerprint)
        manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
        log.info("ppo: steps %d-%d; adapter in %s", first + 1, last, out)
    barrier(world)
