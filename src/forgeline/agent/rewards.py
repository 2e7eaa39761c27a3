"""Rewards of an agent episode: pure functions of the episode record (a plain dict).

Two kinds of terminal reward (`reward.kind`):

- `terminal`: 1.0 if the episode's outcome is `resolved`, else 0.0.
- `shaped` (SWE-Master's shaping by termination type): `success` (params.yaml: +1.0) when
  resolved, `timeout` (-0.5) for the outcomes listed in `timeout_outcomes` (timeout and
  context_exceeded), `failure` (-0.2) for every other outcome (failed, step_limit, invalid),
  then minus the step penalty min(steps * step_penalty_per_step, step_penalty_cap)
  (0.01 a step, capped at 0.3: SWE-Master's min(steps/100, 0.3)), for every outcome.

Process rewards: every assistant turn carries labels (`well_formed_call`, `command_ran`,
`no_error`, `tests_improved`), each True, False or None. A turn's process reward is
sum(weight[label] * s) with s = +1 for True, -1 for False, 0 for None (not applicable), so a
good step earns a little, a bad one costs a little, and an unlabelled one is neutral. The
weights (`process_weights`) are small next to the terminal reward; `process_weight` scales
them all in the returns (0 turns them off).

A step's reward in `step_rewards` = process_weight * its process reward, plus the terminal
reward on the last step. `token_rewards` puts each step's reward on the last generated token of
its turn (what a token-level PPO/GAE consumes); every other token gets 0.

`cfg` is the config's `agent.reward` (forgeline.params.RewardConfig).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from forgeline.params import ProcessWeightsConfig, RewardConfig

OUTCOMES = ("resolved", "failed", "timeout", "context_exceeded", "invalid", "step_limit")
LABELS = ("well_formed_call", "command_ran", "no_error", "tests_improved")

def _outcome(episode: Mapping[str, Any]) -> str:
    outcome = episode.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"episode {episode.get('instance_id')!r}: outcome {outcome!r} is not one "
                         f"of {', '.join(OUTCOMES)}")
    return outcome


def _steps(episode: Mapping[str, Any]) -> int:
    stats = episode.get("stats") or {}
    return int(stats.get("steps", len(episode.get("turns") or ())))


def terminal_reward(episode: Mapping[str, Any], cfg: RewardConfig | None = None) -> float:
    """1.0 if the episode's outcome is `resolved`, else 0.0 (cfg unused, kept for symmetry)."""
    return 1.0 if _outcome(episode) == "resolved" else 0.0


def step_penalty(steps: int, cfg: RewardConfig) -> float:
    """min(steps * step_penalty_per_step, step_penalty_cap), >= 0 (steps = assistant turns)."""
    return min(max(steps, 0) * float(cfg.step_penalty_per_step), float(cfg.step_penalty_cap))


def shaped_reward(episode: Mapping[str, Any], cfg: RewardConfig) -> float:
    """SWE-Master shaping: success / timeout / failure value by outcome, minus the step penalty."""
    outcome = _outcome(episode)
    if outcome == "resolved":
        base = float(cfg.success)
    elif outcome in cfg.timeout_outcomes:
        base = float(cfg.timeout)
    else:
        base = float(cfg.failure)
    return base - step_penalty(_steps(episode), cfg)


def outcome_reward(episode: Mapping[str, Any], cfg: RewardConfig) -> float:
    """The terminal reward of `reward.kind`: `terminal` or `shaped`."""
    if cfg.kind == "terminal":
        return terminal_reward(episode, cfg)
    if cfg.kind == "shaped":
        return shaped_reward(episode, cfg)
    raise ValueError(f"reward.kind={cfg.kind!r}: expected 'terminal' or 'shaped'")


def process_reward(labels: Mapping[str, bool | None], weights: ProcessWeightsConfig) -> float:
    """sum(weight * (+1 True, -1 False, 0 None)) over the labeled kinds (LABELS)."""
    total = 0.0
    for name in sorted(LABELS):
        weight = getattr(weights, name)
        value = labels.get(name)
        if value is True:
            total += float(weight)
        elif value is False:
            total -= float(weight)
    return round(total, 10)


def step_rewards(episode: Mapping[str, Any], cfg: RewardConfig) -> list[float]:
    """One reward per assistant turn: process_weight * process reward (recomputed from the
    turn's labels with cfg's weights), plus the terminal reward on the last turn. An episode
    with no turn gives []."""
    turns: Sequence[Mapping[str, Any]] = episode.get("turns") or ()
    rewards = [float(cfg.process_weight) * process_reward(t.get("labels") or {}, cfg.process_weights)
               for t in turns]
    if rewards:
        rewards[-1] += outcome_reward(episode, cfg)
    return rewards


def episode_return(episode: Mapping[str, Any], cfg: RewardConfig) -> float:
    """The undiscounted return: terminal reward + process_weight * sum of process rewards."""
    rewards = step_rewards(episode, cfg)
    return sum(rewards) if rewards else outcome_reward(episode, cfg)


def token_rewards(episode: Mapping[str, Any], cfg: RewardConfig) -> list[float]:
    """Rewards aligned with `episode["tokens"]`: each turn's step reward on the last token of
    its generated span (`turns[i]["span"]` = [start, end) into tokens), 0 elsewhere."""
    out = [0.0] * len(episode.get("tokens") or ())
    for turn, reward in zip(episode.get("turns") or (), step_rewards(episode, cfg)):
        start, end = turn["span"]
        if end > start:
            out[end - 1] += reward
    return out


def summarize(episodes: Sequence[Mapping[str, Any]], cfg: RewardConfig) -> dict:
    """Counts per outcome, resolved rate, mean return and mean steps of a set of episodes."""
    counts = {o: 0 for o in OUTCOMES}
    for ep in episodes:
        counts[_outcome(ep)] += 1
    n = len(episodes)
    return {
        "episodes": n,
        "outcomes": counts,
        "resolved_rate": counts["resolved"] / n if n else 0.0,
        "mean_return": sum(episode_return(ep, cfg) for ep in episodes) / n if n else 0.0,
        "mean_steps": sum(_steps(ep) for ep in episodes) / n if n else 0.0,
    }
