"""Stage `report`: one self-contained HTML evidence page from whatever artifacts exist.

Every input is optional; a section whose input was not given is listed as "not part of this
build". Sections, in order: the result (the gate's decision, then per panel its minimal
detectable effect before the verdicts, stated plainly), the paired tables, the failure
attribution (outcome classes per policy and panel, the transitions of each comparison, and how
concentrated the PPO / GRPO training successes were), the DAG (`snakemake --rulegraph` DOT: drawn by graphviz `dot` when it is on
PATH, else by matplotlib in layers; the edges are always listed), the task funnel, the split
digest, the image digests, the base policy (copy pre-training and SFT curves of the tiny
model), the difficulty (pass@k) histogram, the critic curves, the PPO curves, and the sha256 of
every artifact named by the given manifests.

Outputs (in --out-dir): report.html (plots embedded as base64 PNG / inline SVG, no external
file or network access), every plot as its own file (<name>.png, dag.svg with graphviz), a
CSV per plot for `dvc plots` (<name>.csv) and a Snakemake report caption per plot
(<name>.rst); then the manifest. Nothing in the page depends on the time it was built.

Here: the rows each input gives (pure), the HTML, one function per section, and the stage; the
charts are drawn by forgeline.evaluation.charts.
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import logging
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from forgeline.evaluation.attribution import (FAILURE_CLASSES, OUTCOME_CLASSES, concentration_sentence,
                                              training_concentration)
from forgeline.evaluation.charts import (graphviz_svg, plot_copy_curve, plot_critic, plot_dag, plot_difficulty,
                                         plot_funnel, plot_outcomes, plot_ppo, plot_rl_runs, plot_sft_curve,
                                         plot_success, png_bytes)
from forgeline.evaluation.stats import format_p, verdict
from forgeline.provenance import Manifest, atomic_path, read_jsonl, write_text
from forgeline.train.series import SERIES_INDEX, TRAIN_LOG

log = logging.getLogger(__name__)
STAGE = "evaluation.report"


# -- pure: inputs -> rows -------------------------------------------------------------------

def parse_rulegraph(dot: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(rule names sorted, edges (from rule, to rule) sorted) of a `snakemake --rulegraph` DOT
    text (`0[label = "all", ...]` nodes, `1 -> 0` edges); plain `a -> b` names are kept as is."""
    labels = dict(re.findall(r'^\s*"?(\w+)"?\s*\[\s*label\s*=\s*"([^"]*)"', dot, flags=re.M))
    edges = {(labels.get(a, a), labels.get(b, b))
             for a, b in re.findall(r'^\s*"?(\w+)"?\s*->\s*"?(\w+)"?', dot, flags=re.M)}
    names = set(labels.values()) | {n for e in edges for n in e}
    return sorted(names), sorted(edges)


def dag_layers(names: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Rules in layers: a rule's layer is the length of the longest path reaching it (inputs
    first, `all` last); each layer sorted. A cycle (impossible in Snakemake) is an error."""
    preds: dict[str, set[str]] = {n: set() for n in names}
    for a, b in edges:
        preds.setdefault(b, set()).add(a)
        preds.setdefault(a, set())
    depth: dict[str, int] = {}

    def visit(node: str, stack: tuple[str, ...]) -> int:
        if node in stack:
            raise ValueError(f"the rule graph has a cycle through {node}")
        if node not in depth:
            depth[node] = 1 + max((visit(p, stack + (node,)) for p in preds[node]), default=-1)
        return depth[node]

    for n in sorted(preds):
        visit(n, ())
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in sorted(depth):
        layers[depth[n]].append(n)
    return layers


def funnel_steps(funnel: Mapping[str, Any]) -> list[tuple[str, int]]:
    """[(step, tasks)] of a funnel.json (tasks.funnel): candidates (ingested + rejected at
    ingest), ingested, validated, pool, then one step per split."""
    repos = funnel.get("repos", {})
    totals = funnel["totals"]
    steps = [("candidates", sum(r["ingested"] + r["ingest_rejected"] for r in repos.values())),
             ("ingested", totals["ingested"]), ("validated", totals["validated"]), ("pool", totals["pool"])]
    steps += [(f"split: {name}", n) for name, n in sorted(totals.get("split", {}).items())]
    return steps


def funnel_rejections(funnel: Mapping[str, Any]) -> list[tuple[str, int]]:
    """[(stage: check or category, rejected tasks)] of a funnel.json, validation checks first."""
    rows = [(f"validate: {c}", n) for c, n in sorted(funnel.get("validate_rejected_by_check", {}).items())]
    rows += [(f"ingest: {c}", n) for c, n in sorted(funnel.get("ingest_rejected_by_category", {}).items())]
    return rows


def difficulty_rows(report: Mapping[str, Any]) -> list[dict]:
    """[{c, tasks}] of a difficulty report's c_histogram (c = resolved episodes of k)."""
    return [{"c": int(c), "tasks": int(n)} for c, n in sorted(report["c_histogram"].items(), key=lambda kv: int(kv[0]))]


def merge_difficulty(reports: Sequence[Mapping[str, Any]]) -> dict:
    """One difficulty report from several (the per-repository ones of the workflow): histograms
    summed, kept/dropped joined, mean pass@1/pass@k weighted by tasks. Same k and band required."""
    if not reports:
        raise ValueError("no difficulty reports")
    k, band = int(reports[0]["k"]), reports[0].get("band")
    if any(int(r["k"]) != k or r.get("band") != band for r in reports):
        raise ValueError("difficulty reports with different k or band cannot be merged")
    hist: dict[str, int] = {}
    for r in reports:
        for c, n in r["c_histogram"].items():
            hist[str(c)] = hist.get(str(c), 0) + int(n)
    out: dict[str, Any] = {"k": k, "band": band,
                           "c_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
                           "screened_out": sorted(t for r in reports for t in r.get("screened_out", [])),
                           "kept": sorted(t for r in reports for t in r.get("kept", [])),
                           "dropped": sorted(t for r in reports for t in r.get("dropped", []))}
    # pass@1 over every task, pass@k over those that got all k episodes (the histogram's)
    weights = {"mean_pass@1": [len(r.get("tasks", {})) for r in reports],
               f"mean_pass@{k}": [sum(int(n) for n in r["c_histogram"].values()) for r in reports]}
    for key, n in weights.items():
        vals = [(r.get(key), w) for r, w in zip(reports, n) if r.get(key) is not None and w]
        out[key] = sum(v * w for v, w in vals) / sum(w for _, w in vals) if vals else None
    return out


CRITIC_COLUMNS = ("epoch", "train_mse", "val_mse", "train_ev", "val_ev")


def critic_rows(critic: Mapping[str, Any]) -> list[dict]:
    """[{epoch, train_mse, val_mse, train_ev, val_ev}] of a critic metrics.json, by epoch."""
    return [{k: e.get(k) for k in CRITIC_COLUMNS} for e in sorted(critic.get("epochs", []), key=lambda e: e["epoch"])]


PPO_COLUMNS = ("step", "reward_mean", "success_rate", "kl", "ev", "clip_frac", "entropy", "value_loss",
               "policy_loss", "episodes", "kept", "tokens")


def ppo_rows(log_lines: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """(rows, gates) of a PPO train_log.jsonl: one row per step with PPO_COLUMNS and one
    `drops_<gate>` column per gate seen in any step (0 where a step has none), by step."""
    gates = sorted({g for line in log_lines for g in (line.get("drops") or {})})
    rows = []
    for line in sorted(log_lines, key=lambda x: x["step"]):
        row = {k: line.get(k) for k in PPO_COLUMNS}
        row.update({f"drops_{g}": int((line.get("drops") or {}).get(g, 0)) for g in gates})
        rows.append(row)
    return rows, gates


RL_COLUMNS = ("run", "step", "success_rate", "kl", "clip_frac", "dropped")


def rl_rows(runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> list[dict]:
    """One row per (run, step) of the RL runs' train logs with RL_COLUMNS; `dropped` is the share
    of the step's training signal left out: GRPO's groups without signal where the log counts
    groups, else the episodes that failed a validity gate."""
    rows = []
    for run, lines in runs:
        for line in sorted(lines, key=lambda x: x["step"]):
            if "groups" in line:
                dropped = line["groups_dropped"] / line["groups"] if line["groups"] else None
            else:
                dropped = sum((line.get("drops") or {}).values()) / line["episodes"] if line.get("episodes") else None
            rows.append({"run": run, "step": line["step"], **{k: line.get(k) for k in ("success_rate", "kl", "clip_frac")},
                         "dropped": dropped})
    return rows


SERIES_COLUMNS = ("run", "step", "checkpoint", "success_rate", "kl", "evaluated_as", "evaluated")


def series_rows(series: Sequence[tuple[str, str, Sequence[Mapping[str, Any]]]],
                policies: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, Any] | None) -> list[dict]:
    """The checkpoint series table: per run (name, folder, its checkpoints.json) and checkpoint,
    the train log's success rate and KL at that step, and the evaluation policies that are that
    checkpoint (`policies`: name -> {path, step}; the final adapter is its last checkpoint) with
    their success per panel (metrics.json)."""
    rows = []
    for run, folder, entries in series:
        last = max((e["step"] for e in entries), default=None)
        for e in entries:
            names = sorted(n for n, p in policies.items() if p["path"].rstrip("/") == folder.rstrip("/")
                           and (p.get("step") or last) == e["step"])
            scores = [f"{panel}: {_fmt(metrics[panel][n]['success_rate'])} ({n})" for n in names
                      for panel in sorted(metrics or {}) if n in (metrics or {}).get(panel, {})]
            rows.append({"run": run, "step": e["step"], "checkpoint": f"{folder}/{e['path']}",
                         "success_rate": e.get("success_rate"), "kl": e.get("kl"),
                         "evaluated_as": ", ".join(names), "evaluated": "; ".join(scores)})
    return rows


COPY_COLUMNS = ("step", "phase", "loss", "copy_accuracy", "lr")


def copy_rows(curve: Sequence[Mapping[str, Any]]) -> list[dict]:
    """[{step, phase, loss, copy_accuracy, lr}] of a copy_curve.json (policy.copy_pretrain: a point
    every `log_every` steps and at each phase's end; loss in nats per copied id and the share of
    copied ids predicted exactly, both averaged over the steps since the previous point), by step."""
    return [{k: p.get(k) for k in COPY_COLUMNS} for p in sorted(curve, key=lambda p: p["step"])]


def copy_phase_ends(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """[{phase, steps, last_step, loss, copy_accuracy}]: each phase's last point, in training
    order; steps = optimizer steps the phase ran (`repeat` may stop early at its accuracy)."""
    ends: list[dict] = []
    for r, after in zip(rows, [*rows[1:], None]):
        if after is None or after["phase"] != r["phase"]:
            start = ends[-1]["last_step"] if ends else 0
            ends.append({"phase": r["phase"], "steps": r["step"] - start, "last_step": r["step"],
                         "loss": r["loss"], "copy_accuracy": r["copy_accuracy"]})
    return ends


SFT_COLUMNS = ("step", "epoch", "loss", "loss_mean", "tokens", "examples", "lr", "grad_norm")
SFT_MEAN_STEPS = 20  # the window of the sft stage's own loss_curve.png


def sft_rows(curve: Sequence[Mapping[str, Any]], window: int = SFT_MEAN_STEPS) -> list[dict]:
    """[{step, epoch, loss, loss_mean, tokens, examples, lr, grad_norm}] of an SFT loss_curve.json
    (train.sft: one point per optimizer step, loss in nats per action token, tokens = action
    tokens), by step; loss_mean is the mean loss of the last `window` steps (fewer at the start)."""
    points = sorted(curve, key=lambda p: p["step"])
    losses = [p["loss"] for p in points]
    rows = []
    for i, p in enumerate(points):
        recent = losses[max(0, i - window + 1):i + 1]
        rows.append({**{k: p.get(k) for k in SFT_COLUMNS}, "loss_mean": round(sum(recent) / len(recent), 6)})
    return rows


def artifact_rows(manifests: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """[{stage, manifest, path, kind, bytes, sha256}] of every output named by the manifests,
    sorted by path (a directory output has kind "dir" and its tree digest)."""
    rows = []
    for mpath, m in manifests.items():
        for o in m.get("outputs", []):
            rows.append({"stage": m.get("stage", "?"), "manifest": mpath, "path": o["path"],
                         "kind": o.get("kind", "file"), "bytes": o.get("bytes"), "sha256": o["sha256"]})
    return sorted(rows, key=lambda r: (r["path"], r["manifest"]))


PANEL_KEYS = ("mde", "gate")  # a panel's own entries in metrics.json (forgeline.params.RESERVED_POLICY_NAMES)


def metrics_policies(panel: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """{policy: row} of one panel of a tables metrics.json."""
    return {n: r for n, r in panel.items() if "_vs_" not in n and n not in PANEL_KEYS}


def metrics_comparisons(panel: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """{"<policy>_vs_<against>": numbers} of one panel of a tables metrics.json."""
    return {n: c for n, c in panel.items() if "_vs_" in n}


def result_statements(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """{panel: [sentence]} from a tables metrics.json: each policy's success (k/n, %, CI) and
    each comparison's verdict (the same sentence as tables.md, from stats.verdict)."""
    out: dict[str, list[str]] = {}
    for panel in sorted(metrics):
        m = metrics[panel]
        lines = []
        for name, row in metrics_policies(m).items():
            lines.append(f"{name} resolved {row['resolved']}/{row['n']} "
                         f"({100 * row['success_rate']:.1f}%, {row.get('confidence', 0.95):.0%} CI "
                         f"{100 * row['ci_low']:.1f}-{100 * row['ci_high']:.1f}%)")
        for name, c in metrics_comparisons(m).items():
            other, base = name.split("_vs_", 1)
            task = {k[len("task_"):]: v for k, v in c.items()
                    if k.startswith("task_") and k not in ("task_significant", "task_p_holm")} or None
            several = c.get("holm_m", 1) > 1  # the verdict names Holm only where it adjusted anything
            lines.append(verdict(other, base, c["wins"], c["ties"], c["losses"], c["mcnemar_p"],
                                 c.get("alpha", 0.05), task, c.get("mcnemar_p_holm") if several else None,
                                 c.get("task_p_holm") if several else None))
        out[panel] = lines
    return out


def success_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """[{panel, policy, n, resolved, success_rate, ci_low, ci_high}] of a tables metrics.json."""
    return [{"panel": panel, "policy": name, **{k: row[k] for k in ("n", "resolved", "success_rate", "ci_low", "ci_high")}}
            for panel in sorted(metrics) for name, row in metrics_policies(metrics[panel]).items()]


def outcome_rows(tables: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """[{panel, policy, class, episodes, share}] of a tables.json: how each policy's episodes
    ended on each panel (every class of attribution.OUTCOME_CLASSES, 0 included)."""
    rows = []
    for panel in sorted(tables):
        for policy, r in tables[panel]["policies"].items():
            total = sum(r["outcomes"].values())
            rows += [{"panel": panel, "policy": policy, "class": c, "episodes": r["outcomes"][c],
                      "share": round(r["outcomes"][c] / total, 6) if total else 0.0} for c in OUTCOME_CLASSES]
    return rows


def transition_rows(table: Mapping[str, Any]) -> list[dict]:
    """[{failure, <comparison> wins, <comparison> losses, ...}] of one panel of a tables.json:
    per failure class, the pairs the reference failed that way and the other solved (wins), and
    the pairs the reference solved and the other failed that way (losses)."""
    rows = []
    for f in FAILURE_CLASSES:
        row: dict[str, Any] = {"failure": f}
        for c in table["comparisons"].values():
            name = f"{c['policy']} vs {c['against']}"
            row[f"{name}: wins"] = c["transitions"]["wins_from"][f]
            row[f"{name}: losses"] = c["transitions"]["losses_to"][f]
        rows.append(row)
    return rows


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """rows as CSV with the given columns (None -> empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return buf.getvalue()


# -- HTML -----------------------------------------------------------------------------------

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}
th{background:#f3f3f3}code,.mono{font-family:ui-monospace,monospace;font-size:.85em}
.result{background:#f5f9ff;border-left:4px solid #4477aa;padding:.6em 1em}.missing{color:#888}
img,svg{max-width:100%;height:auto}nav a{margin-right:.8em}"""


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], mono: Iterable[str] = ()) -> str:
    mono = set(mono)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(
        f"<td class=mono>{esc(r.get(c))}</td>" if c in mono else f"<td>{esc(_fmt(r.get(c)))}</td>"
        for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(x: Any) -> Any:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return x


def img_tag(png: bytes, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def page(title: str, sections: Sequence[tuple[str, str, str]], missing: Sequence[str]) -> str:
    """The HTML page from (anchor, heading, body HTML) sections."""
    nav = "".join(f'<a href="#{a}">{esc(h)}</a>' for a, h, _ in sections)
    miss = (f'<p class=missing>Not part of this build: {esc(", ".join(missing))}.</p>' if missing else "")
    body = "".join(f'<section id="{a}"><h2>{esc(h)}</h2>{b}</section>' for a, h, b in sections)
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1><nav>{nav}</nav>{miss}{body}</body></html>\n")


# -- the stage ------------------------------------------------------------------------------

CAPTIONS = {
    "success": "Success rate (resolved tasks, %) of each policy on each panel, with its confidence interval "
               "(Wilson score). Paired comparisons and their exact McNemar p-values are in the tables.",
    "dag": "The workflow's rule graph (``snakemake --rulegraph``): each box is a rule, each arrow an input.",
    "funnel": "The task funnel: candidates, ingested, validated, in the RL pool, per split; and the tasks "
              "rejected by each check.",
    "difficulty": "Difficulty filter: pool tasks by the number c of resolved episodes out of k; green bars "
                  "are inside the kept band.",
    "copy_curve": "Copy pre-training of the tiny base policy on random ids, per step: the loss on the copied "
                  "ids and the share of them predicted exactly, one colour per phase (repeat, recall, match); "
                  "dotted lines where a phase ends.",
    "sft_curve": "SFT of the tiny base policy on agent trajectories: the loss on the action tokens per "
                 f"optimizer step and its {SFT_MEAN_STEPS}-step moving mean.",
    "critic_curve": "Critic training: value MSE and explained variance per epoch on train and validation "
                    "episodes; the dashed line is the chosen epoch, the dotted one the mean-return baseline.",
    "outcomes": "How the episodes ended, per panel and policy: the share of each outcome class (solved, wrong "
                "fix, invalid call, step limit, timeout, context exceeded, sandbox error; "
                "forgeline.evaluation.attribution).",
    "rl_curves": "The RL runs side by side per step (PPO, GRPO and any warm start, which goes on from its "
                 "parent's step): success rate of the step's episodes, KL to the base policy, clip fraction, and "
                 "the share of the step's signal dropped (PPO: episodes failing a validity gate; GRPO: groups "
                 "whose episodes all got the same reward).",
    "ppo_curve": "PPO training per step: mean reward, success rate, KL to the reference policy, the critic's "
                 "explained variance, the clip fraction and the episodes dropped by each gate.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", required=True, help="the report folder (report.html, plots, CSVs, captions)")
    parser.add_argument("--title", default="forgeline evidence report")
    parser.add_argument("--dag", help="`snakemake --rulegraph` output (DOT text)")
    parser.add_argument("--funnel", help="results/tasks/funnel.json")
    parser.add_argument("--split", help="split.json of the split stage")
    parser.add_argument("--images", nargs="*", default=[], help="image records results/images/<repo>.json")
    parser.add_argument("--difficulty", nargs="*", default=[],
                        help="difficulty report JSON(s), e.g. one per repository (merged)")
    parser.add_argument("--copy-curve", help="copy_curve.json of policy-init (the tiny base policy's copying)")
    parser.add_argument("--sft-curve", help="loss_curve.json of sft (the tiny base policy's SFT)")
    parser.add_argument("--critic", help="the critic's metrics.json")
    parser.add_argument("--runs", nargs="*", default=[], metavar="NAME=DIR",
                        help="RL runs' adapter folders (train_log.jsonl, checkpoints.json), e.g. ppo=results/adapter "
                             "grpo=results/adapter-grpo: their curves side by side, the checkpoint series, where "
                             "the training successes came from; the run named ppo also gets PPO's own section")
    parser.add_argument("--metrics", help="metrics.json of the tables stage")
    parser.add_argument("--tables-json", help="tables.json of the tables stage (detectable effects, failure "
                                              "attribution, the gate's decision)")
    parser.add_argument("--tables-md", help="tables.md of the tables stage (shown as is)")
    parser.add_argument("--manifests", nargs="*", default=[], help="manifests whose outputs get a sha256 row")
    parser.add_argument("--manifest", help="manifest path (default: OUT_DIR/manifest.json)")


def _read_json(path: str) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _read_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


class Report:
    """The page being built: its sections in order, the inputs it was not given, and the files
    written beside it (plots, their CSVs and captions)."""

    def __init__(self) -> None:
        self.sections: list[tuple[str, str, str]] = []  # (anchor, heading, body HTML)
        self.missing: list[str] = []
        self.files: dict[str, bytes | str] = {}

    def load(self, path: str | None, what: str, read=_read_json) -> Any:
        """The input at `path` (read with `read`), or None, noting `what` as missing, when none was given."""
        if not path:
            self.missing.append(what)
            return None
        return read(path)

    def load_each(self, paths: Sequence[str], what: str) -> list[tuple[str, Any]] | None:
        """[(path, JSON)] of several inputs in the given order, or None (and `what` missing) if none."""
        if not paths:
            self.missing.append(what)
            return None
        return [(p, _read_json(p)) for p in paths]

    def section(self, anchor: str, heading: str, body: str) -> None:
        self.sections.append((anchor, heading, body))

    def figure(self, name: str, fig, rows: Sequence[Mapping[str, Any]] | None = None,
               columns: Sequence[str] = ()) -> str:
        """Keep the figure as <name>.png with its caption <name>.rst (and its rows as <name>.csv);
        returns the <img> tag that embeds it."""
        png = png_bytes(fig)
        self.files[f"{name}.png"] = png
        self.files[f"{name}.rst"] = CAPTIONS[name] + "\n"
        if rows is not None:
            self.files[f"{name}.csv"] = csv_text(rows, columns)
        return img_tag(png, name)


# -- the sections, in page order ------------------------------------------------------------

POLICY_COLUMNS = ("policy", "resolved", "n", "success_rate", "ci_low", "ci_high", "mean_input_tokens",
                  "input_tokens_ratio", "mean_steps", "steps_ratio", "mean_wall_s", "wall_s_ratio")
COMPARISON_COLUMNS = ("comparison", "wins", "ties", "losses", "mcnemar_p", "mcnemar_p_holm", "task_up", "task_same",
                      "task_down", "task_p", "task_p_holm", "significant", "task_significant", "input_tokens_ratio",
                      "steps_ratio", "wall_s_ratio")
OUTCOME_COLUMNS = ("panel", "policy", "class", "episodes", "share")
CONCENTRATION_COLUMNS = ("run", "steps", "episodes", "successes", "tasks_solved", "top_task", "top_successes",
                         "top_share")
SUCCESS_COLUMNS = ("panel", "policy", "n", "resolved", "success_rate", "ci_low", "ci_high")
TESTS_NOTE = ("<p>McNemar p: exact two-sided binomial test on the discordant pairs; `significant` "
              "answers the question on this panel's tasks. With several seeds per task, task_p asks "
              "whether the difference carries over to tasks as a sample (the exact paired sign-flip test "
              "of the per-task success-rate differences; `task_significant`). With several comparisons on a panel, "
              "the _holm columns are Holm-adjusted over that panel's comparisons and `significant` reads them. "
              "The ratios are the policy's mean over the reference's. Runtime (wall_s) is machine-dependent.</p>")


def result_section(report: Report, metrics: Mapping[str, Any] | None,
                   tables: Mapping[str, Any] | None = None) -> None:
    """The result, stated plainly (always on the page): the gate's decision, then per panel what
    it could detect at all, its success rates and verdicts."""
    if metrics is None:
        report.section("result", "Result", "<p>No evaluation tables were given: there is no result to state.</p>")
        return
    gates = [t["gate"] for t in (tables or {}).values() if t.get("gate")]
    body = "".join(f"<div class=result><b>Decision: {esc(g['decision'])}.</b> {esc(g['reason'])}.</div>" for g in gates)
    for panel, lines in result_statements(metrics).items():
        mde = ((tables or {}).get(panel) or {}).get("mde")
        before = f"<p><i>Detectable effect:</i> {esc(mde['sentence'])}</p>" if mde else ""
        body += (f"<div class=result><b>Panel {esc(panel)}:</b>{before}<ul>"
                 + "".join(f"<li>{esc(s)}.</li>" for s in lines) + "</ul></div>")
    report.section("result", "Result", body or "<p>The tables hold no panel.</p>")


def tables_section(report: Report, metrics: Mapping[str, Any] | None, tables_md: str | None) -> None:
    """Per panel: the policies' success and cost, the paired comparisons; the success plot; tables.md."""
    if metrics is None:
        return
    body = ""
    for panel in sorted(metrics):
        pol = [{"policy": n, **r} for n, r in metrics_policies(metrics[panel]).items()]
        cmp_ = [{"comparison": n, **c, **{k: format_p(c[k]) + f" ({c[k]:.4g})" for k in
                                          ("mcnemar_p", "mcnemar_p_holm", "task_p", "task_p_holm") if k in c}}
                for n, c in metrics_comparisons(metrics[panel]).items()]
        body += (f"<h3>Panel {esc(panel)}</h3>" + html_table(pol, POLICY_COLUMNS)
                 + (html_table(cmp_, COMPARISON_COLUMNS) if cmp_ else ""))
    success = success_rows(metrics)
    body += report.figure("success", plot_success(success), success, SUCCESS_COLUMNS)
    body += TESTS_NOTE
    if tables_md is not None:
        body += f"<details><summary>tables.md</summary><pre>{esc(tables_md)}</pre></details>"
    report.section("tables", "Paired evaluation tables", body)


def attribution_section(report: Report, tables: Mapping[str, Any] | None,
                        logs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
    """How episodes ended (plot and counts per panel and policy), the transitions behind each
    comparison's wins and losses, and how concentrated the training successes were."""
    body = ""
    if tables is not None:
        rows = outcome_rows(tables)
        body += report.figure("outcomes", plot_outcomes(rows, OUTCOME_CLASSES), rows, OUTCOME_COLUMNS)
        for panel in sorted(tables):
            t = tables[panel]
            counts = [{"policy": n, **r["outcomes"]} for n, r in t["policies"].items()]
            body += f"<h3>Panel {esc(panel)}</h3>" + html_table(counts, ("policy", *OUTCOME_CLASSES))
            if t["comparisons"]:
                trans = transition_rows(t)
                body += ("<p>Transitions: per failure class, the pairs the reference failed that way and the other "
                         "policy solved (its wins), and the pairs the reference solved and the other failed that "
                         "way (its losses).</p>" + html_table(trans, list(trans[0])))
    runs = [{"run": name, **training_concentration(lines)} for name, lines in logs]
    if runs:
        body += ("<h3>Training successes</h3><ul>"
                 + "".join(f"<li>{esc(concentration_sentence(r['run'], r))}.</li>" for r in runs) + "</ul>"
                 + html_table(runs, CONCENTRATION_COLUMNS)
                 + "<p>A run whose successes sit on one task learned that task, if anything: its training "
                   "success rate says little about the others (the original PPO run: 16 of 32 on one task).</p>")
    if body:
        report.section("attribution", "Failure attribution", body)


def dag_section(report: Report, dot_text: str | None) -> None:
    """The rule graph: drawn by graphviz when installed, else by matplotlib; its edges listed."""
    if dot_text is None:
        return
    names, edges = parse_rulegraph(dot_text)
    svg = graphviz_svg(dot_text) if names else None
    if not names:  # e.g. `snakemake --rulegraph` failed and left an empty file
        picture = "<p>The rule graph file names no rules.</p>"
    elif svg is not None:
        report.files["dag.svg"] = svg
        report.files["dag.rst"] = CAPTIONS["dag"] + "\n"
        picture = svg
    else:
        picture = report.figure("dag", plot_dag(dag_layers(names, edges), edges))
    edge_list = "".join(f"<li><code>{esc(a)}</code> &rarr; <code>{esc(b)}</code></li>" for a, b in edges)
    drawn = f" (drawn by {'graphviz' if svg else 'matplotlib'})" if names else ""
    report.section("dag", "Workflow DAG",
                   f"{picture}<p>{len(names)} rules, {len(edges)} edges{drawn}:</p><ul>{edge_list}</ul>")


def funnel_section(report: Report, funnel: Mapping[str, Any] | None) -> None:
    """Tasks at each step and rejections per check (plot), per repository (table)."""
    if funnel is None:
        return
    steps, rej = funnel_steps(funnel), funnel_rejections(funnel)
    rows = [{"step": s, "tasks": n} for s, n in steps + rej]
    per_repo = [{"repo": r, **{k: v for k, v in d.items() if k != "validate_rejected"},
                 "validate_rejected": sum(d.get("validate_rejected", {}).values())}
                for r, d in sorted(funnel.get("repos", {}).items())]
    report.section("funnel", "Task funnel",
                   report.figure("funnel", plot_funnel(steps, rej), rows, ("step", "tasks"))
                   + html_table(per_repo, ("repo", "role", "ingested", "ingest_rejected", "validated",
                                           "validate_rejected"))
                   + f"<p>Split digest named by the funnel: <code>{esc(funnel.get('split_digest'))}</code></p>")


def split_section(report: Report, split: Mapping[str, Any] | None) -> None:
    """The frozen split's digest, how it is defined, and each split's size."""
    if split is None:
        return
    rows = [{"split": s, "tasks": split["counts"].get(s), "share": split.get("shares", {}).get(s),
             "fraction": split.get("fractions", {}).get(s), "repos": ", ".join(split.get("repos", {}).get(s, []))}
            for s in sorted(split["counts"])]
    report.section("split", "Frozen split", f"<p>Digest <code>{esc(split['digest'])}</code> "
                   f"(scheme <code>{esc(split.get('digest_scheme'))}</code>, seed {esc(split.get('seed'))}; "
                   f"defined by {esc(', '.join(split.get('defining_fields', [])))}).</p>"
                   + html_table(rows, ("split", "tasks", "share", "fraction", "repos")))


def images_section(report: Report, records: Sequence[tuple[str, Mapping[str, Any]]] | None) -> None:
    """One row per repository image: its commit, tag, id, base image and build-input digest."""
    if records is None:
        return
    recs = sorted((r for _, r in records), key=lambda r: r.get("repo", ""))
    report.section("images", "Task images", html_table(
        recs, ("repo", "commit", "tag", "image_id", "base_image", "build_input_digest"),
        mono=("commit", "image_id", "build_input_digest")))


def base_policy_section(report: Report, copy_curve: Sequence[Mapping[str, Any]] | None,
                        sft_curve: Sequence[Mapping[str, Any]] | None) -> None:
    """How the tiny base policy was made here: copy pre-training, then SFT (absent: a hub model)."""
    body = ""
    if copy_curve is not None:
        rows = copy_rows(copy_curve)
        ends = copy_phase_ends(rows)
        body += (report.figure("copy_curve", plot_copy_curve(rows, ends), rows, COPY_COLUMNS)
                 + "<p>Final copy accuracy per phase: "
                 + ", ".join(f"{esc(e['phase'])} {100 * e['copy_accuracy']:.1f}%" for e in ends) + ".</p>"
                 + html_table(ends, ("phase", "steps", "last_step", "loss", "copy_accuracy")))
    if sft_curve is not None:
        rows = sft_rows(sft_curve)
        first, last = rows[0], rows[-1]
        epochs = len({r["epoch"] for r in rows})
        body += (report.figure("sft_curve", plot_sft_curve(rows, SFT_MEAN_STEPS), rows, SFT_COLUMNS)
                 + f"<p>SFT: {len(rows)} steps over {epochs} epoch{'s' if epochs > 1 else ''}, "
                   f"{sum(r['tokens'] for r in rows):,} action tokens; loss {first['loss']:.3f} at step "
                   f"{first['step']} &rarr; {last['loss']:.3f} at step {last['step']} "
                   f"({SFT_MEAN_STEPS}-step mean {last['loss_mean']:.3f}).</p>")
    if body:
        report.section("base", "Base policy", body)


def difficulty_section(report: Report, reports: Sequence[tuple[str, Mapping[str, Any]]] | None) -> None:
    """The pass@k histogram of the pool (per-repository reports merged) and what was kept."""
    if reports is None:
        return
    rep = merge_difficulty([r for _, r in reports])
    k = int(rep["k"])
    rows = difficulty_rows(rep)
    band = rep.get("band")
    report.section("difficulty", "Difficulty (pass@k)",
                   report.figure("difficulty", plot_difficulty(rows, k, band), rows, ("c", "tasks"))
                   + f"<p>{len(rep.get('kept', []))} task(s) kept, {len(rep.get('dropped', []))} dropped "
                     f"(band {esc(band)}), {len(rep['screened_out'])} of them by the screen (none of "
                     f"their first episodes solved; not in the histogram); mean pass@1 "
                     f"{_fmt(rep.get('mean_pass@1'))}, mean pass@{k} {_fmt(rep.get(f'mean_pass@{k}'))} "
                     f"(the histogram's tasks).</p>")


def critic_section(report: Report, critic: Mapping[str, Any] | None) -> None:
    """The critic's curves per epoch, the chosen epoch, and its val/test metrics."""
    if critic is None:
        return
    rows = critic_rows(critic)
    summary = [{"split": s, **{k: critic.get(s, {}).get(k) for k in ("mse", "ev", "baseline_mse", "episodes", "tasks")}}
               for s in ("val", "test") if s in critic]
    report.section("critic", "Critic",
                   report.figure("critic_curve", plot_critic(rows, critic.get("chosen_epoch"),
                                                             (critic.get("val") or {}).get("baseline_mse")),
                                 rows, CRITIC_COLUMNS)
                   + f"<p>Chosen epoch: {esc(critic.get('chosen_epoch'))}.</p>"
                   + html_table(summary, ("split", "mse", "ev", "baseline_mse", "episodes", "tasks")))


def rl_section(report: Report, runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
               series: Sequence[tuple[str, str, Sequence[Mapping[str, Any]]]],
               policies: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, Any] | None) -> None:
    """The RL runs' curves side by side and their checkpoint series (which checkpoints the
    evaluation ran, and how they did)."""
    if not runs:
        return
    rows = rl_rows(runs)
    table = series_rows(series, policies, metrics)
    report.section("rl", "RL runs and checkpoints",
                   report.figure("rl_curves", plot_rl_runs(rows, [name for name, _ in runs]), rows, RL_COLUMNS)
                   + "<h3>Checkpoint series</h3><p>Each run keeps an adapter at every checkpoint step "
                     "(<code>checkpoints/step-NNNNNN/</code> of its folder); success rate and KL are of that step's "
                     "training episodes; <em>evaluated</em>: the policies of the evaluation that are that checkpoint, "
                     "with their success rate per panel.</p>"
                   + html_table(table, SERIES_COLUMNS, mono=("checkpoint",)))


def ppo_section(report: Report, log_lines: Sequence[Mapping[str, Any]] | None) -> None:
    """PPO's curves per step and where its last step ended."""
    if log_lines is None:
        return
    rows, gates = ppo_rows(log_lines)
    last = rows[-1] if rows else {}
    report.section("ppo", "PPO",
                   report.figure("ppo_curve", plot_ppo(rows, gates), rows,
                                 (*PPO_COLUMNS, *(f"drops_{g}" for g in gates)))
                   + f"<p>{len(rows)} steps; last step: reward {_fmt(last.get('reward_mean'))}, "
                     f"success rate {_fmt(last.get('success_rate'))}, KL {_fmt(last.get('kl'))}.</p>")


def artifacts_section(report: Report, manifests: Sequence[tuple[str, Mapping[str, Any]]] | None) -> None:
    """The sha256 of every output the given manifests name."""
    if manifests is None:
        return
    rows = artifact_rows(dict(manifests))
    report.section("artifacts", "Artifacts (sha256)",
                   html_table(rows, ("path", "stage", "kind", "bytes", "sha256"), mono=("path", "sha256")))


def run_folders(specs: Sequence[str]) -> list[tuple[str, str]]:
    """[(name, folder)] of --runs NAME=DIR, in the given order."""
    out = []
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise SystemExit(f"--runs {spec!r}: expected NAME=DIR, e.g. ppo=results/adapter")
        out.append((name, folder))
    return out


def build(args: argparse.Namespace, policies: Mapping[str, Mapping[str, Any]] | None = None
          ) -> tuple[str, dict[str, bytes | str]]:
    """(the HTML page, {file name: content} of the plots, CSVs and captions) from the inputs;
    `policies` (evaluation.policies: name -> {path, step}) name the evaluated checkpoints."""
    report = Report()
    metrics = report.load(args.metrics, "evaluation tables")
    tables = report.load(args.tables_json, "failure attribution")
    result_section(report, metrics, tables)
    tables_section(report, metrics, _read_text(args.tables_md) if metrics is not None and args.tables_md else None)
    runs = [(name, folder, read_jsonl(Path(folder) / TRAIN_LOG)) for name, folder in run_folders(args.runs)]
    if not runs:
        report.missing.append("RL runs")
    attribution_section(report, tables, [(name, lines) for name, _, lines in runs])
    dag_section(report, report.load(args.dag, "DAG", _read_text))
    funnel_section(report, report.load(args.funnel, "task funnel"))
    split_section(report, report.load(args.split, "split"))
    images_section(report, report.load_each(args.images, "images"))
    base_policy_section(report, report.load(args.copy_curve, "copy pre-training curve"),
                        report.load(args.sft_curve, "SFT loss curve"))
    difficulty_section(report, report.load_each(args.difficulty, "difficulty"))
    critic_section(report, report.load(args.critic, "critic metrics"))
    series = [(name, folder, _read_json(Path(folder) / SERIES_INDEX)) for name, folder, _ in runs
              if (Path(folder) / SERIES_INDEX).is_file()]
    rl_section(report, [(name, lines) for name, _, lines in runs], series, policies or {}, metrics)
    ppo_section(report, next((lines for name, _, lines in runs if name == "ppo"), None))
    artifacts_section(report, report.load_each(sorted(args.manifests), "artifact manifests"))
    return page(args.title, report.sections, report.missing), report.files


def run(cfg, args: argparse.Namespace) -> None:
    inputs = [p for p in (args.dag, args.funnel, args.split, args.copy_curve, args.sft_curve, args.critic,
                          args.metrics, args.tables_md, args.tables_json) if p] \
        + [folder for _, folder in run_folders(args.runs)] + list(args.difficulty) + list(args.images) \
        + list(args.manifests)
    manifest = Manifest(stage=STAGE, inputs=inputs, code=__name__)
    policies = {name: {"path": p.path, "step": p.step} for name, p in cfg.evaluation.policies.items()} \
        if "evaluation" in cfg.data else {}
    with manifest.timed("build"):
        text, files = build(args, policies)
    out = Path(args.out_dir)
    outputs = []
    for name in sorted(files):
        content = files[name]
        if isinstance(content, bytes):
            with atomic_path(out / name) as tmp:
                tmp.write_bytes(content)
        else:
            write_text(out / name, content)
        outputs.append(out / name)
    write_text(out / "report.html", text)
    outputs.append(out / "report.html")
    manifest.notes = {"plots": sorted(n for n in files if n.endswith((".png", ".svg")))}
    manifest.write(args.manifest or out / "manifest.json", outputs=outputs)
    log.info("report: %s (%d plot files)", out / "report.html", len(manifest.notes["plots"]))
