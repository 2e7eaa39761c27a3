"""The per-stage time table of a run, read from the manifests the stages wrote."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table


def collect(results: Path) -> dict[str, dict[str, float]]:
    """stage -> {jobs, wall_s (sum), max_s} over every manifest below `results`."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall_s": 0.0, "max_s": 0.0})
    for path in sorted(results.rglob("*manifest.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            stage, wall = record["stage"], float(record["timings"]["wall_s"])
        except (ValueError, KeyError, TypeError):
            continue  # not a forgeline manifest
        row = table[stage]
        row["jobs"] += 1
        row["wall_s"] += wall
        row["max_s"] = max(row["max_s"], wall)
    return dict(table)


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", type=Path)


def run(cfg, args) -> None:
    rows = collect(args.results)
    table = Table()
    for col in ("stage", "jobs", "total s", "slowest job s"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for stage, row in sorted(rows.items(), key=lambda kv: -kv[1]["wall_s"]):
        table.add_row(stage, str(int(row["jobs"])), f"{row['wall_s']:.1f}", f"{row['max_s']:.1f}")
    table.add_row("all", str(int(sum(r["jobs"] for r in rows.values()))),
                  f"{sum(r['wall_s'] for r in rows.values()):.1f}", "", style="bold")
    console = Console(width=100)
    console.print(f"time per stage in {args.results}/ (seconds summed over jobs)")
    console.print(table)
