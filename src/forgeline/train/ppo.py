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
   both optimizers, RNG states, the log so far).

Episodes are processed one at a time in the updates (micro-batch = one episode; each forward
seeded by (step, phase, pass, episode) so LoRA dropout does not depend on the batch); every
loss is divided by the token count of the WHOLE minibatch, so the sum over episodes and
processes is the minibatch loss, and all-reduced (summed) gradients are the single-process ones.

Outputs (`--out`, e.g. results/adapter/): the PEFT adapter (`adapter_config.json`,
`adapter_model.safetensors`), `train_log.jsonl`, `checkpoint-summary.json`, plots, then the
manifest. Checkpoints (`--checkpoints`, default OUT-checkpoints; in it
<fingerprint>/step-NNNNNN/state.pt): a rerun resumes from the latest one of its fingerprint.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import random
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.rewards import episode_return, token_rewards
from forgeline.agent.rollout import rollout
from forgeline.config import as_dict
from forgeline.params import AdapterConfig, AgentConfig, BasePolicyConfig, PPOConfig, RewardConfig
from forgeline.plots import figure, save_png
from forgeline.policy.engine import HFEngine, OpenAIEngine
from forgeline.policy.serve import VLLMServer, load_lora_adapter, serve_options
from forgeline.provenance import (MANIFEST_NAME, Manifest, atomic_dir, canonical_json, read_jsonl,
                                  sha256_file, write_json)
from forgeline.sandbox import get_sandbox
from forgeline.seeds import derive_seed, stage_seed
from forgeline.train import rl
from forgeline.train.critic import load_value_model, lora_config, trainable_parameters

log = logging.getLogger(__name__)
STAGE = "train.ppo"
GATES = ("outcome", "labels", "trajectory", "alignment")
TRAIN_LOG = "train_log.jsonl"
SUMMARY = "checkpoint-summary.json"

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


def minibatches(n: int, count: int, seed: int, step: int, phase: str, epoch: int) -> list[list[int]]:
    """Indices 0..n-1 shuffled by derive_seed(seed, phase, step, epoch), cut into `count`
    nearly equal contiguous parts (empty parts dropped)."""
    order = list(range(n))
    random.Random(derive_seed(seed, "ppo.minibatch", phase, step, epoch)).shuffle(order)
    count = max(1, min(count, n))
    size, extra = divmod(n, count)
    out, start = [], 0
    for j in range(count):
        end = start + size + (j < extra)
        if end > start:
            out.append(order[start:end])
        start = end
    return out


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


# -- processes ---------------------------------------------------------------------------------

def setup_distributed() -> tuple[int, int, Any]:
    """(rank, world size, device). Under torchrun (WORLD_SIZE > 1) joins the process group:
    NCCL on GPU, gloo on CPU."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), device
    return 0, 1, device


def _gather(obj: Any, world: int) -> list[Any]:
    """Every process's `obj`, in rank order."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist
        dist.barrier()


def _allreduce_(tensors: Sequence, world: int, op: str = "sum") -> None:
    if world == 1:
        return
    import torch.distributed as dist
    red = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
    for t in tensors:
        dist.all_reduce(t, op=red)


class GenerationClock:
    """An engine wrapper that records when generation was in progress: the length of the union
    of its generate() intervals is the step's generation time (threads of one rollout wait on
    each other inside the engine, so summing per-episode times would count the waits)."""

    def __init__(self, engine):
        self.engine = engine
        self._lock = threading.Lock()
        self.intervals: list[tuple[float, float]] = []

    def __getattr__(self, name):  # tokenizer, model (the context limit), ...
        return getattr(self.engine, name)

    def generate(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            with self._lock:
                self.intervals.append((t0, time.perf_counter()))

    def busy_s(self) -> float:
        """Seconds during which at least one generate() call was running."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals):
            if b > end:
                total += b - max(a, end)
                end = b
        return total


# -- the trainer -------------------------------------------------------------------------------

def make_actor(base, lora: AdapterConfig, seed: int):
    """base + a fresh PEFT LoRA adapter (A initialised from `seed`, B = 0: starts AS the base)."""
    import torch
    from peft import get_peft_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(base, lora_config(lora, task_type="CAUSAL_LM"))


class PPOTrainer:
    """The update half of a PPO step: `update(samples, step)` (collective under torchrun: every
    process passes the same kept samples, each computes its share `index % world`).

    `temperature` is the sampling temperature of the episodes: the policy being optimised is
    softmax(logits / temperature), the distribution the tokens were drawn from, so every
    log-prob, the KL and the entropy are of that (as verl does); at 1 the plain softmax."""

    def __init__(self, actor, critic, cfg: PPOConfig, seed: int, rank: int = 0, world: int = 1,
                 device=None, temperature: float = 1.0):
        import torch

        if not temperature > 0:
            raise ValueError(f"PPO needs a sampling temperature > 0, not {temperature}")
        self.actor, self.critic, self.c, self.seed = actor, critic, cfg, seed
        self.temperature = float(temperature)
        self.rank, self.world = rank, world
        self.device = device or torch.device("cpu")
        self.actor_params = trainable_parameters(actor)
        self.critic_params = trainable_parameters(critic)
        betas = tuple(cfg.betas)
        self.actor_opt = torch.optim.AdamW(self.actor_params, lr=float(cfg.actor_lr), betas=betas,
                                           eps=1e-8, weight_decay=float(cfg.weight_decay))
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=float(cfg.critic_lr), betas=betas,
                                            eps=1e-8, weight_decay=float(cfg.weight_decay))

    # -- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        named = lambda m: {n: p.detach().cpu().clone() for n, p in m.named_parameters() if p.requires_grad}  # noqa: E731
        return {"actor": named(self.actor), "critic": named(self.critic),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        with torch.no_grad():
            for model, key in ((self.actor, "actor"), (self.critic, "critic")):
                params = dict(model.named_parameters())
                missing = sorted(set(state[key]) ^ {n for n, p in params.items() if p.requires_grad})
                if missing:
                    raise ValueError(f"checkpoint {key} parameters do not match the model: {missing[:5]}")
                for name, value in state[key].items():
                    params[name].copy_(value.to(params[name].device))
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])

    # -- forward passes (one episode) -------------------------------------------------------

    def _tensors(self, s: Mapping[str, Any]) -> dict:
        import torch

        acts = rl.action_positions(s["action_mask"])
        act_set = set(acts)
        off = [r for i, r in enumerate(s["rewards"]) if r and i not in act_set]
        if off:
            raise ValueError(f"{s['key']}: rewards on non-action tokens")
        ids = torch.tensor(s["tokens"], dtype=torch.long, device=self.device)
        return {"ids": ids[None], "pos": torch.tensor([i - 1 for i in acts], dtype=torch.long, device=self.device),
                "target": ids[acts], "rewards": torch.tensor([s["rewards"][i] for i in acts], dtype=torch.float32,
                                                             device=self.device)}

    def _seed(self, step: int, phase: str, epoch: int, index: int) -> None:
        import torch
        torch.manual_seed(derive_seed(self.seed, "ppo.forward", step, phase, epoch, index))

    def _actor_logits(self, t: Mapping[str, Any]):
        logits = self.actor(input_ids=t["ids"], logits_to_keep=t["pos"]).logits[0]
        return logits if self.temperature == 1.0 else logits / self.temperature

    def action_logprobs(self, sample: Mapping[str, Any]):
        """Log-probs of `sample`'s action tokens under the current policy, as the update
        computes them (no gradient)."""
        import torch

        with torch.no_grad():
            t = self._tensors(sample)
            return rl.logprobs_from_logits(self._actor_logits(t), t["target"])

    def _values(self, t: Mapping[str, Any]):
        return self.critic(t["ids"])[0, t["pos"]]

    def _owned(self, items: Sequence[int]) -> list[int]:
        return [i for i in items if i % self.world == self.rank]

    def _shared_forward(self, samples, tensors, fn) -> list:
        """fn(sample index) on this process's share, results gathered for all (as lists)."""
        mine = {i: fn(i) for i in self._owned(range(len(samples)))}
        merged: dict[int, Any] = {}
        for part in _gather(mine, self.world):
            merged.update(part)
        return [merged[i] for i in range(len(samples))]

    def _allreduce_grads(self, params) -> None:
        import torch
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        _allreduce_([p.grad for p in params], self.world)

    # -- the update --------------------------------------------------------------------------

    def update(self, samples: Sequence[Mapping[str, Any]], step: int) -> dict[str, Any]:
        """One PPO update on kept `samples` (tokens, action_mask, rewards, key); returns the
        step's statistics {kl, clip_frac, value_loss, ev, entropy, policy_loss, tokens,
        time: {critic, actor}}."""
        import torch

        c = self.c
        tensors = [self._tensors(s) for s in samples]
        n = len(samples)
        t_actor = t_critic = 0.0

        # old and reference log-probs of the action tokens, values (no gradient, eval mode)
        t0 = time.perf_counter()
        self.actor.eval()
        self.critic.eval()
        with torch.no_grad():
            def lp(i):
                t = tensors[i]
                old = rl.logprobs_from_logits(self._actor_logits(t), t["target"])
                with self.actor.disable_adapter():
                    ref = rl.logprobs_from_logits(self._actor_logits(t), t["target"])
                return old.cpu(), ref.cpu()
            lps = self._shared_forward(samples, tensors, lp)
        t_actor += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            old_values = [v.to(self.device) for v in
                          self._shared_forward(samples, tensors, lambda i: self._values(tensors[i]).cpu())]
        old_lp = [a.to(self.device) for a, _ in lps]
        ref_lp = [b.to(self.device) for _, b in lps]
        rewards = [t["rewards"] for t in tensors]
        if c.kl_mode == "penalty":  # per-token KL penalty in the reward (k1, as in InstructGPT)
            rewards = [r - float(c.kl_coef) * rl.kl_estimate(o, f, "k1") for r, o, f in zip(rewards, old_lp, ref_lp)]
        gae = lambda r, v: rl.gae(r, v, torch.ones_like(r), float(c.gamma), float(c.lam))  # noqa: E731
        returns = [gae(r, v)[1] for r, v in zip(rewards, old_values)]
        all_v, all_r = torch.cat(old_values), torch.cat(returns)
        ev = rl.explained_variance(all_v, all_r)
        kl = float(torch.cat([rl.kl_estimate(o, f, c.kl_estimator) for o, f in zip(old_lp, ref_lp)]).mean())

        # critic: `critic_updates` passes of the clipped value loss
        self.critic.train()
        v_losses = []
        for k in range(int(c.critic_updates)):
            for mb in minibatches(n, int(c.minibatches), self.seed, step, "critic", k):
                count = float(sum(len(tensors[i]["pos"]) for i in mb))
                self.critic_opt.zero_grad(set_to_none=True)
                local = torch.zeros(1, dtype=torch.float64, device=self.device)  # NCCL reduces device tensors
                for i in self._owned(mb):
                    self._seed(step, "critic", k, i)
                    loss, _ = rl.value_loss(self._values(tensors[i]), old_values[i], returns[i],
                                            torch.ones_like(returns[i]), float(c.value_clip), count)
                    loss.backward()
                    local += float(loss.detach())
                self._allreduce_grads(self.critic_params)
                _allreduce_([local], self.world)
                torch.nn.utils.clip_grad_norm_(self.critic_params, float(c.grad_clip))
                self.critic_opt.step()
                v_losses.append(float(local))
        # GAE again, with the updated critic
        self.critic.eval()
        with torch.no_grad():
            new_values = [v.to(self.device) for v in
                          self._shared_forward(samples, tensors, lambda i: self._values(tensors[i]).cpu())]
        adv = [gae(r, v)[0] for r, v in zip(rewards, new_values)]
        if c.whiten_advantages:
            flat = torch.cat(adv)
            mom = rl.masked_moments(flat, torch.ones_like(flat))
            adv = [rl.whiten(a, torch.ones_like(a), mom) for a in adv]
        t_critic += time.perf_counter() - t0

        # actor: the clipped surrogate (+ KL to the base) - entropy bonus
        t0 = time.perf_counter()
        self.actor.train()
        stats = torch.zeros(5, dtype=torch.float64, device=self.device)  # policy loss, clip frac, entropy, approx kl, minibatches
        for epoch in range(int(c.ppo_epochs)):
            for mb in minibatches(n, int(c.minibatches), self.seed, step, "actor", epoch):
                count = float(sum(len(tensors[i]["pos"]) for i in mb))
                self.actor_opt.zero_grad(set_to_none=True)
                local = torch.zeros(5, dtype=torch.float64, device=self.device)
                for i in self._owned(mb):
                    t = tensors[i]
                    self._seed(step, "actor", epoch, i)
                    logits = self._actor_logits(t)
                    logp = rl.logprobs_from_logits(logits, t["target"])
                    ones = torch.ones_like(logp)
                    pg, clip_frac, approx_kl = rl.policy_loss(logp, old_lp[i], adv[i], ones, float(c.clip_ratio), count)
                    ent = rl.masked_mean(rl.entropy_from_logits(logits), ones, count)
                    loss = pg - float(c.entropy_coef) * ent
                    if c.kl_mode == "loss":
                        loss = loss + float(c.kl_coef) * rl.masked_mean(
                            rl.kl_estimate(logp, ref_lp[i], c.kl_estimator), ones, count)
                    loss.backward()
                    local += torch.tensor([float(pg.detach()), float(clip_frac), float(ent.detach()),
                                           float(approx_kl), 0.0], dtype=torch.float64, device=self.device)
                self._allreduce_grads(self.actor_params)
                _allreduce_([local], self.world)
                torch.nn.utils.clip_grad_norm_(self.actor_params, float(c.grad_clip))
                self.actor_opt.step()
                local[4] = 1.0
                stats += local
        self.actor.eval()
        t_actor += time.perf_counter() - t0
        m = max(float(stats[4]), 1.0)
        return {"kl": kl, "clip_frac": float(stats[1]) / m, "value_loss": sum(v_losses) / max(len(v_losses), 1),
                "ev": ev, "entropy": float(stats[2]) / m, "policy_loss": float(stats[0]) / m,
                "approx_kl": float(stats[3]) / m, "tokens": int(sum(len(s["tokens"]) for s in samples)),
                "action_tokens": int(sum(len(t["pos"]) for t in tensors)),
                "time": {"critic": t_critic, "actor": t_actor}}


# -- checkpoints --------------------------------------------------------------------------------

_STEP_DIR = re.compile(r"^step-(\d{6})$")


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint folder (step-NNNNNN with a state.pt), or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in root.iterdir()
                   if (m := _STEP_DIR.match(p.name)) and (p / "state.pt").is_file())
    return found[-1][1] if found else None


def rng_state() -> dict:
    import torch
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
        state["numpy"] = np.random.get_state()
    except ImportError:  # numpy is optional here
        pass
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import torch
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np
        np.random.set_state(state["numpy"])


def save_checkpoint(root: Path, step: int, trainer: PPOTrainer, rows: Sequence[Mapping[str, Any]],
                    fingerprint: str, keep: int) -> Path:
    """Write root/step-NNNNNN/state.pt atomically; keep the newest `keep` (0 = all)."""
    import shutil

    import torch

    path = root / f"step-{step:06d}"
    with atomic_dir(path, owned=("state.pt",)) as tmp:
        torch.save({"step": step, "fingerprint": fingerprint, "trainer": trainer.state_dict(),
                    "rng": rng_state(), "log": list(rows)}, tmp / "state.pt")
    if keep > 0:
        old = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name))[:-keep]
        for p in old:
            shutil.rmtree(p)
    return path


def run_fingerprint(c: PPOConfig, agent: AgentConfig, task_ids: Sequence[str],
                    inputs: Mapping[str, str]) -> str:
    """What a checkpoint must agree on to be resumed: the config (except steps and the
    checkpoint schedule), the agent config, the task pool and the input digests."""
    free = ("steps", "checkpoint_every", "keep_checkpoints", "threads")
    text = canonical_json({"ppo": {k: v for k, v in as_dict(c).items() if k not in free}, "agent": as_dict(agent),
                           "tasks": sorted(task_ids), "inputs": inputs})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def folder_digest(path: str | Path) -> str:
    """sha256 over the weight/config files of a model folder (what a resumed run must match)."""
    path = Path(path)
    parts = [f"{p.name}:{sha256_file(p)}" for p in sorted(path.iterdir())
             if p.is_file() and p.suffix in (".json", ".safetensors")
             and p.name not in (MANIFEST_NAME, "metrics.json", "loss_curve.json")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def checkpoint_summary(folder: Path, step: int) -> dict[str, Any]:
    """{step, tensors, tensor_bytes, files: {name: {bytes, sha256}}} of an adapter folder."""
    from safetensors import safe_open

    weights = folder / "adapter_model.safetensors"
    tensors = nbytes = 0
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            t = f.get_tensor(key)
            tensors += 1
            nbytes += t.numel() * t.element_size()
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name not in (SUMMARY, MANIFEST_NAME)}
    return {"step": step, "tensors": tensors, "tensor_bytes": nbytes,
            "bytes": sum(f["bytes"] for f in files.values()), "files": files}


def base_reference(policy: str | Path, base: BasePolicyConfig) -> dict[str, Any]:
    """What the adapter's config names as its base, so that PEFT's Auto classes
    (`AutoPeftModelForCausalLM.from_pretrained(adapter)`) find it from any working directory.

    PEFT hands `base_model_name_or_path` to transformers, which resolves a path against the
    CURRENT directory (not the adapter's folder) and takes anything else for a hub id. So a hub
    base (`policy.base.source: hub`) is named by its repository id at its pinned commit
    (`revision`, which PEFT passes on): the same bytes in every checkout. A local base (the tiny
    policy) is named by its absolute path in the checkout the stage ran in; elsewhere (a `dvc
    pull` into another folder) give the base explicitly (docs/ppo.md, "Loading the adapter").
    """
    if base.source == "hub" and base.hub.repo_id:
        return {"base_model_name_or_path": base.hub.repo_id, "revision": base.hub.revision}
    return {"base_model_name_or_path": os.path.abspath(policy), "revision": None}


def save_adapter(actor, folder: str | Path, base: Mapping[str, Any] | None = None) -> None:
    """The adapter in PEFT's format; target_modules sorted (PEFT writes a set: its order would
    change with the interpreter's hash seed, and with it the file's bytes); `base` (see
    `base_reference`) replaces the base model PEFT recorded (the path the stage was given)."""
    folder = Path(folder)
    actor.save_pretrained(folder)
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config.update(base or {})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


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
    parser.add_argument("--critic", required=True, help="the pretrained critic folder (stage critic)")
    parser.add_argument("--tasks", nargs="+", required=True, help="the train pool task JSONL file(s)")
    parser.add_argument("--out", required=True, help="the adapter folder to write")
    parser.add_argument("--checkpoints", help="checkpoint folder (default: OUT-checkpoints)")
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")
    parser.add_argument("--stop-after", type=int, default=0,
                        help="stop after this step without writing the outputs, as an interruption "
                             "would (a rerun resumes from the latest checkpoint)")
    parser.add_argument("--base-url", help="generate with this vLLM server (OpenAI API); the adapter "
                        "is loaded into it each step (needs --served-model)")
    parser.add_argument("--served-model", help="the base model's name on the server (with --base-url)")


def run_step(step: int, pairs: Sequence[tuple[Mapping[str, Any], int]], trainer: PPOTrainer, engine, sandbox,
             a: AgentConfig, repos_root: Path, test_timeout_s: float, policy: str) -> dict[str, Any]:
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
                      policy=policy, test_timeout_s=test_timeout_s, progress=False) if mine else []
    t_roll = time.perf_counter() - t0
    # sandbox = the rest of the rollout: tool calls and verification not hidden behind generation
    t_gen = min(t_roll, clock.busy_s())
    # 3. rewards, gates; every process gets every sample
    local = [episode_sample(r, index[(r["instance_id"], int(r["seed"]))], a.reward) for r in records]
    samples = sorted((s for part in _gather(local, world) for s in part), key=lambda s: s["index"])
    kept = [s for s in samples if s["gate"] is None]
    times = torch.tensor([t_gen, t_roll - t_gen], dtype=torch.float64, device=trainer.device)
    _allreduce_([times], world, op="max")  # the slowest process sets the pace
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
    serving = cfg.serving
    args.engine = "openai" if args.base_url else serving.engine
    try:
        with contextlib.ExitStack() as stack:
            if args.engine == "openai" and not args.base_url:
                args.base_url, args.served_model = serving.base_url, serving.served_model
            elif args.engine == "vllm":
                if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                    raise SystemExit("serving.engine vllm starts one server per process; under torchrun "
                                     "start one yourself and use engine openai (serving.base_url)")
                # the base policy, with the adapter of each step loaded into it at run time
                args.served_model = "base"
                options = serve_options(serving.vllm, stage_seed(cfg.seed, STAGE), enable_lora=True)
                args.base_url = stack.enter_context(VLLMServer(
                    args.policy, args.served_model, options,
                    startup_timeout_s=float(serving.vllm.startup_timeout_s)))
            _run(cfg, args)
    finally:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def _run(cfg, args: argparse.Namespace) -> None:
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
    tasks = {t["instance_id"]: t for f in args.tasks for t in read_jsonl(f)}
    task_ids = sorted(tasks)
    inputs = {"policy": folder_digest(args.policy), "critic": folder_digest(args.critic)}
    fingerprint = run_fingerprint(c, a, task_ids, inputs)
    # one folder per (config, pool, inputs): an interrupted run resumes, a changed one starts afresh
    ckpt_root = ckpt_root / fingerprint[:16]
    manifest = Manifest(stage=STAGE, params={"train.ppo": as_dict(c), "agent": as_dict(a),
                                             "serving": as_dict(cfg.serving)},
                        seeds={"ppo": seed},
                        inputs=[args.policy, args.critic, *args.tasks], code=__name__)

    tokenizer = AutoTokenizer.from_pretrained(args.policy)
    base = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32).to(device)
    actor = make_actor(base, c.lora, seed)
    critic = load_value_model(args.critic, c.critic_mode, c.critic_lora, seed).to(device)
    if float(a.top_p) != 1.0:
        raise SystemExit(f"agent.top_p is {a.top_p}: PPO needs 1.0 (its log-probs are of the whole "
                         "softmax, a nucleus would make them another distribution's); set agent.top_p: 1.0")
    trainer = PPOTrainer(actor, critic, c, seed, rank, world, device, temperature=float(a.temperature))
    rows: list[dict] = []
    start = 0
    latest = latest_checkpoint(ckpt_root)
    if latest is not None:
        state = torch.load(latest / "state.pt", map_location="cpu", weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise SystemExit(f"{latest}: made with another config, pool or inputs (fingerprint "
                             f"{state['fingerprint']} != {fingerprint}); delete {ckpt_root} to start over")
        trainer.load_state_dict(state["trainer"])
        set_rng_state(state["rng"])
        rows, start = list(state["log"]), int(state["step"])
        if rank == 0:
            log.info("resuming from %s (step %d)", latest, start)

    name = Path(args.policy).name
    if args.base_url:
        if not args.served_model:
            raise SystemExit("--base-url needs --served-model")
        engine = OpenAIEngine(args.base_url, args.served_model, tokenizer=tokenizer)
    else:
        engine = HFEngine(actor, tokenizer)
    sandbox = get_sandbox(cfg.sandbox)
    served: str | None = None
    steps = int(c.steps)
    bar = tqdm(range(start + 1, steps + 1), desc="ppo", unit="step", disable=rank != 0, initial=start, total=steps)
    with manifest.timed("train"):
        for step in bar:
            if args.base_url:  # the current adapter into the vLLM server, before generating
                live = ckpt_root / "live" / f"step-{step:06d}"
                if rank == 0:
                    save_adapter(actor, live)
                    load_lora_adapter(engine, f"{name}-ppo-{step}", live, served)
                _barrier(world)
                served = engine.model = f"{name}-ppo-{step}"
            pairs = [(tasks[iid], s) for iid, s in step_pairs(task_ids, step, seed, int(c.tasks_per_step),
                                                              int(c.samples_per_task))]
            row = run_step(step, pairs, trainer, engine, sandbox, a, Path(cfg.repos.root),
                           float(cfg.sandbox.test_timeout_s), name)
            rows.append(row)
            bar.set_postfix(reward=row["reward_mean"], success=row["success_rate"], kept=row["kept"])
            if step % int(c.checkpoint_every) == 0 or step == steps:
                if rank == 0:
                    save_checkpoint(ckpt_root, step, trainer, rows, fingerprint, int(c.keep_checkpoints))
                _barrier(world)
            if args.stop_after and step >= args.stop_after:
                log.info("stopping after step %d (--stop-after): no outputs written", step)
                return
    if rank == 0:
        with atomic_dir(out, owned=(MANIFEST_NAME, "adapter_config.json")) as tmp:
            save_adapter(actor, tmp, base_reference(args.policy, cfg.policy.base))
            (tmp / TRAIN_LOG).write_text("".join(canonical_json(r) + "\n" for r in rows), encoding="utf-8")
            plot_log(rows, tmp)
            write_json(tmp / SUMMARY, checkpoint_summary(tmp, steps))
        outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
        last = rows[-1] if rows else {}
        manifest.notes = {"steps": steps, "resumed_from": start, "world_size": world, "device": str(device),
                          "tasks": len(task_ids), "episodes": sum(r["episodes"] for r in rows),
                          "kept": sum(r["kept"] for r in rows),
                          "drops": {g: sum(r["drops"][g] for r in rows) for g in GATES},
                          "last": {k: last.get(k) for k in ("reward_mean", "success_rate", "kl", "ev")},
                          "engine": args.engine, "fingerprint": fingerprint}
        manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
        log.info("ppo: %d steps; adapter in %s", steps, out)
    _barrier(world)
