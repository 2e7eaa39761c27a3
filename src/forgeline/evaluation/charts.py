"""The evidence report's charts: matplotlib figures drawn from the report's rows, and the DAG by graphviz.

Each `plot_*` takes the rows that forgeline.evaluation.report computes from a stage's output and
returns a figure; `png_bytes` turns it into the PNG the page embeds (no metadata: the same rows
give the same bytes). `graphviz_svg` draws the rule graph with graphviz's `dot` where installed.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
from typing import Any, Mapping, Sequence

from forgeline import plots

log = logging.getLogger(__name__)

REPORT_RC = {"svg.hashsalt": "forgeline", "font.size": 9}  # every figure of the report


def _plt():
    return plots.pyplot(REPORT_RC)


def png_bytes(fig) -> bytes:
    """The figure as the page shows it (110 dpi, cropped to its content), then closed."""
    data = plots.png_bytes(fig, dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return data

def plot_dag(layers: Sequence[Sequence[str]], edges: Sequence[tuple[str, str]]):
    """The rule graph drawn in layers (top: inputs, bottom: `all`), arrows between rules."""
    plt = _plt()
    width = max((len(layer) for layer in layers), default=1)
    fig, ax = plt.subplots(figsize=(max(4, 1.7 * width), max(2, 0.9 * len(layers))))
    pos = {}
    for y, layer in enumerate(layers):
        for x, name in enumerate(layer):
            pos[name] = ((x + 0.5) * width / len(layer), -y)
    for a, b in edges:
        ax.annotate("", xy=pos[b], xytext=pos[a],
                    arrowprops={"arrowstyle": "-|>", "color": "grey", "shrinkA": 11, "shrinkB": 11, "lw": 1})
    for name, (x, y) in pos.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "white", "ec": "#4477aa", "lw": 1.5})
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-len(layers) + 0.5, 0.5)
    ax.axis("off")
    return fig


def plot_funnel(steps: Sequence[tuple[str, int]], rejections: Sequence[tuple[str, int]]):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * max(len(steps), len(rejections), 3) + 1.2))
    for ax, rows, title, color in ((axes[0], steps, "tasks at each step", "#4477aa"),
                                   (axes[1], rejections, "rejections per check", "#cc6677")):
        ax.barh(range(len(rows)), [r[1] for r in rows], color=color)
        ax.set_yticks(range(len(rows)), [r[0] for r in rows])
        ax.invert_yaxis()
        for i, (_, v) in enumerate(rows):
            ax.text(v, i, f" {v}", va="center", fontsize=8)
        ax.set_title(title)
        ax.set_xlabel("tasks")
    fig.tight_layout()
    return fig


def plot_difficulty(rows: Sequence[Mapping[str, int]], k: int, band: Sequence[float] | None):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3))
    cs = [r["c"] for r in rows]
    kept = [band is not None and band[0] <= r["c"] / k <= band[1] for r in rows] if k else [False] * len(rows)
    ax.bar(cs, [r["tasks"] for r in rows], color=["#228833" if x else "#bbbbbb" for x in kept])
    ax.set_xticks(cs)
    ax.set_xlabel(f"c = resolved episodes of k = {k}")
    ax.set_ylabel("tasks")
    ax.set_title("difficulty: tasks by successes (green: kept, in the band)")
    return fig


def plot_critic(rows: Sequence[Mapping[str, Any]], chosen: int | None, baseline_mse: float | None):
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    ep = [r["epoch"] for r in rows]
    for ax, metric, title in ((a, "mse", "value MSE"), (b, "ev", "explained variance")):
        for split, style in (("train", "-o"), ("val", "-s")):
            ys = [r[f"{split}_{metric}"] for r in rows]
            if any(y is not None for y in ys):
                ax.plot(ep, [float("nan") if y is None else y for y in ys], style, ms=3, label=split)
        if chosen is not None:
            ax.axvline(chosen, color="grey", ls="--", lw=1, label=f"chosen epoch {chosen}")
        ax.set_xlabel("epoch")
        ax.set_title(title)
    if baseline_mse is not None:
        a.axhline(baseline_mse, color="#cc6677", ls=":", lw=1, label="val baseline (mean return)")
    b.axhline(0, color="black", lw=0.5)
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_ppo(rows: Sequence[Mapping[str, Any]], gates: Sequence[str]):
    plt = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.5))
    steps = [r["step"] for r in rows]
    panels = (("reward_mean", "mean reward"), ("success_rate", "success rate"), ("kl", "KL to the reference"),
              ("ev", "critic explained variance"), ("clip_frac", "clip fraction"))
    for ax, (key, title) in zip(axes.flat, panels):
        ax.plot(steps, [float("nan") if r.get(key) is None else r[key] for r in rows], "-", lw=1.2)
        ax.set_title(title)
        ax.set_xlabel("step")
    ax = axes.flat[5]
    for g in gates:
        ax.plot(steps, [r[f"drops_{g}"] for r in rows], "-", lw=1.2, label=g)
    ax.set_title("episodes dropped per gate")
    ax.set_xlabel("step")
    if gates:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_rl_runs(rows: Sequence[Mapping[str, Any]], runs: Sequence[str]):
    """The RL runs side by side (one line per run, at its own step numbers: a warm start goes on
    from its parent's step): success rate, KL to the base, clip fraction, and the share of the
    step's training signal dropped (PPO: episodes failing a gate; GRPO: groups without signal)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.5))
    panels = (("success_rate", "success rate (train episodes)"), ("kl", "KL to the base (nats/token)"),
              ("clip_frac", "clip fraction"), ("dropped", "dropped share (PPO: episodes, GRPO: groups)"))
    for ax, (key, title) in zip(axes.flat, panels):
        for run in runs:
            mine = [r for r in rows if r["run"] == run]
            ax.plot([r["step"] for r in mine], [float("nan") if r.get(key) is None else r[key] for r in mine],
                    "-o", ms=2.5, lw=1.2, label=run)
        ax.set_title(title)
        ax.set_xlabel("step")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_copy_curve(rows: Sequence[Mapping[str, Any]], ends: Sequence[Mapping[str, Any]]):
    """Loss and copy accuracy per step, one colour per phase (the same in both panels); a dotted
    line where each phase but the last ends."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, key, title in ((axes[0], "loss", "loss on the copied ids (nats)"),
                           (axes[1], "copy_accuracy", "copy accuracy (ids copied exactly)")):
        for end in ends:
            points = [r for r in rows if r["phase"] == end["phase"]]
            ax.plot([r["step"] for r in points], [r[key] for r in points], "-o", ms=2.5, lw=1.2, label=end["phase"])
        for end in ends[:-1]:
            ax.axvline(end["last_step"], color="grey", ls=":", lw=1)
        ax.set_xlabel("step")
        ax.set_title(title)
    axes[1].set_ylim(0, 1)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_sft_curve(rows: Sequence[Mapping[str, Any]], window: int):
    """SFT loss per step, raw and as its moving mean."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["loss"] for r in rows], lw=0.6, alpha=0.5, label="loss per step")
    ax.plot(steps, [r["loss_mean"] for r in rows], lw=1.5, label=f"{window}-step mean")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per action token)")
    ax.set_title("SFT loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_success(rows: Sequence[Mapping[str, Any]]):
    """Success rate with its interval, one row per panel and policy (report.success_rows)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1))
    ys = range(len(rows))
    rates = [100 * r["success_rate"] for r in rows]
    err = [[100 * (r["success_rate"] - r["ci_low"]) for r in rows], [100 * (r["ci_high"] - r["success_rate"]) for r in rows]]
    ax.errorbar(rates, ys, xerr=err, fmt="o", capsize=3, color="#4477aa")
    ax.set_yticks(ys, [f"{r['panel']}: {r['policy']}" for r in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)  # first row on top, with room around a single row
    ax.set_xlim(-2, 102)
    ax.set_xlabel("resolved (%), with the interval")
    ax.set_title("success rate per panel and policy")
    return fig


# one colour per outcome class (attribution.OUTCOME_CLASSES), solved first and green
OUTCOME_COLOURS = ("#228833", "#ee6677", "#aa3377", "#ccbb44", "#66ccee", "#4477aa", "#bbbbbb")


def plot_outcomes(rows: Sequence[Mapping[str, Any]], classes: Sequence[str]):
    """How episodes ended: one stacked bar per (panel, policy), a segment per outcome class
    (its share of the episodes); rows from report.outcome_rows."""
    plt = _plt()
    bars = list(dict.fromkeys((r["panel"], r["policy"]) for r in rows))
    share = {(r["panel"], r["policy"], r["class"]): r["share"] for r in rows}
    fig, ax = plt.subplots(figsize=(8, max(2.2, 0.45 * len(bars) + 1.2)))
    left = [0.0] * len(bars)
    for cls, colour in zip(classes, OUTCOME_COLOURS):
        widths = [100 * share.get((panel, policy, cls), 0.0) for panel, policy in bars]
        ax.barh(range(len(bars)), widths, left=left, color=colour, label=cls.replace("_", " "))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(bars)), [f"{panel}: {policy}" for panel, policy in bars])
    ax.set_ylim(len(bars) - 0.4, -0.6)  # first bar on top
    ax.set_xlim(0, 100)
    ax.set_xlabel("episodes (%)")
    ax.set_title("how the episodes ended")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the bars, never over them
    fig.tight_layout()
    return fig


def graphviz_svg(dot_text: str) -> str | None:
    """The DOT text drawn by graphviz as SVG, or None when `dot` is not installed or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), capture_output=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        log.warning("dot failed (%s); drawing the DAG with matplotlib", exc)
        return None
    svg = done.stdout.decode()
    return svg[svg.find("<svg"):]  # drop the XML prolog and doctype for inline use
