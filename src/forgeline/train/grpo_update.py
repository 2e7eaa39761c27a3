"""The GRPO update: one step's groups of episodes in, the adapter's new weights out. No critic.

The algorithm, top to bottom (the step numbers of `forgeline.train.grpo`):

4. Group-relative advantages. A step samples `tasks_per_step` tasks and G episodes of each (a
   group). Each episode's scalar reward is its return r (process + terminal rewards); its
   advantage is relative to the other episodes of its group (`group_advantages`):
   - std  (GRPO, DAPO):  A_i = (r_i - mean(r)) / (std(r) + eps), std the sample std (n - 1);
   - mean (Dr. GRPO):    A_i = r_i - mean(r);
   - loo  (RLOO):        A_i = r_i - mean of the other n - 1 = n / (n - 1) (r_i - mean(r)).
   A group whose kept episodes all got the same reward (or fewer than two kept) has no signal:
   it is dropped and counted (DAPO's dynamic sampling re-samples to fill the batch; here the
   step trains on what is left). Every action token of an episode carries its advantage.
5. Old log-probs (adapter on) and reference log-probs (adapter disabled = the base policy).
6. `epochs` passes over `minibatches` minibatches of the clipped surrogate with an asymmetric
   clip (DAPO's clip-higher: the ratio clipped to [1 - eps_low, 1 + eps_high]) and token-level
   normalisation (the sum over every action token of the minibatch / their number, so a long
   episode weighs by its tokens, not as one sequence), + kl_coef * KL to the base (k3).

As in `forgeline.train.ppo_update`: one episode per forward (each seeded by (step, pass,
episode) so LoRA dropout does not depend on the batch); every loss is divided by the token
count of the WHOLE minibatch, so all-reduced (summed) gradients are the single-process ones.
"""
from __future__ import annotations

import math
import time
from typing import Any, Mapping, Sequence

from forgeline.params import GRPOConfig
from forgeline.seeds import derive_seed
from forgeline.train import rl
from forgeline.train.critic import trainable_parameters
from forgeline.train.distributed import allreduce_, gather
from forgeline.train.ppo_update import minibatches

STD_EPS = 1e-6  # added to a group's std (GRPO's and TRL's epsilon); only nonzero stds reach it

# -- advantages (pure) -------------------------------------------------------------------------


def group_advantages(rewards: Sequence[float], mode: str) -> list[float]:
    """Advantages of one group's episodes from their rewards (see the module docstring; mode
    std | mean | loo). Needs two rewards or more that are not all equal (`has_signal`)."""
    n = len(rewards)
    if not has_signal(rewards):
        raise ValueError(f"a group of {n} rewards with no signal: {list(rewards)}")
    mean = math.fsum(rewards) / n
    centred = [r - mean for r in rewards]
    if mode == "mean":
        return centred
    if mode == "loo":
        return [n / (n - 1) * c for c in centred]
    if mode == "std":
        std = math.sqrt(math.fsum(c * c for c in centred) / (n - 1))
        return [c / (std + STD_EPS) for c in centred]
    raise ValueError(f"advantage mode {mode!r}: expected std, mean or loo")


def has_signal(rewards: Sequence[float]) -> bool:
    """True when a group can teach anything: two rewards or more, not all equal."""
    return len(rewards) >= 2 and max(rewards) != min(rewards)


def assign_advantages(samples: Sequence[Mapping[str, Any]], mode: str
                      ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Group the kept samples (`gate` None) by `group` and give each its advantage.

    Returns (the samples of groups with signal, each a copy with `advantage`, in input order;
    {groups, dropped}: the step's groups (every group with a sample, kept or not) and those
    dropped because their kept episodes' rewards (`ret`) are all equal or fewer than two)."""
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s["group"], [])
        if s["gate"] is None:
            groups[s["group"]].append(i)
    adv: dict[int, float] = {}
    dropped = 0
    for members in groups.values():
        rewards = [float(samples[i]["ret"]) for i in members]
        if not has_signal(rewards):
            dropped += 1
            continue
        adv.update(zip(members, group_advantages(rewards, mode)))
    out = [{**s, "advantage": adv[i]} for i, s in enumerate(samples) if i in adv]
    return out, {"groups": len(groups), "dropped": dropped}


# -- the loss (pure) ---------------------------------------------------------------------------


def grpo_loss(logprobs, old_logprobs, advantages, clip_low: float, clip_high: float,
              count: float | None = None):
    """The clipped surrogate with an asymmetric clip, token-level, to minimise:

        ratio = exp(logp - logp_old)
        loss  = sum over tokens of max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)) / count

    Inputs [T] per action token (an episode's advantage repeated on its tokens); count = the
    minibatch's action tokens (default T). Returns (loss, clip fraction = share of tokens where
    the clipped term is the larger, approx KL(old || new) = mean(logp_old - logp)), the last two
    detached and divided by the same count."""
    import torch

    ones = torch.ones_like(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = rl.masked_mean(torch.maximum(unclipped, clipped), ones, count)
    with torch.no_grad():
        clip_frac = rl.masked_mean((clipped > unclipped).to(logprobs.dtype), ones, count)
        approx_kl = rl.masked_mean(old_logprobs - logprobs, ones, count)
    return loss, clip_frac, approx_kl


# -- the trainer ---------------------------------------------------------------------------------


class GRPOTrainer:
    """The update half of a GRPO step: `update(samples, step)` on samples that carry their
    `advantage` (`assign_advantages`); collective under torchrun (every process passes the same
    samples, each computes its share `index % world`). `temperature`: the sampling temperature
    (the optimised policy is softmax(logits / T), as in `PPOTrainer`)."""

    def __init__(self, actor, cfg: GRPOConfig, seed: int, rank: int = 0, world: int = 1, device=None,
                 temperature: float = 1.0):
        import torch

        if not temperature > 0:
            raise ValueError(f"GRPO needs a sampling temperature > 0, not {temperature}")
        self.actor, self.c, self.seed = actor, cfg, seed
        self.temperature = float(temperature)
        self.rank, self.world = rank, world
        self.device = device or torch.device("cpu")
        self.params = trainable_parameters(actor)
        self.opt = torch.optim.AdamW(self.params, lr=float(cfg.lr), betas=tuple(cfg.betas), eps=1e-8,
                                     weight_decay=float(cfg.weight_decay))

    def state_dict(self) -> dict:
        return {"actor": {n: p.detach().cpu().clone() for n, p in self.actor.named_parameters() if p.requires_grad},
                "actor_opt": self.opt.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        params = dict(self.actor.named_parameters())
        missing = sorted(set(state["actor"]) ^ {n for n, p in params.items() if p.requires_grad})
        if missing:
            raise ValueError(f"checkpoint actor parameters do not match the model: {missing[:5]}")
        with torch.no_grad():
            for name, value in state["actor"].items():
                params[name].copy_(value.to(params[name].device))
        self.opt.load_state_dict(state["actor_opt"])

    def _tensors(self, s: Mapping[str, Any]) -> dict:
        import torch

        acts = rl.action_positions(s["action_mask"])
        ids = torch.tensor(s["tokens"], dtype=torch.long, device=self.device)
        return {"ids": ids[None], "pos": torch.tensor([i - 1 for i in acts], dtype=torch.long, device=self.device),
                "target": ids[acts]}

    def _logits(self, t: Mapping[str, Any]):
        logits = self.actor(input_ids=t["ids"], logits_to_keep=t["pos"]).logits[0]
        return logits if self.temperature == 1.0 else logits / self.temperature

    def _owned(self, items: Sequence[int]) -> list[int]:
        return [i for i in items if i % self.world == self.rank]

    def update(self, samples: Sequence[Mapping[str, Any]], step: int) -> dict[str, Any]:
        """One GRPO update on `samples` (tokens, action_mask, advantage); returns the step's
        statistics {kl (to the base, before the update), clip_frac, approx_kl, policy_loss,
        tokens, action_tokens, time}."""
        import torch

        c = self.c
        t0 = time.perf_counter()
        tensors = [self._tensors(s) for s in samples]
        n = len(samples)
        # 5. old and reference log-probs (eval mode, no gradient)
        self.actor.eval()
        mine: dict[int, Any] = {}
        with torch.no_grad():
            for i in self._owned(range(n)):
                t = tensors[i]
                old = rl.logprobs_from_logits(self._logits(t), t["target"])
                with self.actor.disable_adapter():
                    ref = rl.logprobs_from_logits(self._logits(t), t["target"])
                mine[i] = (old.cpu(), ref.cpu())
        merged: dict[int, Any] = {}
        for part in gather(mine, self.world):
            merged.update(part)
        old_lp = [merged[i][0].to(self.device) for i in range(n)]
        ref_lp = [merged[i][1].to(self.device) for i in range(n)]
        kl = float(torch.cat([rl.kl_estimate(o, f, c.kl_estimator) for o, f in zip(old_lp, ref_lp)]).mean())
        adv = [torch.full_like(old_lp[i], float(s["advantage"])) for i, s in enumerate(samples)]

        # 6. the clipped surrogate, token-level, (+ KL to the base)
        self.actor.train()
        stats = torch.zeros(4, dtype=torch.float64, device=self.device)  # loss, clip frac, approx kl, minibatches
        for epoch in range(int(c.epochs)):
            for mb in minibatches(n, int(c.minibatches), self.seed, step, "grpo", epoch):
                count = float(sum(len(tensors[i]["pos"]) for i in mb))
                self.opt.zero_grad(set_to_none=True)
                local = torch.zeros(4, dtype=torch.float64, device=self.device)
                for i in self._owned(mb):
                    t = tensors[i]
                    torch.manual_seed(derive_seed(self.seed, "grpo.forward", step, epoch, i))
                    logp = rl.logprobs_from_logits(self._logits(t), t["target"])
                    pg, clip_frac, approx_kl = grpo_loss(logp, old_lp[i], adv[i], float(c.clip_low),
                                                         float(c.clip_high), count)
                    loss = pg
                    if float(c.kl_coef) > 0:
                        loss = loss + float(c.kl_coef) * rl.masked_mean(
                            rl.kl_estimate(logp, ref_lp[i], c.kl_estimator), torch.ones_like(logp), count)
                    loss.backward()
                    local += torch.tensor([float(pg.detach()), float(clip_frac), float(approx_kl), 0.0],
                                          dtype=torch.float64, device=self.device)
                for p in self.params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                allreduce_([p.grad for p in self.params], self.world)
                allreduce_([local], self.world)
                torch.nn.utils.clip_grad_norm_(self.params, float(c.grad_clip))
                self.opt.step()
                local[3] = 1.0
                stats += local
        self.actor.eval()
        m = max(float(stats[3]), 1.0)
        return {"kl": kl, "clip_frac": float(stats[1]) / m, "approx_kl": float(stats[2]) / m,
                "policy_loss": float(stats[0]) / m, "tokens": int(sum(len(s["tokens"]) for s in samples)),
                "action_tokens": int(sum(len(t["pos"]) for t in tensors)),
                "time": {"actor": time.perf_counter() - t0}}
