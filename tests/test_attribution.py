"""Failure attribution, many-policy tables with Holm, and the decision gate, on hand-made results
and episode records in the formats `evaluate` writes (the real runs are in test_evaluate.py)."""
from __future__ import annotations

import argparse
import json

import pytest
from statsmodels.stats.multitest import multipletests

from forgeline import config
from forgeline.evaluation import attribution as at, stats as st, tables as tb
from forgeline.params import EvalGateConfig
from forgeline.train.ppo import solved_tasks

from embedded import PARAMS


def episode(iid, seed, outcome, exit_status, **extra):
    """The fields of an episode record (forgeline.agent.episode) that say how it ended."""
    return {"instance_id": iid, "seed": seed, "outcome": outcome, "exit_status": exit_status,
            "diff_error": None, "verdict": {"resolved": outcome == "resolved", "timed_out": False, "applied": True},
            **extra}


def test_every_way_an_episode_ends_has_one_class():
    cases = [(episode("t", 1, "resolved", "submitted"), "solved"),
             (episode("t", 1, "failed", "submitted"), "wrong_fix"),
             (episode("t", 1, "invalid", "invalid_calls"), "invalid_call"),
             (episode("t", 1, "step_limit", "step_limit"), "step_limit"),
             (episode("t", 1, "step_limit", "token_limit"), "step_limit"),
             (episode("t", 1, "timeout", "wall_time"), "timeout"),
             (episode("t", 1, "context_exceeded", "context_exceeded"), "context_exceeded"),
             # submitted, but the grade is not the tests' word on the diff
             (episode("t", 1, "failed", "submitted", diff_error="SandboxError: .git removed"), "sandbox_error"),
             (episode("t", 1, "failed", "submitted", verdict={"resolved": False, "timed_out": True}), "sandbox_error"),
             (episode("t", 1, "failed", "submitted", verdict={"applied": False}), "sandbox_error"),
             # a limit ended it: its grading does not matter, it was never going to be resolved
             (episode("t", 1, "step_limit", "step_limit", diff_error="SandboxError: x"), "step_limit"),
             # a results line of evaluate: outcome and termination only
             ({"instance_id": "t", "seed": 1, "outcome": "failed", "termination": "submitted"}, "wrong_fix")]
    for record, cls in cases:
        assert at.outcome_class(record) == cls, record
    assert {c for _, c in cases} == set(at.OUTCOME_CLASSES)
    with pytest.raises(ValueError, match="outcome 'crashed'"):
        at.outcome_class({"instance_id": "t", "seed": 1, "outcome": "crashed"})
    assert at.class_counts(["solved", "timeout", "solved"]) == {
        "solved": 2, "wrong_fix": 0, "invalid_call": 0, "step_limit": 0, "timeout": 1, "context_exceeded": 0,
        "sandbox_error": 0}


def test_transitions_split_wins_and_losses_by_how_the_loser_failed():
    ref = {1: "timeout", 2: "timeout", 3: "invalid_call", 4: "solved", 5: "solved", 6: "step_limit"}
    other = {1: "solved", 2: "solved", 3: "solved", 4: "wrong_fix", 5: "solved", 6: "invalid_call"}
    t = at.transitions(ref, other)
    assert t["wins_from"]["timeout"] == 2 and t["wins_from"]["invalid_call"] == 1 and sum(t["wins_from"].values()) == 3
    assert t["losses_to"] == {**{c: 0 for c in at.FAILURE_CLASSES}, "wrong_fix": 1}
    assert {(m["from"], m["to"]): m["pairs"] for m in t["matrix"]} == {
        ("invalid_call", "solved"): 1, ("step_limit", "invalid_call"): 1, ("timeout", "solved"): 2,
        ("solved", "solved"): 1, ("solved", "wrong_fix"): 1}
    with pytest.raises(ValueError, match="same pairs"):
        at.transitions({1: "solved"}, {2: "solved"})


def test_concentration_of_the_original_ppo_run():
    """160 episodes, 32 successes, 16 of them on one task (the original archive)."""
    steps = []
    for step in range(20):  # 8 episodes a step; 16 of the successes on task a, the rest spread
        solved = {"a": 1} if step < 16 else {}
        if step % 5 < 4:
            solved[f"t{step}"] = 1
        steps.append({"step": step + 1, "episodes": 8, "success_rate": sum(solved.values()) / 8,
                      "solved": dict(sorted(solved.items()))})
    c = at.training_concentration(steps)
    assert (c["episodes"], c["successes"], c["top_task"], c["top_successes"]) == (160, 32, "a", 16)
    assert c["top_share"] == 0.5 and c["tasks_solved"] == 17 and c["named"]
    assert at.concentration_sentence("ppo", c) == (
        "ppo training: 32 successes in 160 episodes over 17 tasks; the top task (a) carries 16 (50%)")
    # a log written before `solved` was logged cannot name the tasks
    old = [{k: v for k, v in s.items() if k != "solved"} for s in steps]
    c = at.training_concentration(old)
    assert c["successes"] == 32 and c["top_share"] is None and not c["named"]
    assert "does not name the solved tasks" in at.concentration_sentence("ppo", c)
    # what ppo.py and grpo.py log per step: the resolved episodes of each task
    samples = [{"task": "b", "resolved": True}, {"task": "a", "resolved": True}, {"task": "b", "resolved": True},
               {"task": "c", "resolved": False}]
    assert list(solved_tasks(samples).items()) == [("a", 1), ("b", 2)]


# -- the tables: every policy against the base, configured pairs, Holm, attribution ---------------

CLASSES = {"solved": ("resolved", "submitted"), "wrong_fix": ("failed", "submitted"),
           "invalid_call": ("invalid", "invalid_calls"), "timeout": ("timeout", "wall_time"),
           "step_limit": ("step_limit", "step_limit")}


def results(policy, panel, classes, seeds=(7,)):
    """(results lines, episode records) of one policy: task i ends as classes[i] for every seed."""
    rows, eps = [], []
    for i, cls in enumerate(classes):
        for seed in seeds:
            outcome, status = CLASSES[cls]
            rows.append({"policy": policy, "panel": panel, "instance_id": f"t{i:03d}", "seed": seed,
                         "resolved": cls == "solved", "outcome": outcome, "termination": status,
                         "steps": 3 if policy == "base" else 6, "input_tokens": 1000, "output_tokens": 10,
                         "wall_s": 2.0, "config_digest": "c"})
            eps.append(episode(f"t{i:03d}", seed, outcome, status))
    return rows, eps


def three_policies():
    """A test panel of 40 tasks: grpo solves 12 the base failed (10 of them by timeout), ppo 2."""
    base = ["timeout"] * 10 + ["invalid_call"] * 2 + ["wrong_fix"] * 2 + ["solved"] * 6 + ["step_limit"] * 20
    ppo = ["solved"] * 2 + ["timeout"] * 8 + ["invalid_call"] * 2 + ["wrong_fix"] * 2 + ["solved"] * 5 \
        + ["wrong_fix"] + ["step_limit"] * 20
    grpo = ["solved"] * 12 + ["wrong_fix"] * 2 + ["solved"] * 6 + ["step_limit"] * 20
    return {name: results(name, "test", cls) for name, cls in (("base", base), ("ppo", ppo), ("grpo", grpo))}


def build(policies, pairs=(("grpo", "ppo"),)):
    files = {f"{n}.jsonl": r for n, (r, _) in policies.items()}
    eps = {f"{n}.jsonl": e for n, (_, e) in policies.items()}
    grouped, sources = tb.group_results(tb.with_classes(files, eps))
    return tb.paired_tables(grouped, "base", sources, 0.05, 0.95, list(pairs), 0.8, 0.15)


def test_many_policy_table_with_holm_and_transitions():
    t = build(three_policies())["test"]
    assert list(t["comparisons"]) == ["grpo_vs_base", "ppo_vs_base", "grpo_vs_ppo"]
    c = {k: t["comparisons"][k] for k in t["comparisons"]}
    assert (c["grpo_vs_base"]["wins"], c["grpo_vs_base"]["losses"]) == (12, 0)
    assert (c["ppo_vs_base"]["wins"], c["ppo_vs_base"]["losses"]) == (2, 1)
    assert (c["grpo_vs_ppo"]["wins"], c["grpo_vs_ppo"]["losses"]) == (11, 0)
    raw = [c[k]["mcnemar_p"] for k in c]
    assert [c[k]["mcnemar_p_holm"] for k in c] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert all(c[k]["holm_m"] == 3 for k in c)
    assert c["grpo_vs_base"]["significant"] and c["grpo_vs_ppo"]["significant"] and not c["ppo_vs_base"]["significant"]
    assert c["grpo_vs_ppo"]["verdict"].startswith("grpo vs ppo: grpo better, Holm p=0.002 (raw p<0.001; 11 wins")
    assert c["ppo_vs_base"]["verdict"] == (
        "ppo vs base: no significant difference (Holm p=1.00, raw p=1.00; 2 wins, 37 ties, 1 loss)")
    # cost ratios of each comparison: the policy's mean over its reference's
    assert c["ppo_vs_base"]["steps_ratio"] == 2.0 and c["grpo_vs_ppo"]["steps_ratio"] == 1.0
    # how each policy's episodes ended, and where grpo's wins came from
    assert t["policies"]["base"]["outcomes"]["timeout"] == 10 and t["policies"]["grpo"]["outcomes"]["solved"] == 18
    assert c["grpo_vs_base"]["transitions"]["wins_from"]["timeout"] == 10
    assert c["grpo_vs_base"]["transitions"]["wins_from"]["invalid_call"] == 2
    assert c["ppo_vs_base"]["transitions"]["losses_to"]["wrong_fix"] == 1
    # the detectable effect at 40 pairs, Holm's first step over the 3 comparisons
    assert t["mde"]["pairs"] == 40 and t["mde"]["comparisons"] == 3
    assert t["mde"]["effect"] == pytest.approx(st.minimal_detectable_effect(40, 0.05, 0.8, 0.15))
    assert t["mde"]["effect_holm"] == pytest.approx(st.minimal_detectable_effect(40, 0.05 / 3, 0.8, 0.15))
    md = tb.markdown({"test": t})
    # the detectable effect before any number of the panel
    assert md.index("**Detectable effect:** 40 pairs, 80% power") < md.index("**Verdict:**") < md.index("| base |")
    assert "| grpo vs ppo | 11 / 29 / 0 |" in md and "Holm p:" in md
    assert "| base | 6 | 2 | 2 | 20 | 10 | 0 | 0 |" in md  # solved, wrong fix, invalid, step limit, timeout, ...
    assert "| timeout | 10 | 0 | 2 | 0 | 8 | 0 |" in md  # wins / losses from timeouts, per comparison
    m = tb.metrics({"test": t})
    assert m["test"]["grpo_vs_ppo"]["mcnemar_p_holm"] == c["grpo_vs_ppo"]["mcnemar_p_holm"]
    assert m["test"]["grpo_vs_base"]["wins_from"]["timeout"] == 10 and m["test"]["mde"]["pairs"] == 40
    assert m["test"]["base"]["outcomes"]["step_limit"] == 20
    csv_lines = tb.csv_text({"test": t}).splitlines()
    assert csv_lines[0].endswith("wall_s_ratio,solved,wrong_fix,invalid_call,step_limit,timeout,context_exceeded,"
                                 "sandbox_error")


def test_one_comparison_is_not_adjusted_and_says_nothing_of_holm():
    policies = three_policies()
    del policies["grpo"]
    c = build(policies)["test"]["comparisons"]
    assert list(c) == ["ppo_vs_base"]  # the grpo pair is skipped: grpo was not evaluated here
    assert c["ppo_vs_base"]["mcnemar_p_holm"] == c["ppo_vs_base"]["mcnemar_p"] and "Holm" not in c["ppo_vs_base"]["verdict"]


def test_sandbox_errors_come_from_the_episode_records():
    rows, eps = results("base", "test", ["wrong_fix", "wrong_fix"])
    eps[1]["diff_error"] = "SandboxError: container gone"
    classified = tb.with_classes({"b.jsonl": rows}, {"b.jsonl": eps})["b.jsonl"]
    assert [r["class"] for r in classified] == ["wrong_fix", "sandbox_error"]
    assert [r["class"] for r in tb.with_classes({"b.jsonl": rows}, {})["b.jsonl"]] == ["wrong_fix", "wrong_fix"]
    with pytest.raises(tb.PairingError, match="b.jsonl: 1 result.*without an episode record"):
        tb.with_classes({"b.jsonl": rows}, {"b.jsonl": eps[:1]})
    assert tb.episodes_by_results(["r/base.jsonl", "r/ppo.jsonl"], ["r/base.episodes.jsonl"]) == \
        {"r/base.jsonl": "r/base.episodes.jsonl"}
    with pytest.raises(tb.PairingError, match="other.episodes.jsonl: not the episodes file"):
        tb.episodes_by_results(["r/base.jsonl"], ["r/other.episodes.jsonl"])


def gate(**kw):
    return EvalGateConfig(**{"policy": "ppo", "against": "base", "panel": "test", "unit": "pair",
                             "continue_if": "better", **kw})


def test_gate_continues_only_on_what_the_rule_says():
    tables = build(three_policies())
    g = tb.gate_decision(tables, gate(), 0.05)
    assert g["decision"] == "stop" and g["p_holm"] == 1.0
    assert g["reason"] == (
        "stop: ppo is not significantly better than base on panel test (McNemar over 40 task x seed pairs: "
        "Holm p=1.00, raw p=1.00; 2 wins, 37 ties, 1 loss). Rule (evaluation.gate): continue if ppo is "
        "significantly better than base on panel test (p < 0.05, Holm-adjusted, and ahead)")
    assert tb.gate_decision(tables, gate(continue_if="not_worse"), 0.05)["decision"] == "continue"
    g = tb.gate_decision(tables, gate(policy="grpo", against="ppo"), 0.05)
    assert g["decision"] == "continue" and g["reason"].startswith("continue: grpo is significantly better than ppo")
    # the task unit on a panel with one seed per task: its pairs are the tasks, McNemar decides
    g = tb.gate_decision(tables, gate(policy="grpo", unit="task"), 0.05)
    assert g["unit_used"] == "pair" and "one seed per task" in g["reason"] and g["decision"] == "continue"
    with pytest.raises(tb.GateError, match="no comparison base against ppo on panel test.*evaluation.gate"):
        tb.gate_decision(tables, gate(policy="base", against="ppo"), 0.05)
    m = tb.metrics(tables, tb.gate_decision(tables, gate(), 0.05))
    assert m["test"]["gate"] == {"continue": False, "p": 1.0, "p_holm": 1.0, "alpha": 0.05, "up": 2, "down": 1}


def test_gate_on_the_task_unit_with_several_seeds():
    # 3 tasks x 8 seeds, ppo solves all, the base none: significant over the pairs, not over 3 tasks
    policies = {"base": results("base", "train", ["timeout"] * 3, seeds=range(8)),
                "ppo": results("ppo", "train", ["solved"] * 3, seeds=range(8))}
    tables = build(policies, pairs=())
    pair = tb.gate_decision(tables, gate(panel="train"), 0.05)
    task = tb.gate_decision(tables, gate(panel="train", unit="task"), 0.05)
    assert pair["decision"] == "continue" and task["decision"] == "stop" and task["p"] == 0.25
    assert "task-level sign flip over 3 tasks: p=0.25; 3 up, 0 same, 0 down" in task["reason"]


def test_the_config_names_policies_panels_and_comparisons_that_exist():
    ev = PARAMS.evaluation
    # every policy against the base first, then the configured pairs (the child against its parent)
    assert ev.comparisons() == [("grpo", "base"), ("ppo", "base"), ("ppo-parent", "base"), ("grpo", "ppo"),
                                ("ppo", "ppo-parent")]
    assert ev.gate.panel in ev.panels and (ev.gate.policy, ev.gate.against) in ev.comparisons()
    for bad, why in (({"pairs": [{"policy": "dpo", "against": "ppo"}]}, "'dpo' is not a key of evaluation.policies"),
                     ({"pairs": [{"policy": "base", "against": "ppo"}]}, "base against ppo is reported twice"),
                     ({"gate": {"policy": "ppo", "against": "grpo", "panel": "train", "unit": "pair",
                                "continue_if": "better"}}, "ppo against grpo is not a reported comparison"),
                     ({"gate": {"policy": "ppo", "against": "base", "panel": "val", "unit": "pair",
                                "continue_if": "better"}}, "'val' is not a key of evaluation.panels"),
                     ({"gate": {"policy": "ppo", "against": "base", "panel": "train", "unit": "pair",
                                "continue_if": "maybe"}}, "maybe"),
                     ({"power": {"level": 0.8, "discordance": 1.0}}, "discordance: 1.0"),
                     ({"policies": {"gate": {"path": "x"}}}, "a policy may not be named mde, gate")):
        with pytest.raises(config.ConfigError, match=why):
            config.merged(PARAMS.evaluation, bad)
    # rules between sections: a checkpoint the run keeps; a base folder this config builds
    hub = {"source": "hub", "hub": {"repo_id": "org/agent", "revision": "0" * 40}}
    for bad, why in (({"evaluation": {"policies": {"ppo-parent": {"step": 3}}}},
                      r"evaluation.policies.ppo-parent.step: 3 is not a checkpoint of ppo \(results/adapter: steps 4, 8"),
                     ({"policy": {"base": hub}}, "evaluation.policies.base.path: results/policy/sft is not built "
                                                 "when policy.base.source is hub; use results/policy/hub")):
        with pytest.raises(config.ConfigError, match=why):
            config.merged(PARAMS, bad)
    assert config.merged(PARAMS.evaluation, {"gate": None, "pairs": []}).comparisons() == [
        ("grpo", "base"), ("ppo", "base"), ("ppo-parent", "base")]


def test_tables_stage_writes_the_gate_and_the_classes(tmp_path):
    policies = three_policies()
    paths = []
    for name, (rows, eps) in policies.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / f"{name}.episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
        paths.append(str(tmp_path / f"{name}.jsonl"))
    eps = [p.replace(".jsonl", ".episodes.jsonl") for p in paths]
    cfg = config.merged(PARAMS, {"evaluation": {"panels": {"test": ["x.jsonl"]}, "gate": {"panel": "test"}}})
    out = tmp_path / "tables"
    tb.run(cfg, argparse.Namespace(results=paths, episodes=eps, base=None, out_dir=str(out), manifest=None))
    md = (out / "tables.md").read_text()
    assert md.startswith("# Paired evaluation\n\n**Decision: stop.** stop: ppo is not significantly better than base")
    full = json.loads((out / "tables.json").read_text())
    assert set(full) == {"test"} and full["test"]["gate"]["decision"] == "stop"
    m = json.loads((out / "metrics.json").read_text())
    assert m["test"]["gate"]["continue"] is False and m["test"]["grpo_vs_ppo"]["significant"] is True
    man = json.loads((out / "manifest.json").read_text())
    assert man["params"]["evaluation"]["gate"]["panel"] == "test" and man["notes"]["classified_from_results_only"] == []
