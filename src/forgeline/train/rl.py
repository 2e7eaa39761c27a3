"""The math of critic training and PPO, pure: tensors in, tensors (or floats) out; no I/O.

Every quantity lives on the ACTION tokens of an episode record (`action_mask` = 1: the tokens
the policy generated). Conventions shared by the critic and PPO stages:

- Position. An action token at index i of `tokens` is predicted from the prefix tokens[:i], so
  its logprob, its entropy and the value of the state it is taken in are all read at the
  model's output position i - 1 (`action_positions`).
- Time. GAE runs over the action tokens in order, across turns: the step after the last token
  of turn k is the first token of turn k+1 (the tool output in between is the environment's
  transition, no decision is made there). The last action token is terminal (next value 0).
- Rewards. `forgeline.agent.rewards.token_rewards` puts each turn's reward (process reward,
  plus the terminal reward on the last turn) on the last generated token of the turn; every
  other token gets 0. Rewards on non-action tokens are an error (they would be skipped).

Tensors are [B, T] (a batch of padded sequences, `mask` marking the action tokens) or [T].
"""
from __future__ import annotations

import math
from typing import Sequence

import torch


def action_positions(action_mask: Sequence[int]) -> list[int]:
    """Indices i >= 1 with action_mask[i] == 1 (the first token has no prefix to predict it
    from; an episode never starts with a generated token)."""
    return [i for i, m in enumerate(action_mask) if m and i > 0]


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(x * mask) (a 0-dim tensor)."""
    return (x * mask).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, count: float | torch.Tensor | None = None) -> torch.Tensor:
    """sum(x * mask) / count, count = mask.sum() unless given. Passing the GLOBAL count of a
    minibatch split over episodes or processes makes the per-part losses add up to the loss
    of the whole (so summed gradients equal the single-batch gradient)."""
    n = mask.sum() if count is None else count
    return (x * mask).sum() / max(float(n), 1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of the masked entries (0 for fewer than one entry)."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked (action) positions of each row.

    Inputs [B, T] (or [T]): rewards r_t, values V(s_t), mask (1 = action token). Positions with
    mask 0 are skipped: the recursion carries over them unchanged, so the action tokens of a
    row form one trajectory. For consecutive action tokens t < t' (t' = next one, none = end):

        delta_t = r_t + gamma * V(s_t') - V(s_t)       (V after the last one = 0)
        A_t     = delta_t + gamma * lam * A_t'

    Returns (advantages, returns = advantages + values), both 0 where mask is 0.
    """
    squeeze = rewards.dim() == 1
    if squeeze:
        rewards, values, mask = rewards[None], values[None], mask[None]
    mask = mask.to(rewards.dtype)
    if bool(((rewards != 0) & (mask == 0)).any()):
        raise ValueError("a reward on a non-action token: rewards must sit on action tokens")
    b, t_len = rewards.shape
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    next_adv = torch.zeros_like(next_value)
    for t in range(t_len - 1, -1, -1):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        adv[:, t] = a_t * m
        # carried over non-action positions: the next action token's value and advantage
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, a_t, next_adv)
    returns = adv + values * mask
    if squeeze:
        return adv[0], returns[0]
    return adv, returns


def lambda_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float,
                   values: torch.Tensor | None = None) -> torch.Tensor:
    """The lambda-return G^lam_t = r_t + gamma * ((1 - lam) V(s_t') + lam G^lam_t') over the
    action tokens (= GAE advantage + value). Without `values` (offline critic targets, no critic
    yet) V = 0, so it is the return discounted by gamma * lam; gamma = lam = 1 gives the plain
    reward-to-go (sum of the rewards from t to the end)."""
    if values is None:
        values = torch.zeros_like(rewards)
    return gae(rewards, values, mask, gamma, lam)[1]


def masked_moments(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[count, sum, sum of squares] of the masked entries (float64): what processes all-reduce
    to whiten over the global batch."""
    m = mask.to(torch.float64)
    xd = x.to(torch.float64)
    return torch.stack([m.sum(), (xd * m).sum(), (xd * xd * m).sum()])


def whiten(x: torch.Tensor, mask: torch.Tensor, moments: torch.Tensor | None = None,
           shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (population std), 0 where mask is 0.
    `moments` = masked_moments over a larger (global) batch, to whiten by its statistics;
    shift_mean=False keeps the mean (scales only)."""
    mom = masked_moments(x, mask) if moments is None else moments.to(torch.float64)
    n = max(float(mom[0]), 1.0)
    mean = float(mom[1]) / n
    var = max(float(mom[2]) / n - mean * mean, 0.0)
    out = (x - mean) / math.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def explained_variance(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """1 - Var(target - pred) / Var(target) over the masked entries: 1 = perfect, 0 = no
    better than predicting the mean, < 0 = worse. NaN when Var(target) = 0."""
    if mask is None:
        mask = torch.ones_like(target)
    mask = mask.to(torch.float64)
    pred, target = pred.to(torch.float64), target.to(torch.float64)
    var_y = float(masked_var(target, mask))
    if var_y == 0.0:
        return float("nan")
    return 1.0 - float(masked_var(target - pred, mask)) / var_y


def mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean squared error over the masked entries (float)."""
    if mask is None:
        mask = torch.ones_like(target)
    return float(masked_mean((pred.double() - target.double()) ** 2, mask.double()))


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip_ratio: float, count: float | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, to minimise:

        ratio = exp(logp - logp_old)
        loss  = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))

    Returns (loss, clip fraction = share of tokens where the clipped term is the larger,
    approx KL(old || new) = mean(logp_old - logp)), the last two detached. `count`: see
    masked_mean."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask, count)
    with torch.no_grad():
        clip_frac = masked_mean((clipped > unclipped).to(logprobs.dtype), mask, count)
        approx_kl = masked_mean(old_logprobs - logprobs, mask, count)
    return loss, clip_frac, approx_kl


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, clip: float | None, count: float | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * mean(max((V - R)^2, (V_clip - R)^2)), V_clip = old + clamp(V - old, -clip, clip);
    clip None or <= 0 = the plain 0.5 * MSE. Returns (loss, fraction of tokens where the
    clipped error is the larger, detached)."""
    err = (values - returns) ** 2
    if clip is None or clip <= 0:
        return 0.5 * masked_mean(err, mask, count), torch.zeros((), dtype=values.dtype)
    v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
    err_clip = (v_clip - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clip), mask, count)
    with torch.no_grad():
        frac = masked_mean((err_clip > err).to(values.dtype), mask, count)
    return loss, frac


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's estimators),
    with log r = ref_logprob - logprob:

    - k1 = -log r               (unbiased, can be negative per token)
    - k2 = 0.5 (log r)^2        (biased, >= 0)
    - k3 = r - 1 - log r        (unbiased, >= 0, 0 iff equal)
    """
    log_r = ref_logprobs - logprobs
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r ** 2
    if kind == "k3":
        # expm1 is exact near 0; the clamp removes rounding below 0 (k3 >= 0 by convexity)
        return torch.clamp(torch.expm1(log_r) - log_r, min=0.0)
    raise ValueError(f"kl estimator {kind!r}: expected k1, k2 or k3")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) along the last axis: logsumexp(z) - sum(p z)."""
    logits = logits.float()
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] along the last axis (float32)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
