"""Evaluation: paired runs of policies on panels, their statistics, tables and the evidence page.

| module | what |
|---|---|
| `stats.py` | pure: wins/ties/losses, exact McNemar p, Wilson interval, means and ratios, verdicts |
| `evaluate.py` | stage `evaluate`: one policy (HF folder or PEFT adapter) on one panel, resumable |
| `tables.py` | stage `tables`: per panel, every policy against the base; Markdown, CSV, metrics.json |
| `report.py` | stage `report`: one self-contained HTML evidence page, plots, dvc-plots CSVs |

See docs/evaluation.md.
"""
from __future__ import annotations

from typing import Any, Mapping

# Keys of the config section `evaluation`. `policies` and `panels` name what the workflow
# runs (the rules read them); `evaluate` reads k, seeds, threads, dtype (the engine: `serving`);
# `tables` reads base, alpha, confidence.
DEFAULTS: dict[str, Any] = {
    "base": "base",          # name of the policy the others are compared with (tables)
    "policies": {},          # name -> {path, base?}: what to evaluate (workflow)
    "panels": {},            # name -> [task JSONL files] (workflow)
    "k": 1,                  # samples (episodes) per task
    "k_per_panel": {},       # panel name -> k for that panel (a paired test over several samples
                             # per task where one sample per task is too few pairs)
    "seeds": None,           # explicit episode seeds (k of them); null = sample_seeds(seed, k)
    "alpha": 0.05,           # significance level of the verdicts (tables)
    "confidence": 0.95,      # level of the success-rate intervals (tables)
    "threads": 1,            # torch threads (hf engine)
    "dtype": "float32",      # weights dtype (hf engine)
}


def evaluation_config(section: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """DEFAULTS overlaid by `section` (the config's `evaluation`), checked."""
    out = dict(DEFAULTS)
    for key, value in (section or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"evaluation: unknown key {key} (known: {', '.join(sorted(DEFAULTS))})")
        out[key] = value
    if int(out["k"]) < 1:
        raise ValueError("evaluation.k must be >= 1")
    if out["seeds"] is not None and len(out["seeds"]) != int(out["k"]):
        raise ValueError(f"evaluation.seeds: {len(out['seeds'])} seeds for k={out['k']}")
    for panel, k in (out["k_per_panel"] or {}).items():
        if int(k) < 1:
            raise ValueError(f"evaluation.k_per_panel.{panel} must be >= 1")
        if out["seeds"] is not None and int(k) != int(out["k"]):
            raise ValueError(f"evaluation.k_per_panel.{panel}={k} with explicit evaluation.seeds "
                             f"(k={out['k']}): set seeds to null, or k_per_panel.{panel} to {out['k']}")
    if not 0 < float(out["alpha"]) < 1 or not 0 < float(out["confidence"]) < 1:
        raise ValueError("evaluation.alpha and evaluation.confidence must lie in (0, 1)")
    return out
