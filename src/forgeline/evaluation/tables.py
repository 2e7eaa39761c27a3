"""Stage `tables`: the paired evaluation tables, per panel: every policy against the base and
the configured pairs (e.g. GRPO against PPO), the failure attribution and the decision gate.

Input: per-task results files of `evaluate` (any number of policies x panels; each line names
its policy and panel) and, for the failure classes, their episode records (R.episodes.jsonl).
Per panel: first the minimal detectable effect of its n pairs (stats.detectable_effects: what
the panel could have seen at all); per policy: successes k/n and %, the Wilson interval, mean
input tokens, mean steps, mean runtime and their ratios to the base, how its episodes ended
(attribution.OUTCOME_CLASSES); per comparison (policy against a reference): wins / ties / losses,
the exact McNemar p, with several seeds per task the task-level test, Holm-adjusted p-values
over the panel's comparisons (the verdicts read those), cost ratios, the class transitions and a
plain-language verdict; with several seeds per task, each task's successes per policy. Then the
gate (`evaluation.gate`): continue or stop, and why. Two policies of a panel must have been
evaluated on the same (instance_id, seed) pairs under the same agent config, else the stage
stops and names the files.

Outputs (in --out-dir): tables.md (the gate, then per panel the detectable effect before the
numbers), tables.csv (one row per panel x policy), tables.json (everything, sentences included),
metrics.json (numbers only, for `dvc metrics`: {panel: {policy: {...}, "<policy>_vs_<against>":
{...}, "mde": {...}, "gate": {...}}}), then the manifest. Mean runtime comes from `wall_s`, which
is machine-dependent; every other number is a function of the results.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.evaluation.attribution import FAILURE_CLASSES, OUTCOME_CLASSES, class_counts, outcome_class, transitions
from forgeline.evaluation.stats import (counts_text, detectable_effect_sentence, detectable_effects, holm,
                                        mcnemar_exact_p, mean, p_text, paired_outcomes, ratio, significant,
                                        success_summary, task_level_test, verdict)
from forgeline.provenance import Manifest, read_jsonl, write_json, write_text

log = logging.getLogger(__name__)
STAGE = "evaluation.tables"


class PairingError(ValueError):
    """Two policies of a panel were not evaluated on the same tasks and seeds (or config)."""


# -- pure -----------------------------------------------------------------------------------

def group_results(files: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[dict, dict]:
    """({panel: {policy: {(instance_id, seed): result}}}, {(panel, policy): [source files]})
    from {file: result lines}. A (instance_id, seed) pair twice for one policy and panel is an
    error naming the file(s)."""
    grouped: dict[str, dict[str, dict]] = {}
    sources: dict[tuple[str, str], list[str]] = {}
    for path in sorted(files):
        for row in files[path]:
            panel, policy = row["panel"], row["policy"]
            cell = grouped.setdefault(panel, {}).setdefault(policy, {})
            key = (row["instance_id"], int(row["seed"]))
            if key in cell:
                raise PairingError(f"{path}: {policy} on panel {panel} has {key} twice "
                                   f"(files: {', '.join(sources[(panel, policy)])})")
            cell[key] = dict(row)
            if path not in sources.setdefault((panel, policy), []):
                sources[(panel, policy)].append(path)
    return grouped, sources


def check_pairing(panel: str, by_policy: Mapping[str, Mapping[tuple, Mapping[str, Any]]], base: str,
                  sources: Mapping[tuple[str, str], Sequence[str]]) -> None:
    """Raise PairingError (naming the files) unless every policy of the panel has exactly the
    base's (instance_id, seed) pairs and the same agent config digest."""
    if base not in by_policy:
        raise PairingError(f"panel {panel}: no results of the base policy {base!r} "
                           f"(policies: {', '.join(sorted(by_policy))}; set evaluation.base or --base)")
    ref = set(by_policy[base])
    base_files = ", ".join(sources[(panel, base)])
    digests = {r.get("config_digest") for r in by_policy[base].values()} - {None}
    for policy in sorted(by_policy):
        if policy == base:
            continue
        keys = set(by_policy[policy])
        files = ", ".join(sources[(panel, policy)])
        if keys != ref:
            only_base, only_other = sorted(ref - keys), sorted(keys - ref)
            raise PairingError(
                f"panel {panel}: {policy} ({files}) and {base} ({base_files}) were not evaluated on the "
                f"same tasks and seeds: {len(only_base)} (instance_id, seed) pair(s) only in {base} "
                f"(e.g. {only_base[:3]}), {len(only_other)} only in {policy} (e.g. {only_other[:3]})")
        other = {r.get("config_digest") for r in by_policy[policy].values()} - {None}
        if digests and other and digests != other:
            raise PairingError(f"panel {panel}: {policy} ({files}) and {base} ({base_files}) ran under "
                               f"different agent configs ({sorted(other)} vs {sorted(digests)})")


COST_KEYS = ("mean_input_tokens", "mean_output_tokens", "mean_steps", "mean_wall_s")


def comparison_key(policy: str, against: str) -> str:
    """"ppo_vs_base": a comparison's key in tables.json and metrics.json."""
    return f"{policy}_vs_{against}"


def compare(by_policy: Mapping[str, Mapping[tuple, Mapping[str, Any]]], policies: Mapping[str, Mapping[str, Any]],
            policy: str, against: str, alpha: float) -> dict[str, Any]:
    """One comparison before the Holm adjustment: wins/ties/losses, McNemar p, the task-level
    test (several seeds per task), cost ratios (policy mean / against mean) and the transitions
    of the outcome classes."""
    ref = {k: bool(r["resolved"]) for k, r in by_policy[against].items()}
    other = {k: bool(r["resolved"]) for k, r in by_policy[policy].items()}
    counts = paired_outcomes(ref, other)
    task = task_level_test(ref, other)
    return {"policy": policy, "against": against, **counts,
            "mcnemar_p": mcnemar_exact_p(counts["wins"], counts["losses"]),
            **({f"task_{k}": v for k, v in task.items()} if task else {}), "alpha": alpha,
            **{key.replace("mean_", "") + "_ratio": ratio(policies[policy][key], policies[against][key])
               for key in COST_KEYS},
            "transitions": transitions({k: r["class"] for k, r in by_policy[against].items()},
                                       {k: r["class"] for k, r in by_policy[policy].items()})}


def adjust(comparisons: Mapping[str, dict[str, Any]], alpha: float) -> None:
    """Holm over the panel's comparisons (the McNemar p's; the task-level p's apart, as a second
    family), then `significant` / `task_significant` and the verdict from the adjusted p's. With
    one comparison the adjusted p is the raw one and the verdict does not mention Holm."""
    names = list(comparisons)
    for key, out in (("mcnemar_p", "mcnemar_p_holm"), ("task_p", "task_p_holm")):
        have = [n for n in names if key in comparisons[n]]
        for n, q in zip(have, holm([comparisons[n][key] for n in have])):
            comparisons[n][out] = q
    for c in comparisons.values():
        c["holm_m"] = len(names)
        task = {k[len("task_"):]: c[k] for k in ("task_tasks", "task_up", "task_same", "task_down", "task_mean_diff",
                                                  "task_p")} if "task_p" in c else None
        # significant: on this panel's tasks (the pairs); task_significant: over tasks as a sample
        c["significant"] = significant(c["mcnemar_p_holm"], alpha, c["wins"] - c["losses"])
        if task:
            c["task_significant"] = significant(c["task_p_holm"], alpha, task["mean_diff"])
        several = len(names) > 1
        c["verdict"] = verdict(c["policy"], c["against"], c["wins"], c["ties"], c["losses"], c["mcnemar_p"], alpha,
                               task, c["mcnemar_p_holm"] if several else None,
                               c.get("task_p_holm") if several else None)


def panel_table(panel: str, by_policy: Mapping[str, Mapping[tuple, Mapping[str, Any]]], base: str,
                alpha: float = 0.05, confidence: float = 0.95, pairs: Sequence[tuple[str, str]] = (),
                power: float = 0.8, discordance: float = 0.15) -> dict[str, Any]:
    """The table of one panel (call check_pairing first). Result rows need `class`
    (attribution.outcome_class; with_classes adds it).

    Output: {"panel", "base", "pairs", "mde" (stats.detectable_effects + its "sentence"),
    "policies": {policy: {n, resolved, success_rate, ci_low, ci_high, mean_input_tokens,
    mean_output_tokens, mean_steps, mean_wall_s, *_ratio = value / base value, outcomes: {class:
    episodes}}}, "comparisons": {"<policy>_vs_<against>": compare() + mcnemar_p_holm, task_p_holm,
    holm_m, significant, task_significant, verdict}, "verdict": the sentences joined, "per_task"}.
    Comparisons: every policy against the base (sorted), then `pairs` (policy, against) whose
    two policies were both evaluated on the panel. Policies: the base first, then sorted.
    """
    order = [base] + sorted(p for p in by_policy if p != base)
    policies: dict[str, dict] = {}
    for policy in order:
        rows = [by_policy[policy][k] for k in sorted(by_policy[policy])]
        row = success_summary([r["resolved"] for r in rows], confidence)
        row["confidence"] = confidence
        for key in COST_KEYS:
            row[key] = mean(r.get(key.removeprefix("mean_")) for r in rows)
        row["outcomes"] = class_counts(r["class"] for r in rows)
        policies[policy] = row
    for policy in order:
        for key in COST_KEYS:
            policies[policy][key.replace("mean_", "") + "_ratio"] = ratio(policies[policy][key], policies[base][key])
    wanted = [(p, base) for p in order[1:]] + [(p, a) for p, a in pairs if p in by_policy and a in by_policy]
    comparisons = {comparison_key(p, a): compare(by_policy, policies, p, a, alpha) for p, a in wanted}
    adjust(comparisons, alpha)
    mde = detectable_effects(len(by_policy[base]), alpha, power, discordance, max(1, len(comparisons)))
    sentences = [c["verdict"] for c in comparisons.values()] or [f"only {base} was evaluated: nothing to compare"]
    return {"panel": panel, "base": base, "pairs": len(by_policy[base]),
            "mde": {**mde, "sentence": detectable_effect_sentence(mde)}, "policies": policies,
            "comparisons": comparisons, "verdict": "; ".join(sentences), "per_task": per_task(by_policy, order)}


def per_task(by_policy: Mapping[str, Mapping[tuple, Mapping[str, Any]]], order: Sequence[str]) -> list[dict]:
    """Each task's successes per policy, sorted by instance_id: [{instance_id, repo, seeds,
    <policy>: resolved count}]. With several seeds per task it shows where a difference comes
    from (one task carrying every win, or a spread)."""
    tasks: dict[str, dict] = {}
    for policy in order:
        for (instance_id, _seed), r in by_policy[policy].items():
            row = tasks.setdefault(instance_id, {"instance_id": instance_id, "repo": r.get("repo"), "seeds": 0,
                                                 **{p: 0 for p in order}})
            row[policy] += bool(r["resolved"])
            row["seeds"] += policy == order[0]
    return [tasks[t] for t in sorted(tasks)]


def paired_tables(grouped: Mapping[str, Mapping[str, Mapping[tuple, Mapping[str, Any]]]], base: str,
                  sources: Mapping[tuple[str, str], Sequence[str]], alpha: float = 0.05,
                  confidence: float = 0.95, pairs: Sequence[tuple[str, str]] = (), power: float = 0.8,
                  discordance: float = 0.15) -> dict[str, dict]:
    """{panel: panel_table} for every panel (sorted), each checked for pairing first. Rows
    without a `class` get the one their own outcome gives (see with_classes)."""
    out = {}
    for panel in sorted(grouped):
        check_pairing(panel, grouped[panel], base, sources)
        rows = {policy: {k: r if "class" in r else {**r, "class": outcome_class(r)} for k, r in cell.items()}
                for policy, cell in grouped[panel].items()}
        out[panel] = panel_table(panel, rows, base, alpha, confidence, pairs, power, discordance)
    return out


def with_classes(files: Mapping[str, Sequence[Mapping[str, Any]]],
                 episodes: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[dict]]:
    """The results lines of each file with `class` (attribution.outcome_class), read from the
    episode record of the same (instance_id, seed) when `episodes` has the file (path: the
    results file's; a record lacking is an error naming both), else from the line itself."""
    out = {}
    for path, rows in files.items():
        records = episodes.get(path)
        if records is None:
            out[path] = [{**r, "class": outcome_class(r)} for r in rows]
            continue
        by_key = {(e["instance_id"], int(e["seed"])): e for e in records}
        lacking = [(r["instance_id"], int(r["seed"])) for r in rows if (r["instance_id"], int(r["seed"])) not in by_key]
        if lacking:
            raise PairingError(f"{path}: {len(lacking)} result(s) without an episode record in its episodes file "
                               f"(e.g. {lacking[:3]}); rerun `forgeline evaluate` for it")
        out[path] = [{**r, "class": outcome_class(by_key[(r["instance_id"], int(r["seed"]))])} for r in rows]
    return out


class GateError(ValueError):
    """The gate names a comparison the tables do not hold."""


def gate_decision(tables: Mapping[str, Mapping[str, Any]], gate: Any, alpha: float) -> dict[str, Any]:
    """Continue or stop, from one comparison of the tables (`gate`: forgeline.params.EvalGateConfig).

    Read with the Holm-adjusted p of the gate's unit: pair (McNemar over the pairs) or task (the
    task-level test; a panel with one seed per task has none, and its pairs are the tasks, so
    McNemar decides). continue_if better: continue when that p < alpha and the policy is ahead
    (wins > losses, or the mean task difference > 0); not_worse: continue unless p < alpha and
    it is behind. Output: {panel, policy, against, unit, unit_used, continue_if, decision, p,
    p_holm, alpha, up, down, reason}."""
    key = comparison_key(gate.policy, gate.against)
    table = tables.get(gate.panel)
    if table is None or key not in table["comparisons"]:
        have = sorted(k for t in tables.values() for k in t["comparisons"])
        raise GateError(f"evaluation.gate: no comparison {gate.policy} against {gate.against} on panel {gate.panel} "
                        f"in these results (panels {', '.join(sorted(tables)) or 'none'}; comparisons "
                        f"{', '.join(have) or 'none'}): give the tables that panel's results of both policies, "
                        f"or change evaluation.gate in params.yaml")
    c = table["comparisons"][key]
    by_task = gate.unit == "task" and "task_p" in c
    if by_task:
        p, p_holm, up, down = c["task_p"], c["task_p_holm"], c["task_up"], c["task_down"]
        ahead, how = c["task_mean_diff"], f"task-level sign flip over {c['task_tasks']} tasks"
        counts = f"{up} up, {c['task_same']} same, {down} down"
    else:
        p, p_holm, up, down = c["mcnemar_p"], c["mcnemar_p_holm"], c["wins"], c["losses"]
        ahead, how = up - down, f"McNemar over {c['wins'] + c['ties'] + c['losses']} task x seed pairs"
        counts = counts_text(up, c["ties"], down)
    sig = p_holm < alpha and ahead != 0
    go = (sig and ahead > 0) if gate.continue_if == "better" else not (sig and ahead < 0)
    shown = p_text(p_holm) if c["holm_m"] == 1 else f"Holm {p_text(p_holm)}, raw {p_text(p)}"
    if gate.continue_if == "better":
        rule = (f"continue if {gate.policy} is significantly better than {gate.against} on panel {gate.panel} "
                f"(p < {alpha:g}{', Holm-adjusted' if c['holm_m'] > 1 else ''}, and ahead)")
        state = "is significantly better than" if go else "is not significantly better than"
    else:
        rule = (f"continue unless {gate.policy} is significantly worse than {gate.against} on panel {gate.panel} "
                f"(p < {alpha:g}{', Holm-adjusted' if c['holm_m'] > 1 else ''}, and behind)")
        state = "is not significantly worse than" if go else "is significantly worse than"
    fallback = " (task unit asked, one seed per task: the pairs are the tasks)" if gate.unit == "task" and not by_task else ""
    reason = (f"{'continue' if go else 'stop'}: {gate.policy} {state} {gate.against} on panel {gate.panel} "
              f"({how}{fallback}: {shown}; {counts}). Rule (evaluation.gate): {rule}")
    return {"panel": gate.panel, "policy": gate.policy, "against": gate.against, "unit": gate.unit,
            "unit_used": "task" if by_task else "pair", "continue_if": gate.continue_if,
            "decision": "continue" if go else "stop", "p": p, "p_holm": p_holm, "alpha": alpha,
            "up": up, "down": down, "reason": reason}


def metrics(tables: Mapping[str, Mapping[str, Any]], gate: Mapping[str, Any] | None = None) -> dict[str, dict]:
    """The numbers of the tables for `dvc metrics show/diff` (no strings):
    {panel: {policy: {success_rate, resolved, n, ci_low, ci_high, mean_*..., outcomes: {class: n}},
             "<policy>_vs_<against>": {wins, ties, losses, mcnemar_p, mcnemar_p_holm, holm_m, alpha,
                                      significant, *_ratio, wins_from: {class: n}, losses_to: {...}},
             "mde": {pairs, effect, effect_floor, effect_holm, ...},
             "gate": {continue, p, p_holm, alpha, up, down} (the gate's panel only)}}."""
    out: dict[str, dict] = {}
    for panel, t in tables.items():
        m: dict[str, dict] = {}
        for policy, row in t["policies"].items():
            m[policy] = {k: v for k, v in row.items() if v is not None}
        for name, c in t["comparisons"].items():
            m[name] = {k: v for k, v in c.items()
                       if k not in ("verdict", "policy", "against", "transitions") and v is not None}
            m[name].update(wins_from=c["transitions"]["wins_from"], losses_to=c["transitions"]["losses_to"])
        m["mde"] = {k: v for k, v in t["mde"].items() if k != "sentence" and v is not None}
        if gate is not None and gate["panel"] == panel:
            m["gate"] = {"continue": gate["decision"] == "continue",
                         **{k: gate[k] for k in ("p", "p_holm", "alpha", "up", "down")}}
        out[panel] = m
    return out


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _p_cell(p: float) -> str:
    """An exact p for a table cell: 4 decimals (1.0000, 0.0020), scientific below 1e-4."""
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


CLASS_LABELS = {"solved": "solved", "wrong_fix": "wrong fix", "invalid_call": "invalid call",
                "step_limit": "step limit", "timeout": "timeout", "context_exceeded": "context exceeded",
                "sandbox_error": "sandbox error"}


def _comparison_rows(t: Mapping[str, Any]) -> list[str]:
    """The comparisons of a panel as Markdown table rows (Holm beside the raw p)."""
    lines = ["| comparison | W / T / L | McNemar p | Holm p | tasks up / same / down | task-level p | Holm task p "
             "| input tokens x | steps x | runtime x |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in t["comparisons"].values():
        task = "task_p" in c
        tasks = f"{c['task_up']} / {c['task_same']} / {c['task_down']}" if task else "-"
        lines.append(
            f"| {c['policy']} vs {c['against']} | {c['wins']} / {c['ties']} / {c['losses']} | {_p_cell(c['mcnemar_p'])} "
            f"| {_p_cell(c['mcnemar_p_holm'])} | {tasks} | {_p_cell(c['task_p']) if task else '-'} "
            f"| {_p_cell(c['task_p_holm']) if task else '-'} | {_num(c['input_tokens_ratio'], '.2f')} "
            f"| {_num(c['steps_ratio'], '.2f')} | {_num(c['wall_s_ratio'], '.2f')} |")
    return lines


def markdown(tables: Mapping[str, Mapping[str, Any]], confidence: float = 0.95,
             gate: Mapping[str, Any] | None = None) -> str:
    """The tables as Markdown: the gate's decision; per panel the detectable effect (before any
    number), the verdicts, one row per policy, the comparisons, the outcome classes and their
    transitions, the per-task successes (several seeds per task)."""
    level = f"{confidence:.0%}"
    lines = ["# Paired evaluation", ""]
    if gate is not None:
        lines += [f"**Decision: {gate['decision']}.** {gate['reason']}.", ""]
    for panel, t in tables.items():
        lines += [f"## Panel `{panel}` ({t['pairs']} task x seed pairs, base: `{t['base']}`)", "",
                  f"**Detectable effect:** {t['mde']['sentence']}", "",
                  f"**Verdict:** {t['verdict']}.", "",
                  f"| policy | resolved | % | {level} CI (Wilson) "
                  f"| mean input tokens (x base) | mean steps (x base) | mean runtime s (x base) |",
                  "|---|---|---|---|---|---|---|"]
        for policy, r in t["policies"].items():
            lines.append(
                f"| {policy} | {r['resolved']}/{r['n']} | {100 * r['success_rate']:.1f} "
                f"| {100 * r['ci_low']:.1f}-{100 * r['ci_high']:.1f} "
                f"| {_num(r['mean_input_tokens'], '.1f')} ({_num(r['input_tokens_ratio'], '.2f')}) "
                f"| {_num(r['mean_steps'], '.2f')} ({_num(r['steps_ratio'], '.2f')}) "
                f"| {_num(r['mean_wall_s'], '.2f')} ({_num(r['wall_s_ratio'], '.2f')}) |")
        lines.append("")
        if t["comparisons"]:
            lines += _comparison_rows(t) + [""]
        lines += ["How the episodes ended:", "", "| policy | " + " | ".join(CLASS_LABELS.values()) + " |",
                  "|---|" + "---|" * len(CLASS_LABELS)]
        lines += [f"| {policy} | " + " | ".join(str(r["outcomes"][c]) for c in OUTCOME_CLASSES) + " |"
                  for policy, r in t["policies"].items()]
        lines.append("")
        if t["comparisons"]:
            head = " | ".join(f"{c['against']} failed so, {c['policy']} solved | {c['against']} solved, "
                              f"{c['policy']} failed so" for c in t["comparisons"].values())
            lines += ["Transitions (the wins and losses of each comparison, by how the losing side failed):", "",
                      f"| failure | {head} |", "|---|" + "---|---|" * len(t["comparisons"])]
            lines += [f"| {CLASS_LABELS[f]} | " + " | ".join(
                f"{c['transitions']['wins_from'][f]} | {c['transitions']['losses_to'][f]}"
                for c in t["comparisons"].values()) + " |" for f in FAILURE_CLASSES]
            lines.append("")
        if any(row["seeds"] > 1 for row in t["per_task"]):
            names = list(t["policies"])
            lines += [f"Per task (resolved of {t['per_task'][0]['seeds']} seeds):", "",
                      "| task | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
            lines += [f"| {row['instance_id']} | " + " | ".join(f"{row[n]}/{row['seeds']}" for n in names) + " |"
                      for row in t["per_task"]]
            lines.append("")
    lines += ["McNemar p: exact two-sided binomial test on the discordant pairs (wins vs losses, p = 1/2). "
              "It answers the question on this panel's tasks (the seeds are the samples). With several seeds "
              "per task, task-level p asks whether the difference carries over to tasks as a sample: the exact "
              "paired sign-flip test of the per-task success-rate differences. Holm p: with several comparisons "
              "on a panel, each p adjusted by Holm's step-down method over that panel's comparisons (the "
              "task-level p's as their own family); the verdicts and the gate read the adjusted p. Detectable "
              "effect: the smallest gain in success rate the exact McNemar test detects with the stated power, "
              "if the stated share of pairs disagree without an effect (stats.minimal_detectable_effect). "
              "Outcome classes: forgeline.evaluation.attribution. Runtime is machine-dependent.", ""]
    return "\n".join(lines)


CSV_COLUMNS = ("panel", "policy", "base", "n", "resolved", "success_rate", "ci_low", "ci_high",
               "wins", "ties", "losses", "mcnemar_p", "mcnemar_p_holm", "task_up", "task_same", "task_down", "task_p",
               "task_p_holm", "significant", "task_significant",
               "mean_input_tokens", "input_tokens_ratio", "mean_output_tokens", "output_tokens_ratio",
               "mean_steps", "steps_ratio", "mean_wall_s", "wall_s_ratio", *OUTCOME_CLASSES)


def csv_text(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """One CSV row per (panel, policy): its numbers, its episodes per outcome class and its
    comparison with the base (empty for the base; the configured pairs are in tables.json)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for panel, t in tables.items():
        for policy, r in t["policies"].items():
            c = t["comparisons"].get(comparison_key(policy, t["base"]), {})
            row = {"panel": panel, "policy": policy, "base": t["base"], **r, **r["outcomes"],
                   **{k: v for k, v in c.items() if not k.endswith("_ratio")}}
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", nargs="+", required=True, help="per-task results JSONL files of `evaluate`")
    parser.add_argument("--episodes", nargs="*", default=[],
                        help="their episode records (R.episodes.jsonl beside R.jsonl): the outcome classes; a "
                             "results file without one is classified from its own lines (no sandbox errors seen)")
    parser.add_argument("--base", help="the base policy's name (default: evaluation.base)")
    parser.add_argument("--out-dir", required=True, help="where tables.md/.csv/.json and metrics.json go")
    parser.add_argument("--manifest", help="manifest path (default: OUT_DIR/manifest.json)")


EPISODE_FIELDS = ("instance_id", "seed", "outcome", "exit_status", "diff_error", "verdict")


def read_episode_outcomes(path: str | Path) -> list[dict]:
    """What outcome_class reads of each episode record (EPISODE_FIELDS; the verdict without its
    test lists), a line at a time: the records carry whole conversations."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                verdict = rec.get("verdict")
                out.append({**{k: rec.get(k) for k in EPISODE_FIELDS[:-1]},
                            "verdict": None if verdict is None else
                            {k: verdict[k] for k in ("resolved", "timed_out", "applied") if k in verdict}})
    return out


def episodes_by_results(results: Sequence[str], episodes: Sequence[str]) -> dict[str, str]:
    """{results file: its episodes file} (R.jsonl <-> R.episodes.jsonl, as evaluate names them);
    an episodes file that belongs to none of the results files is an error naming it."""
    expected = {str(Path(r).with_name(Path(r).stem + ".episodes.jsonl")): str(r) for r in results}
    stray = [e for e in episodes if str(Path(e)) not in {str(Path(k)) for k in expected}]
    if stray:
        raise PairingError(f"--episodes {', '.join(stray)}: not the episodes file of any --results file "
                           f"(R.jsonl's is R.episodes.jsonl beside it)")
    given = {str(Path(e)) for e in episodes}
    return {r: e for e, r in expected.items() if str(Path(e)) in given}


def run(cfg, args: argparse.Namespace) -> None:
    ev = cfg.evaluation
    base = args.base or ev.base
    alpha, confidence = float(ev.alpha), float(ev.confidence)
    pairs = [(x.policy, x.against) for x in ev.pairs]
    power, discordance = float(ev.power.level), float(ev.power.discordance)
    manifest = Manifest(stage=STAGE, params={"evaluation": {
        "base": base, "alpha": alpha, "confidence": confidence, "pairs": [list(x) for x in pairs],
        "power": {"level": power, "discordance": discordance},
        "gate": None if ev.gate is None else {k: getattr(ev.gate, k) for k in
                                              ("policy", "against", "panel", "unit", "continue_if")}}},
        inputs=[*args.results, *args.episodes], code=__name__)
    match = episodes_by_results(args.results, args.episodes)
    files = with_classes({str(p): read_jsonl(p) for p in args.results},
                         {r: read_episode_outcomes(e) for r, e in match.items()})
    grouped, sources = group_results(files)
    tables = paired_tables(grouped, base, sources, alpha, confidence, pairs, power, discordance)
    gate = gate_decision(tables, ev.gate, alpha) if ev.gate is not None else None
    if gate is not None:
        tables[gate["panel"]]["gate"] = gate
    out = Path(args.out_dir)
    paths = [out / "tables.md", out / "tables.csv", out / "tables.json", out / "metrics.json"]
    write_text(paths[0], markdown(tables, confidence, gate))
    write_text(paths[1], csv_text(tables))
    write_json(paths[2], tables)
    write_json(paths[3], metrics(tables, gate))
    manifest.notes = {**{panel: t["verdict"] for panel, t in tables.items()},
                      "gate": gate["reason"] if gate else None,
                      "classified_from_results_only": sorted(set(map(str, args.results)) - set(match))}
    manifest.write(args.manifest or out / "manifest.json", outputs=paths)
    if gate is not None:
        log.info("gate: %s", gate["reason"])
    for panel, t in tables.items():
        log.info("panel %s: %s", panel, t["verdict"])
