"""Evaluation: paired runs of policies on panels, their statistics, tables and the evidence page.

| module | what |
|---|---|
| `stats.py` | pure: wins/ties/losses, exact McNemar p, Holm, power and minimal detectable effect, Wilson interval, means and ratios, verdicts |
| `attribution.py` | pure: each episode's outcome class, per-pair transitions, concentration of training successes |
| `evaluate.py` | stage `evaluate`: one policy (HF folder or PEFT adapter) on one panel, resumable |
| `tables.py` | stage `tables`: per panel, every policy against the base and the configured pairs, Holm, outcome classes, the gate; Markdown, CSV, metrics.json |
| `report.py` | stage `report`: one self-contained HTML evidence page, plots, dvc-plots CSVs |

Its config section is `evaluation` (forgeline.params.EvaluationConfig): `policies` and `panels`
name what the workflow runs (the rules read them); `evaluate` reads k, k_per_panel, seeds,
threads and dtype (the engine: `serving`); `tables` reads base, alpha, confidence, pairs, power
and gate.
See docs/evaluation.md.
"""
from __future__ import annotations
