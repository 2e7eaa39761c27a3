"""Paired-evaluation statistics: the original experiment's known values, small p, intervals, ratios."""
from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from forgeline import config
from forgeline.evaluation import stats as st
from forgeline.evaluation.evaluate import episode_seeds

from embedded import PARAMS


def paired(wins: int, ties: int, losses: int, both: int = 0) -> tuple[dict, dict]:
    """Per-pair booleans (base, other) with the given counts; `both` of the ties resolved by both."""
    base, other, i = {}, {}, 0
    for a, b, n in ((False, True, wins), (True, False, losses), (True, True, both), (False, False, ties - both)):
        for _ in range(n):
            base[("t", i)], other[("t", i)] = a, b
            i += 1
    return base, other


@pytest.mark.parametrize("wins,ties,losses", [(3, 32, 3), (2, 23, 2)])
def test_original_experiment_tables_give_p_one(wins, ties, losses):
    base, other = paired(wins, ties, losses, both=1)
    counts = st.paired_outcomes(base, other)
    assert (counts["wins"], counts["ties"], counts["losses"]) == (wins, ties, losses)
    assert counts["both"] == 1 and counts["neither"] == ties - 1
    p = st.mcnemar_exact_p(counts["wins"], counts["losses"])
    assert p == 1.0
    sentence = st.verdict("ppo", "base", wins, ties, losses, p)
    assert sentence == f"ppo vs base: no significant difference (p=1.00; {wins} wins, {ties} ties, {losses} losses)"


def test_small_p_values_are_exact():
    assert st.mcnemar_exact_p(10, 0) == pytest.approx(2 * 0.5 ** 10, rel=1e-12) == pytest.approx(0.001953125)
    assert st.mcnemar_exact_p(0, 10) == st.mcnemar_exact_p(10, 0)  # two-sided: symmetric
    # 7 / 1: P(X <= 1) + P(X >= 7) for X ~ Bin(8, 1/2) = 2 * (1 + 8) / 256
    assert st.mcnemar_exact_p(7, 1) == pytest.approx(18 / 256)
    # 12 / 2: 2 * (1 + 14 + 91) / 2**14
    assert st.mcnemar_exact_p(12, 2) == pytest.approx(2 * (1 + 14 + 91) / 2 ** 14)
    assert st.mcnemar_exact_p(0, 0) == 1.0 and st.mcnemar_exact_p(4, 4) == 1.0
    for w, l in ((5, 1), (20, 9), (1, 30)):
        assert st.mcnemar_exact_p(w, l) == pytest.approx(binomtest(w, w + l, 0.5).pvalue)
    with pytest.raises(ValueError):
        st.mcnemar_exact_p(-1, 2)
    assert st.verdict("ppo", "base", 10, 5, 0, st.mcnemar_exact_p(10, 0)) == \
        "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)"
    assert st.verdict("ppo", "base", 0, 0, 12, st.mcnemar_exact_p(0, 12)) == \
        "ppo vs base: ppo worse, p<0.001 (0 wins, 0 ties, 12 losses)"
    assert st.verdict("a", "b", 1, 1, 0, 1.0) == "a vs b: no significant difference (p=1.00; 1 win, 1 tie, 0 losses)"
    # alpha decides: p = 0.0703 is significant at 0.1, not at 0.05
    assert "no significant" in st.verdict("a", "b", 7, 0, 1, 18 / 256)
    assert "a better, p=0.07" in st.verdict("a", "b", 7, 0, 1, 18 / 256, alpha=0.1)


def test_unpaired_results_are_refused():
    with pytest.raises(ValueError, match="not paired"):
        st.paired_outcomes({("a", 0): True, ("b", 0): False}, {("a", 0): True, ("c", 0): False})


def test_wilson_interval_matches_scipy_and_is_sane():
    for k, n in ((0, 10), (3, 38), (5, 9), (10, 10), (1, 1), (19, 40)):
        lo, hi = st.wilson_interval(k, n)
        ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert st.wilson_interval(0, 10)[0] == 0.0 and st.wilson_interval(10, 10)[1] == 1.0
    assert st.wilson_interval(0, 0) == (0.0, 1.0)
    # wider at a higher level, narrower with more data
    assert st.wilson_interval(5, 20, 0.99)[0] < st.wilson_interval(5, 20, 0.95)[0]
    w = lambda k, n: st.wilson_interval(k, n)[1] - st.wilson_interval(k, n)[0]  # noqa: E731
    assert w(50, 200) < w(5, 20)
    # the textbook value: 3/38 -> centre (p + z^2/2n) / (1 + z^2/n)
    z = 1.959963984540054
    p, n = 3 / 38, 38
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    lo, hi = st.wilson_interval(3, 38)
    assert (lo + hi) / 2 == pytest.approx(centre)
    for bad in ((5, 4), (-1, 4)):
        with pytest.raises(ValueError):
            st.wilson_interval(*bad)
    s = st.success_summary([True, False, False, True])
    assert s["n"] == 4 and s["resolved"] == 2 and s["success_rate"] == 0.5 and s["ci_low"] < 0.5 < s["ci_high"]


def test_means_ratios_and_p_text():
    assert st.mean([1, 2, 3, None]) == 2.0 and st.mean([]) is None
    assert st.ratio(3.0, 2.0) == 1.5 and st.ratio(1.0, 0.0) is None and st.ratio(None, 2.0) is None
    assert [st.format_p(p) for p in (1.0, 0.034, 0.0099, 0.00049)] == ["1.00", "0.03", "0.010", "<0.001"]
    assert math.isclose(st.ratio(850.0, 1000.0), 0.85)


def test_evaluation_config_checks():
    c = config.merged(PARAMS.evaluation, {"k": 2, "seeds": [3, 4], "k_per_panel": {"train": 2}})
    assert c.k == 2 and c.base == "base" and c.alpha == 0.05
    for bad, why in (({"k": 0}, "k: 0 is less than the minimum of 1"),
                     ({"k": 2, "seeds": [1]}, "1 seeds for k=2"),
                     ({"alpha": 1.5}, "alpha: 1.5 is greater than or equal to the maximum of 1"),
                     ({"bogus": 1}, "unknown key 'bogus'"),
                     ({"k_per_panel": {"train": 0}}, "k_per_panel.train: 0 is less than the minimum of 1"),
                     ({"k": 2, "seeds": [3, 4], "k_per_panel": {"train": 8}},
                      "train=8 with explicit evaluation.seeds")):
        with pytest.raises(config.ConfigError, match=why):
            config.merged(PARAMS.evaluation, bad)


def test_panel_k_extends_the_shared_seeds():
    """A panel with its own k gets more samples per task; its first seeds are every other
    panel's, so the k = 1 protocol stays a prefix of it."""
    ev = config.merged(PARAMS.evaluation, {"k": 1, "k_per_panel": {"train": 4}})
    train, heldout = episode_seeds(ev, 1234, "train"), episode_seeds(ev, 1234, "heldout")
    assert len(train) == 4 == len(set(train)) and len(heldout) == 1 and train[0] == heldout[0]
    assert episode_seeds(ev, 1234, None) == heldout


def sign_flip_p(diffs: list[float]) -> float:
    """The two-sided sign-flip p by enumerating every sign pattern (the test's definition)."""
    import itertools
    obs = abs(sum(diffs))
    hits = sum(abs(sum(s * d for s, d in zip(signs, diffs))) >= obs - 1e-12
               for signs in itertools.product((1, -1), repeat=len(diffs)))
    return hits / 2 ** len(diffs)


def test_task_level_test_takes_the_task_as_the_unit():
    # 9 tasks x 2 seeds, all resolved by B and none by A: only 2 of 2**9 sign patterns are as extreme
    base = {(f"t{i}", s): False for i in range(9) for s in (1, 2)}
    other = {k: True for k in base}
    t = st.task_level_test(base, other)
    assert (t["tasks"], t["up"], t["same"], t["down"], t["mean_diff"]) == (9, 9, 0, 0, 1.0)
    assert t["p"] == pytest.approx(2 / 2 ** 9)
    # McNemar over the 18 pairs would claim far more than the 9 tasks can carry
    assert st.mcnemar_exact_p(18, 0) < t["p"] / 100
    # mixed rates against the enumeration: 4 seeds, per-task rates differ by 3/4, 1/4, 0, -1/4, 1/2
    rates = {"a": (0, 3), "b": (1, 2), "c": (2, 2), "d": (2, 1), "e": (0, 2)}  # (base, other) of 4
    base = {(t, s): s < a for t, (a, b) in rates.items() for s in range(4)}
    other = {(t, s): s < b for t, (a, b) in rates.items() for s in range(4)}
    t = st.task_level_test(base, other)
    assert (t["up"], t["same"], t["down"]) == (3, 1, 1)
    assert t["p"] == pytest.approx(sign_flip_p([0.75, 0.25, 0.0, -0.25, 0.5]))
    # no difference at all, and one seed per task (McNemar's pairs are the tasks: no task-level test)
    assert st.task_level_test(base, base)["p"] == 1.0
    assert st.task_level_test({("a", 1): True, ("b", 1): False}, {("a", 1): False, ("b", 1): True}) is None


def test_verdict_with_a_task_level_test_answers_both_questions():
    task = {"tasks": 9, "up": 9, "same": 0, "down": 0, "mean_diff": 1.0, "p": 2 / 2 ** 9}
    assert st.verdict("ppo", "base", 18, 0, 0, st.mcnemar_exact_p(18, 0), 0.05, task) == (
        "ppo vs base on these 9 tasks (McNemar over 18 pairs): ppo better, p<0.001 (18 wins, 0 ties, 0 losses); "
        "over tasks as a sample (task-level sign flip): ppo better, p=0.004 (9 up, 0 same, 0 down)")
    # significant on these tasks, but too few tasks to say anything about tasks as a sample
    few = {"tasks": 3, "up": 3, "same": 0, "down": 0, "mean_diff": 1.0, "p": 0.25}
    assert st.verdict("ppo", "base", 24, 0, 0, st.mcnemar_exact_p(24, 0), 0.05, few) == (
        "ppo vs base on these 3 tasks (McNemar over 24 pairs): ppo better, p<0.001 (24 wins, 0 ties, 0 losses); "
        "over tasks as a sample (task-level sign flip): no significant difference (p=0.25; 3 up, 0 same, 0 down)")
    # worse on the pairs, level over tasks
    level = {"tasks": 4, "up": 1, "same": 2, "down": 1, "mean_diff": 0.0, "p": 1.0}
    assert st.verdict("ppo", "base", 0, 20, 12, st.mcnemar_exact_p(0, 12), 0.05, level).startswith(
        "ppo vs base on these 4 tasks (McNemar over 32 pairs): ppo worse, p<0.001 (0 wins, 20 ties, 12 losses); "
        "over tasks as a sample (task-level sign flip): no significant difference (p=1.00;")


# -- against statsmodels, the reference implementation ------------------------------------------

def test_mcnemar_exact_p_equals_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar
    for wins, losses, both, neither in ((3, 3, 5, 27), (2, 2, 7, 16), (10, 0, 5, 0), (7, 1, 0, 3), (0, 12, 4, 4),
                                        (1, 30, 0, 0), (20, 9, 11, 60), (0, 0, 3, 3), (5, 1, 0, 0)):
        # rows: the base resolved / not; columns: the other resolved / not
        table = [[both, losses], [wins, neither]]
        assert st.mcnemar_exact_p(wins, losses) == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12, abs=0)


def test_holm_equals_statsmodels_and_only_raises_p():
    from statsmodels.stats.multitest import multipletests
    for ps in ([0.01, 0.04, 0.03, 0.5], [0.001953125, 1.0], [0.2, 0.2, 0.2], [0.049], [0.0703, 0.002, 0.9, 0.01, 0.04],
               [1.0, 1.0]):
        ours = st.holm(ps)
        assert ours == pytest.approx(list(multipletests(ps, method="holm")[1]), abs=1e-15)
        assert all(a >= p for a, p in zip(ours, ps)) and all(a <= 1 for a in ours)
    assert st.holm([0.03]) == [0.03] and st.holm([]) == []


def test_verdict_reads_the_holm_adjusted_p():
    # raw p = 0.0313 (6 wins, 0 losses) is below 0.05; after Holm over 3 comparisons it is not
    raw = st.mcnemar_exact_p(6, 0)
    assert raw == pytest.approx(2 / 64)
    adjusted = st.holm([raw, 0.5, 1.0])[0]
    assert adjusted == pytest.approx(3 * raw)
    assert st.verdict("ppo", "base", 6, 30, 0, raw) == "ppo vs base: ppo better, p=0.03 (6 wins, 30 ties, 0 losses)"
    assert st.verdict("ppo", "base", 6, 30, 0, raw, p_holm=adjusted) == (
        "ppo vs base: no significant difference (Holm p=0.09, raw p=0.03; 6 wins, 30 ties, 0 losses)")
    assert st.verdict("ppo", "base", 10, 5, 0, st.mcnemar_exact_p(10, 0), p_holm=2 * st.mcnemar_exact_p(10, 0)) == (
        "ppo vs base: ppo better, Holm p=0.004 (raw p=0.002; 10 wins, 5 ties, 0 losses)")


# -- the minimal detectable effect -----------------------------------------------------------------

def simulated_power(n: int, effect: float, discordance: float, alpha: float, runs: int, seed: int) -> float:
    """The share of simulated panels (each pair a win, loss or tie at mcnemar_power's rates) that
    statsmodels' exact McNemar calls significant with more wins than losses."""
    import numpy as np
    from statsmodels.stats.contingency_tables import mcnemar
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, [discordance / 2 + effect, discordance / 2, 1 - discordance - effect], size=runs)
    hits = 0
    for wins, losses, ties in draws:
        hits += wins > losses and mcnemar([[ties, losses], [wins, 0]], exact=True).pvalue < alpha
    return hits / runs


def test_power_is_exact_against_a_simulation_with_statsmodels():
    for n, effect, disc in ((38, 0.31, 0.15), (38, 0.03, 0.15), (60, 0.2, 0.1), (24, 0.3, 0.0)):
        exact = st.mcnemar_power(n, effect, disc, 0.05)
        sim = simulated_power(n, effect, disc, 0.05, runs=4000, seed=n)
        assert sim == pytest.approx(exact, abs=0.025), (n, effect, disc)
    # hand-checkable: discordance 0, effect 1: every pair a win; 6 pairs reach p = 2/64 < 0.05, 5 cannot
    assert st.mcnemar_power(6, 1.0, 0.0, 0.05) == pytest.approx(1.0)
    assert st.mcnemar_power(5, 1.0, 0.0, 0.05) == 0.0
    # discordance 0, n = 6: significant only when all 6 pairs are wins -> power = effect**6
    assert st.mcnemar_power(6, 0.9, 0.0, 0.05) == pytest.approx(0.9 ** 6)
    with pytest.raises(ValueError, match="discordance"):
        st.mcnemar_power(10, 0.9, 0.2, 0.05)


def test_original_38_task_panel_could_not_detect_a_3_point_gain():
    """The original experiment's frozen test panel: 38 tasks, one sample each, alpha 0.05."""
    mde = st.detectable_effects(38, alpha=0.05, power=0.8, discordance=0.15)
    assert st.mcnemar_power(38, mde["effect"], 0.15, 0.05) == pytest.approx(0.8, abs=1e-6)
    assert mde["effect"] > 0.25 and mde["effect_floor"] > 0.15  # ~31 and ~20 points
    # a 3-point gain (about one task in 38) is detected in fewer than 1 panel in 20 ...
    assert st.mcnemar_power(38, 0.03, 0.15, 0.05) < 0.05
    # ... even if the policy never lost a pair the base solved
    assert st.mcnemar_power(38, 0.03, 0.0, 0.05) < 0.05
    # no discordance assumption lowers the effect below the floor, and more pairs detect less
    for disc in (0.05, 0.15, 0.3, 0.6):
        effect = st.minimal_detectable_effect(38, 0.05, 0.8, disc)
        assert effect is None or effect >= mde["effect_floor"]  # None: not even the largest gain
    assert st.minimal_detectable_effect(38, 0.05, 0.8, 0.6) is None  # 60% noise leaves at most 40 points
    assert st.minimal_detectable_effect(500, 0.05, 0.8, 0.15) < 0.1 < mde["effect"]
    sentence = st.detectable_effect_sentence(mde)
    assert sentence.startswith("38 pairs, 80% power, alpha 0.05: the smallest gain the exact McNemar test detects is "
                               f"{100 * mde['effect']:.1f} points (if 15% of pairs disagree without an effect; "
                               f"{100 * mde['effect_floor']:.1f} points even if the policy never lost a pair)")
    # Holm over 3 comparisons: the first step tests at alpha/3, so the panel detects less
    three = st.detectable_effects(38, 0.05, 0.8, 0.15, comparisons=3)
    assert three["effect_holm"] > three["effect"] == mde["effect"]
    assert "at Holm's first step (alpha/3)" in st.detectable_effect_sentence(three)
    # 5 pairs: p < 0.05 is out of reach whatever happens
    few = st.detectable_effects(5, 0.05, 0.8, 0.15)
    assert few["effect"] is None and few["effect_floor"] is None
    assert "no gain is detectable" in st.detectable_effect_sentence(few)
