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

Several comparisons on one panel (every policy against the base, and configured pairs such as
GRPO against PPO) are one family: `holm` adjusts their p-values, and the verdicts read the
adjusted ones. Before any number, `minimal_detectable_effect` says how large a gain a panel of n
pairs can detect at all (the original experiment's 38-task panel could not have seen 3 points).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom, binomtest, norm, permutation_test

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


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of one family of tests, in the given order.

    Sorted ascending, the j-th smallest p (j = 0..m-1) becomes (m - j) * p, capped at 1 and made
    non-decreasing along the sorted order; rejecting where the adjusted p < alpha keeps the chance
    of any false "significant" in the family at most alpha, whatever the tests' dependence.
    Equals statsmodels' multipletests(p, method="holm")[1]. One test: its p, unchanged.
    """
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for j, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - j) * float(pvalues[i])))
        adjusted[i] = running
    return adjusted


def _win_thresholds(n: int, alpha: float) -> np.ndarray:
    """For d = 0..n discordant pairs, the fewest wins w (> d/2) whose exact McNemar p < alpha
    (n + 1 where none is enough). With w > d/2 the two-sided p is 2 P(X >= w), X ~ Bin(d, 1/2)."""
    out = np.full(n + 1, n + 1)
    for d in range(1, n + 1):
        wins = np.arange(d // 2 + 1, d + 1)
        ok = wins[2 * binom.sf(wins - 1, d, 0.5) < alpha]
        if ok.size:
            out[d] = ok[0]
    return out


def mcnemar_power(n: int, effect: float, discordance: float, alpha: float = 0.05,
                  thresholds: np.ndarray | None = None) -> float:
    """The chance that the exact McNemar test over n independent pairs says "B better" (p < alpha,
    wins > losses) when B's success rate is `effect` above A's.

    The pairs: without an effect a share `discordance` of them disagree, half each way (two
    equally good policies still split on some tasks); the effect turns a further `effect` of the
    pairs into wins. So each pair is a win with probability discordance/2 + effect, a loss with
    discordance/2, a tie otherwise. Exact: over d ~ Bin(n, discordance + effect) discordant pairs,
    wins | d ~ Bin(d, q), q = wins' share of the discordant probability.
    """
    if not 0 <= discordance < 1 or not 0 <= effect <= 1 - discordance:
        raise ValueError(f"mcnemar_power: need 0 <= discordance < 1 and 0 <= effect <= 1 - discordance "
                         f"(got discordance={discordance}, effect={effect})")
    th = _win_thresholds(n, alpha) if thresholds is None else thresholds
    p_win, p_disc = discordance / 2 + effect, discordance + effect
    if p_disc == 0:
        return 0.0
    d = np.arange(n + 1)
    return float(np.sum(binom.pmf(d, n, p_disc) * binom.sf(th - 1, d, p_win / p_disc)))


def minimal_detectable_effect(n: int, alpha: float = 0.05, power: float = 0.8,
                              discordance: float = 0.15) -> float | None:
    """The smallest gain in success rate (a fraction: 0.31 = 31 points) that the exact McNemar
    test over n pairs detects as "B better" with probability `power` at level `alpha`, under
    mcnemar_power's model; None when not even B winning every pair A failed would be.

    discordance = 0 (B never loses a pair A solved) gives the smallest effect any discordance
    allows: a floor no assumption about the policies can lower. E.g. n = 38, alpha 0.05,
    power 0.8: 0.31 at discordance 0.15, 0.20 at 0.
    """
    if n < 1:
        return None
    th = _win_thresholds(n, alpha)
    top = 1 - discordance
    if mcnemar_power(n, top, discordance, alpha, th) < power:
        return None
    return float(brentq(lambda e: mcnemar_power(n, e, discordance, alpha, th) - power, 0.0, top, xtol=1e-7))


def detectable_effects(n: int, alpha: float, power: float, discordance: float, comparisons: int = 1) -> dict:
    """A panel's minimal detectable effects (fractions of pairs; None: none detectable):
    {pairs, alpha, power, discordance, comparisons, effect (at alpha), effect_floor (discordance 0:
    no assumption can lower it), effect_holm (at alpha / comparisons, the first and strictest step
    of Holm; None for one comparison)}."""
    return {"pairs": n, "alpha": alpha, "power": power, "discordance": discordance, "comparisons": comparisons,
            "effect": minimal_detectable_effect(n, alpha, power, discordance),
            "effect_floor": minimal_detectable_effect(n, alpha, power, 0.0),
            "effect_holm": (minimal_detectable_effect(n, alpha / comparisons, power, discordance)
                            if comparisons > 1 else None)}


def _points(effect: float | None) -> str:
    return "none" if effect is None else f"{100 * effect:.1f} points"


def detectable_effect_sentence(mde: Mapping[str, Any]) -> str:
    """detectable_effects as the sentence read before a panel's numbers: "38 pairs, 80% power,
    alpha 0.05: the smallest gain the exact McNemar test detects is 31.0 points (if 15% of pairs
    disagree without an effect; 20.0 points even if the policy never lost a pair). A smaller true
    gain will most likely read as no significant difference."
    """
    head = f"{mde['pairs']} pairs, {mde['power']:.0%} power, alpha {mde['alpha']:g}: "
    if mde["effect_floor"] is None:
        return head + ("no gain is detectable: too few pairs for p < alpha even if the policy won every one. "
                       "Any result here will read as no significant difference.")
    text = (head + f"the smallest gain the exact McNemar test detects is {_points(mde['effect'])} (if "
            f"{mde['discordance']:.0%} of pairs disagree without an effect; {_points(mde['effect_floor'])} even if "
            f"the policy never lost a pair)")
    if mde.get("comparisons", 1) > 1:
        text += f"; at Holm's first step (alpha/{mde['comparisons']}) {_points(mde['effect_holm'])}"
    return text + ". A smaller true gain will most likely read as no significant difference."


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


def p_text(p: float) -> str:
    ps = format_p(p)
    return f"p{ps}" if ps.startswith("<") else f"p={ps}"


def significant(p: float, alpha: float, up: float) -> bool:
    """p below alpha and a direction: `up` > 0 means B ahead, < 0 behind, 0 level (never
    significant, whatever p)."""
    return p < alpha and up != 0


def _clause(other: str, p: float, alpha: float, up: float, counts: str, p_holm: float | None = None) -> str:
    """"ppo better, p=0.002 (counts)" / "no significant difference (p=0.25; counts)"; with
    `p_holm` (several comparisons) the adjusted p decides and the raw one stands beside it:
    "ppo better, Holm p=0.006 (raw p=0.002; counts)"."""
    decides = p if p_holm is None else p_holm
    shown = p_text(p) if p_holm is None else f"Holm {p_text(p_holm)}, raw {p_text(p)}"
    if not significant(decides, alpha, up):
        return f"no significant difference ({shown}; {counts})"
    if p_holm is not None:
        return f"{other} {'better' if up > 0 else 'worse'}, Holm {p_text(p_holm)} (raw {p_text(p)}; {counts})"
    return f"{other} {'better' if up > 0 else 'worse'}, {shown} ({counts})"


def counts_text(wins: int, ties: int, losses: int) -> str:
    """"3 wins, 32 ties, 1 loss"."""
    return f"{wins} win{'s' * (wins != 1)}, {ties} tie{'s' * (ties != 1)}, {losses} loss{'es' * (losses != 1)}"


def verdict(other: str, base: str, wins: int, ties: int, losses: int, p: float,
            alpha: float = 0.05, task: Mapping[str, float | int] | None = None,
            p_holm: float | None = None, task_p_holm: float | None = None) -> str:
    """One plain-language sentence for B (`other`) against A (`base`).

    "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)" when p >= alpha,
    else "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)" (or "worse"). With
    `task` (task_level_test's result: several seeds per task) it answers both questions, on these
    tasks (McNemar over the pairs) and over tasks as a sample (the task-level test): "ppo vs base
    on these 3 tasks (McNemar over 24 pairs): ppo better, p<0.001 (24 wins, 0 ties, 0 losses);
    over tasks as a sample (task-level sign flip): no significant difference (p=0.25; 3 up,
    0 same, 0 down)". With `p_holm` / `task_p_holm` (the panel reports several comparisons) the
    Holm-adjusted p decides and both are printed: "ppo better, Holm p=0.004 (raw p=0.002; ...)".
    """
    counts = counts_text(wins, ties, losses)
    pairs = _clause(other, p, alpha, wins - losses, counts, p_holm)
    if task is None:
        return f"{other} vs {base}: {pairs}"
    over = _clause(other, float(task["p"]), alpha, float(task["mean_diff"]),
                   f"{task['up']} up, {task['same']} same, {task['down']} down", task_p_holm)
    return (f"{other} vs {base} on these {task['tasks']} tasks (McNemar over {wins + ties + losses} pairs): "
            f"{pairs}; over tasks as a sample (task-level sign flip): {over}")


def success_summary(resolved: Sequence[bool], confidence: float = 0.95) -> dict[str, float | int]:
    """{n, resolved, success_rate, ci_low, ci_high} of one policy's per-pair results
    (success_rate in [0, 1]; the Wilson interval at `confidence`)."""
    n, k = len(resolved), sum(bool(r) for r in resolved)
    lo, hi = wilson_interval(k, n, confidence)
    return {"n": n, "resolved": k, "success_rate": k / n if n else 0.0, "ci_low": lo, "ci_high": hi}
