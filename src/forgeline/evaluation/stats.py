"""Statistics of a paired evaluation (pure: plain data in, plain data out).

Two policies A (the base) and B are run on the same (task, seed) pairs; each pair gives two
booleans (resolved by A, resolved by B). The pairs where they disagree carry all the evidence
about which is better: B's wins (B resolved, A did not) and losses (A resolved, B did not).
Under the null hypothesis (no difference) each discordant pair is a win with probability 1/2,
so the exact McNemar test is the two-sided binomial test of `wins` successes in
`wins + losses` trials at p = 1/2 (scipy.stats.binomtest). Ties say nothing about the difference.

With several seeds per task the two tests answer two questions:
- on THESE tasks (e.g. PPO's own train pool: did training raise success on them?), the pairs are
  the samples. Given the tasks, episodes with different seeds are independent draws, and under
  "B and A resolve each task equally often" a discordant pair is a win or a loss with
  probability 1/2, independently: the exact McNemar test is valid over every (task, seed) pair;
- over tasks as a sample of a population (would it carry over to other tasks like these?), the
  pairs of one task are not independent and McNemar's p is optimistic. `task_level_test` takes the
  task as the unit: each task's success rate under B minus under A, and the exact paired
  permutation (sign-flip) test of their mean over tasks.
The verdict states both; neither is hidden behind the other.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy.stats import binomtest, norm, permutation_test

EXACT_TASKS = 16        # up to 2**16 sign patterns the task-level test enumerates them all


def paired_outcomes(base: Mapping[object, bool], other: Mapping[object, bool]) -> dict[str, int]:
    """Wins / ties / losses of `other` (B) against `base` (A) over the same keys.

    Inputs: {pair key: resolved} for each policy, with identical key sets (a pair key is e.g.
    (instance_id, seed)). Output: {"wins": B resolved and A not, "losses": A resolved and B not,
    "ties": both resolved or both not, "both": both resolved, "neither": neither resolved}.
    """
    if set(base) != set(other):
        missing, extra = sorted(map(str, set(base) - set(other))), sorted(map(str, set(other) - set(base)))
        raise ValueError(f"not paired: {len(missing)} pair(s) only in the base (e.g. {missing[:3]}), "
                         f"{len(extra)} only in the other (e.g. {extra[:3]})")
    wins = sum(bool(other[k]) and not bool(base[k]) for k in base)
    losses = sum(bool(base[k]) and not bool(other[k]) for k in base)
    both = sum(bool(base[k]) and bool(other[k]) for k in base)
    return {"wins": wins, "ties": len(base) - wins - losses, "losses": losses,
            "both": both, "neither": len(base) - wins - losses - both}


def mcnemar_exact_p(wins: int, losses: int) -> float:
    """Exact (binomial) McNemar p-value, two-sided: binomtest(wins, wins + losses, 0.5).

    Inputs: the discordant pair counts. Output: p in [0, 1]; 1.0 when there is no discordant
    pair (no evidence either way). E.g. 3 wins / 3 losses -> 1.0; 10 / 0 -> 2 * 0.5**10.
    """
    if wins < 0 or losses < 0:
        raise ValueError(f"mcnemar_exact_p({wins}, {losses}): counts must be >= 0")
    if wins + losses == 0:
        return 1.0
    # scipy's two-sided p can exceed 1 by rounding for a symmetric split: clip it
    return min(1.0, float(binomtest(wins, wins + losses, 0.5, alternative="two-sided").pvalue))


def task_level_test(base: Mapping[tuple, bool], other: Mapping[tuple, bool]) -> dict[str, float | int] | None:
    """The task-level paired test of B (`other`) against A (`base`), or None when every task has
    one pair (then McNemar's pairs are the tasks and it is the test).

    Inputs: {(instance_id, seed): resolved} for each policy, the same keys. Per task, d = B's
    success rate over its seeds minus A's. Under the null hypothesis (no difference) each d is as
    likely as -d, so the two-sided p is the share of the 2**n sign flips whose |mean d| is at
    least the observed one (exact for n <= EXACT_TASKS, else 100,000 seeded flips). Output:
    {tasks, up (d > 0), same, down, mean_diff, p}. E.g. 9 tasks all up by the same amount ->
    p = 2 / 2**9.
    """
    paired_outcomes(base, other)  # the same keys, or a clear error
    tasks = sorted({key[0] for key in base})
    if len(tasks) == len(base):
        return None
    rate = lambda res, t: float(np.mean([res[k] for k in base if k[0] == t]))
    a = np.array([rate(base, t) for t in tasks])
    b = np.array([rate(other, t) for t in tasks])
    d = b - a
    if not d.any():
        p = 1.0
    else:
        exact = len(tasks) <= EXACT_TASKS
        res = permutation_test((a, b), lambda x, y, axis: np.mean(y - x, axis=axis), vectorized=True,
                               permutation_type="samples", alternative="two-sided",
                               n_resamples=np.inf if exact else 100_000, rng=np.random.default_rng(0))
        p = min(1.0, float(res.pvalue))
    return {"tasks": len(tasks), "up": int((d > 0).sum()), "same": int((d == 0).sum()),
            "down": int((d < 0).sum()), "mean_diff": float(d.mean()), "p": p}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a success rate successes/n.

    With p = successes/n and z the (1 + confidence)/2 normal quantile:
        centre = (p + z^2 / (2n)) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
    Output: (centre - half, centre + half), clipped to [0, 1]; (0.0, 1.0) when n = 0.
    Unlike the normal (Wald) interval it stays inside [0, 1] and is not empty at 0/n or n/n;
    it equals scipy.stats.binomtest(successes, n).proportion_ci(method="wilson").
    """
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval({successes}, {n}): need 0 <= successes <= n")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: expected 0 < confidence < 1")
    if n == 0:
        return (0.0, 1.0)
    z = float(norm.ppf((1 + confidence) / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at 0/n and n/n the bound is exactly 0 or 1 (the formula gives it up to rounding)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean; None for no values (never a silent 0)."""
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or the base is 0 (no meaningful ratio)."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def format_p(p: float) -> str:
    """A p-value for prose: two decimals from 0.01 up (1.00, 0.03), three below, `<0.001`."""
    if p >= 0.01:
        return f"{p:.2f}"
    if p >= 0.001:
        return f"{p:.3f}"
    return "<0.001"


def _p_text(p: float) -> str:
    ps = format_p(p)
    return f"p{ps}" if ps.startswith("<") else f"p={ps}"


def significant(p: float, alpha: float, up: float) -> bool:
    """p below alpha and a direction: `up` > 0 means B ahead, < 0 behind, 0 level (never
    significant, whatever p)."""
    return p < alpha and up != 0


def _clause(other: str, p: float, alpha: float, up: float, counts: str) -> str:
    """"ppo better, p=0.002 (counts)" / "no significant difference (p=0.25; counts)"."""
    if not significant(p, alpha, up):
        return f"no significant difference ({_p_text(p)}; {counts})"
    return f"{other} {'better' if up > 0 else 'worse'}, {_p_text(p)} ({counts})"


def verdict(other: str, base: str, wins: int, ties: int, losses: int, p: float,
            alpha: float = 0.05, task: Mapping[str, float | int] | None = None) -> str:
    """One plain-language sentence for B (`other`) against A (`base`).

    "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)" when p >= alpha,
    else "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)" (or "worse"). With
    `task` (task_level_test's result: several seeds per task) it answers both questions, on these
    tasks (McNemar over the pairs) and over tasks as a sample (the task-level test): "ppo vs base
    on these 3 tasks (McNemar over 24 pairs): ppo better, p<0.001 (24 wins, 0 ties, 0 losses);
    over tasks as a sample (task-level sign flip): no significant difference (p=0.25; 3 up,
    0 same, 0 down)".
    """
    counts = f"{wins} win{'s' * (wins != 1)}, {ties} tie{'s' * (ties != 1)}, {losses} loss{'es' * (losses != 1)}"
    pairs = _clause(other, p, alpha, wins - losses, counts)
    if task is None:
        return f"{other} vs {base}: {pairs}"
    over = _clause(other, float(task["p"]), alpha, float(task["mean_diff"]),
                   f"{task['up']} up, {task['same']} same, {task['down']} down")
    return (f"{other} vs {base} on these {task['tasks']} tasks (McNemar over {wins + ties + losses} pairs): "
            f"{pairs}; over tasks as a sample (task-level sign flip): {over}")


def success_summary(resolved: Sequence[bool], confidence: float = 0.95) -> dict[str, float | int]:
    """{n, resolved, success_rate, ci_low, ci_high} of one policy's per-pair results
    (success_rate in [0, 1]; the Wilson interval at `confidence`)."""
    n, k = len(resolved), sum(bool(r) for r in resolved)
    lo, hi = wilson_interval(k, n, confidence)
    return {"n": n, "resolved": k, "success_rate": k / n if n else 0.0, "ci_low": lo, "ci_high": hi}
