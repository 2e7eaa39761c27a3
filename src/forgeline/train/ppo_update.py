"""The PPO update: one step's kept episodes in, the actor's and the critic's new weights out.

`PPOTrainer.update` reads as the algorithm does (the step numbers of `forgeline.train.ppo`):

4. old log-probs (adapter on) and reference log-probs (adapter disabled = the base policy) of
   the action tokens, values of the critic; with `kl_mode: penalty` each action token's reward
   gets - kl_coef * k1; GAE (gamma, lam) -> returns;
5. the critic: `critic_updates` passes of the clipped value loss against those returns;
6. GAE again with the UPDATED critic's values -> advantages, whitened over all kept tokens;
7. the actor: `ppo_epochs` passes over `minibatches` minibatches of the clipped surrogate
   (+ kl_coef * mean KL to the base (k3) with `kl_mode: loss`, - entropy_coef * entropy).

The math itself (GAE, the losses, KL estimators) is `forgeline.train.rl`. Episodes are processed
one at a time (micro-batch = one episode; each forward seeded by (step, phase, pass, episode) so
LoRA dropout does not depend on the batch); every loss is divided by the token count of the
WHOLE minibatch, so the sum over episodes and processes is the minibatch loss, and all-reduced
(summed) gradients are the single-process ones (`forgeline.train.distributed`).
"""
from __future__ import annotations

import random
import time
from typing import Any, Mapping, Sequence

from forgeline.params import AdapterConfig, PPOConfig
from forgeline.seeds import derive_seed
from forgeline.train import rl
from forgeline.train.critic import lora_config, trainable_parameters
from forgeline.train.distributed import allreduce_, gather


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
        for part in gather(mine, self.world):
            merged.update(part)
        return [merged[i] for i in range(len(samples))]

    def _allreduce_grads(self, params) -> None:
        import torch
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        allreduce_([p.grad for p in params], self.world)

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
                allreduce_([local], self.world)
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
                allreduce_([local], self.world)
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

