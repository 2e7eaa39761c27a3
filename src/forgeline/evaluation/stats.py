"""Statistics of a paired evaluation (pure: plain data in, plain data out).

Two policies A (the base) and B are run on the same (task, seed) pairs; each pair gives two
booleans (resolved by A, resolved by B). The pairs where they disagree carry all the evidence
about which is better: B's wins (B resolved, A did not) and losses (A resolved, B did not).
Under the null hypothesis (no difference) each discordant pair is a win with probability 1/2,
so the exact McNemar test is the two-sided binomial test of `wins` successes in
`wins + losses` trials at p = 1/2 (scipy.stats.binomtest). Ties say nothing about the difference.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from scipy.stats import binomtest, norm


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


def verdict(other: str, base: str, wins: int, ties: int, losses: int, p: float,
            alpha: float = 0.05) -> str:
    """One plain-language sentence for B (`other`) against A (`base`).

    "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)" when p >= alpha,
    else "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)" (or "worse").
    """
    counts = f"{wins} win{'s' * (wins != 1)}, {ties} tie{'s' * (ties != 1)}, {losses} loss{'es' * (losses != 1)}"
    ps = format_p(p)
    p_text = f"p{ps}" if ps.startswith("<") else f"p={ps}"
    if p >= alpha or wins == losses:
        return f"{other} vs {base}: no significant difference ({p_text}; {counts})"
    direction = "better" if wins > losses else "worse"
    return f"{other} vs {base}: {other} {direction}, {p_text} ({counts})"


def success_summary(resolved: Sequence[bool], confidence: float = 0.95) -> dict[str, float | int]:
    """{n, resolved, success_rate, ci_low, ci_high} of one policy's per-pair results
    (success_rate in [0, 1]; the Wilson interval at `confidence`)."""
    n, k = len(resolved), sum(bool(r) for r in resolved)
    lo, hi = wilson_interval(k, n, confidence)
    return {"n": n, "resolved": k, "success_rate": k / n if n else 0.0, "ci_low": lo, "ci_high": hi}
