"""Stage `tables`: the paired evaluation tables, per panel, every policy against the base.

Input: per-task results files of `evaluate` (any number of policies x panels; each line names
its policy and panel). Per panel, per policy: successes k/n and %, the Wilson interval, mean
input tokens, mean steps, mean runtime and their ratios to the base policy; per policy other
than the base: wins / ties / losses against the base, the exact McNemar p and a plain-language
verdict; with several seeds per task, each task's successes per policy. Two policies of a panel
must have been evaluated on the same (instance_id, seed) pairs under the same agent config, else
the stage stops and names the files.

Outputs (in --out-dir): tables.md (with the verdicts), tables.csv (one row per panel x policy),
tables.json (everything, verdicts included), metrics.json (numbers only, for `dvc metrics`:
{panel: {policy: {...}, "<policy>_vs_<base>": {...}}}), then the manifest. Mean runtime comes from
`wall_s`, which is machine-dependent; every other number is a function of the results.
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.evaluation.stats import (mcnemar_exact_p, mean, paired_outcomes, ratio, significant,
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


def panel_table(panel: str, by_policy: Mapping[str, Mapping[tuple, Mapping[str, Any]]], base: str,
                alpha: float = 0.05, confidence: float = 0.95) -> dict[str, Any]:
    """The table of one panel (call check_pairing first).

    Output: {"panel", "base", "pairs", "policies": {policy: {n, resolved, success_rate, ci_low,
    ci_high, mean_input_tokens, mean_output_tokens, mean_steps, mean_wall_s, and *_ratio = value /
    base value}}, "comparisons": {policy: {wins, ties, losses, both, neither, mcnemar_p, alpha,
    significant, verdict}}, "verdict": one sentence per comparison, joined}. Policies other than
    the base are in sorted order, the base first.
    """
    order = [base] + sorted(p for p in by_policy if p != base)
    policies: dict[str, dict] = {}
    for policy in order:
        rows = [by_policy[policy][k] for k in sorted(by_policy[policy])]
        row = success_summary([r["resolved"] for r in rows], confidence)
        row["confidence"] = confidence
        row["mean_input_tokens"] = mean(r["input_tokens"] for r in rows)
        row["mean_output_tokens"] = mean(r["output_tokens"] for r in rows)
        row["mean_steps"] = mean(r["steps"] for r in rows)
        row["mean_wall_s"] = mean(r.get("wall_s") for r in rows)
        policies[policy] = row
    for policy in order:
        for key in ("mean_input_tokens", "mean_output_tokens", "mean_steps", "mean_wall_s"):
            policies[policy][key.replace("mean_", "") + "_ratio"] = ratio(policies[policy][key],
                                                                          policies[base][key])
    base_resolved = {k: bool(r["resolved"]) for k, r in by_policy[base].items()}
    comparisons: dict[str, dict] = {}
    for policy in order[1:]:
        other = {k: bool(r["resolved"]) for k, r in by_policy[policy].items()}
        counts = paired_outcomes(base_resolved, other)
        p = mcnemar_exact_p(counts["wins"], counts["losses"])
        task = task_level_test(base_resolved, other)
        comparisons[policy] = {**counts, "mcnemar_p": p,
                               **({f"task_{k}": v for k, v in task.items()} if task else {}),
                               # significant: on this panel's tasks (the pairs); task_significant:
                               # over tasks as a sample (several seeds per task only)
                               "alpha": alpha, "significant": significant(p, alpha, counts["wins"] - counts["losses"]),
                               **({"task_significant": significant(task["p"], alpha, task["mean_diff"])}
                                  if task else {}),
                               "verdict": verdict(policy, base, counts["wins"], counts["ties"],
                                                  counts["losses"], p, alpha, task)}
    sentences = [c["verdict"] for c in comparisons.values()] or [f"only {base} was evaluated: nothing to compare"]
    return {"panel": panel, "base": base, "pairs": len(base_resolved), "policies": policies,
            "comparisons": comparisons, "verdict": "; ".join(sentences),
            "per_task": per_task(by_policy, order)}


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
                  confidence: float = 0.95) -> dict[str, dict]:
    """{panel: panel_table} for every panel (sorted), each checked for pairing first."""
    out = {}
    for panel in sorted(grouped):
        check_pairing(panel, grouped[panel], base, sources)
        out[panel] = panel_table(panel, grouped[panel], base, alpha, confidence)
    return out


def metrics(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """The numbers of the tables for `dvc metrics show/diff` (no strings):
    {panel: {policy: {success_rate, resolved, n, ci_low, ci_high, mean_*...},
             "<policy>_vs_<base>": {wins, ties, losses, mcnemar_p, alpha, significant}}}."""
    out: dict[str, dict] = {}
    for panel, t in tables.items():
        m: dict[str, dict] = {}
        for policy, row in t["policies"].items():
            m[policy] = {k: v for k, v in row.items() if v is not None}
        for policy, c in t["comparisons"].items():
            m[f"{policy}_vs_{t['base']}"] = {k: v for k, v in c.items() if k != "verdict"}
        out[panel] = m
    return out


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _p_cell(p: float) -> str:
    """An exact p for a table cell: 4 decimals (1.0000, 0.0020), scientific below 1e-4."""
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def markdown(tables: Mapping[str, Mapping[str, Any]], confidence: float = 0.95) -> str:
    """The tables as Markdown: per panel the verdict, then one row per policy."""
    level = f"{confidence:.0%}"
    lines = ["# Paired evaluation", ""]
    for panel, t in tables.items():
        lines += [f"## Panel `{panel}` ({t['pairs']} task x seed pairs, base: `{t['base']}`)", "",
                  f"**Verdict:** {t['verdict']}.", "",
                  f"| policy | resolved | % | {level} CI (Wilson) | W / T / L vs {t['base']} | McNemar p "
                  f"| tasks up / same / down | task-level p "
                  f"| mean input tokens (x base) | mean steps (x base) | mean runtime s (x base) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for policy, r in t["policies"].items():
            c = t["comparisons"].get(policy)
            wtl = f"{c['wins']} / {c['ties']} / {c['losses']}" if c else "-"
            p = _p_cell(c["mcnemar_p"]) if c else "-"
            task = c is not None and "task_p" in c
            tasks = f"{c['task_up']} / {c['task_same']} / {c['task_down']}" if task else "-"
            task_p = _p_cell(c["task_p"]) if task else "-"
            lines.append(
                f"| {policy} | {r['resolved']}/{r['n']} | {100 * r['success_rate']:.1f} "
                f"| {100 * r['ci_low']:.1f}-{100 * r['ci_high']:.1f} | {wtl} | {p} | {tasks} | {task_p} "
                f"| {_num(r['mean_input_tokens'], '.1f')} ({_num(r['input_tokens_ratio'], '.2f')}) "
                f"| {_num(r['mean_steps'], '.2f')} ({_num(r['steps_ratio'], '.2f')}) "
                f"| {_num(r['mean_wall_s'], '.2f')} ({_num(r['wall_s_ratio'], '.2f')}) |")
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
              "paired sign-flip test of the per-task success-rate differences. Runtime is machine-dependent.", ""]
    return "\n".join(lines)


CSV_COLUMNS = ("panel", "policy", "base", "n", "resolved", "success_rate", "ci_low", "ci_high",
               "wins", "ties", "losses", "mcnemar_p", "task_up", "task_same", "task_down", "task_p", "significant",
               "task_significant",
               "mean_input_tokens", "input_tokens_ratio", "mean_output_tokens", "output_tokens_ratio",
               "mean_steps", "steps_ratio", "mean_wall_s", "wall_s_ratio")


def csv_text(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """One CSV row per (panel, policy); comparison columns empty for the base."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for panel, t in tables.items():
        for policy, r in t["policies"].items():
            c = t["comparisons"].get(policy, {})
            row = {"panel": panel, "policy": policy, "base": t["base"], **r, **c}
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", nargs="+", required=True, help="per-task results JSONL files of `evaluate`")
    parser.add_argument("--base", help="the base policy's name (default: evaluation.base)")
    parser.add_argument("--out-dir", required=True, help="where tables.md/.csv/.json and metrics.json go")
    parser.add_argument("--manifest", help="manifest path (default: OUT_DIR/manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    ev = cfg.evaluation
    base = args.base or ev.base
    alpha, confidence = float(ev.alpha), float(ev.confidence)
    manifest = Manifest(stage=STAGE, params={"evaluation": {"base": base, "alpha": alpha, "confidence": confidence}},
                        inputs=list(args.results), code=__name__)
    files = {str(p): read_jsonl(p) for p in args.results}
    grouped, sources = group_results(files)
    tables = paired_tables(grouped, base, sources, alpha, confidence)
    out = Path(args.out_dir)
    paths = [out / "tables.md", out / "tables.csv", out / "tables.json", out / "metrics.json"]
    write_text(paths[0], markdown(tables, confidence))
    write_text(paths[1], csv_text(tables))
    write_json(paths[2], tables)
    write_json(paths[3], metrics(tables))
    manifest.notes = {panel: t["verdict"] for panel, t in tables.items()}
    manifest.write(args.manifest or out / "manifest.json", outputs=paths)
    for panel, t in tables.items():
        log.info("panel %s: %s", panel, t["verdict"])
