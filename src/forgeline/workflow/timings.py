"""The per-stage time table of a run, read from the manifests the stages wrote.

`make run` prints it twice: before the run, the table of the last measured run on this kind
of machine (`--expected --reference bench/make_run_timings.json`: how long to wait, phase by
phase), and after it, this run's table beside that one, counting only the manifests written
since the run started (`--since`: a manifest left by another config or an earlier run is not
this run's) and the wall time since then. `--save FILE` keeps this run's table as the
reference, with the machine it ran on.
"""
from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from forgeline.provenance import write_json


def collect(results: Path, since: float | None = None) -> dict[str, dict[str, float]]:
    """stage -> {jobs, wall_s (sum), max_s} over every manifest below `results` (written at or
    after the epoch time `since`, if given)."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall_s": 0.0, "max_s": 0.0})
    for path in sorted(results.rglob("*manifest.json")):
        if since is not None and path.stat().st_mtime < since:
            continue  # an earlier run's, or another config's
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


def read_reference(path: Path) -> dict | None:
    """A saved table ({machine, note, stages}), or None when there is none or it is unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("stages"), dict) else None


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", type=Path)
    parser.add_argument("--reference", type=Path,
                        help="a saved table (e.g. bench/make_run_timings.json), shown beside this run's")
    parser.add_argument("--expected", action="store_true",
                        help="print only the reference: how long each stage took last time")
    parser.add_argument("--save", type=Path, help="keep this run's table in this file, as a reference")
    parser.add_argument("--note", default="", help="with --save: the machine's load and what else ran")
    parser.add_argument("--since", type=float,
                        help="the run's start (epoch seconds): count only the manifests written since, "
                             "and print the wall time since then")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def run(cfg, args) -> None:
    console = Console(width=100)
    ref = read_reference(args.reference) if args.reference else None
    ref_stages = (ref or {}).get("stages", {})
    if args.expected:
        if ref is None:
            return  # nothing measured yet: say nothing
        table = Table()
        for col in ("stage", "jobs", "last time s"):
            table.add_column(col, justify="left" if col == "stage" else "right")
        for stage, row in sorted(ref_stages.items(), key=lambda kv: -kv[1]["wall_s"]):
            table.add_row(stage, str(int(row["jobs"])), f"{row['wall_s']:.0f}")
        total = sum(r["wall_s"] for r in ref_stages.values())
        machine = ref.get("machine", {})
        console.print(f"last measured run ({machine.get('cpus', '?')} cores; {ref.get('note', '')}): "
                      f"{_minutes(total)} of stage time, summed over jobs")
        if machine.get("cpus") and machine["cpus"] != os.cpu_count():
            console.print(f"[yellow]this machine has {os.cpu_count()} cores: expect other times[/yellow]")
        console.print(table)
        return
    since = getattr(args, "since", None)
    rows = collect(args.results, since)
    table = Table()
    cols = ["stage", "jobs", "total s", "slowest job s"] + (["last time s"] if ref else [])
    for col in cols:
        table.add_column(col, justify="left" if col == "stage" else "right")
    for stage, row in sorted(rows.items(), key=lambda kv: -kv[1]["wall_s"]):
        last = ref_stages.get(stage, {}).get("wall_s")
        extra = [f"{last:.1f}" if last is not None else "-"] if ref else []
        table.add_row(stage, str(int(row["jobs"])), f"{row['wall_s']:.1f}", f"{row['max_s']:.1f}", *extra)
    extra = [f"{sum(r['wall_s'] for r in ref_stages.values()):.1f}"] if ref else []
    table.add_row("all", str(int(sum(r["jobs"] for r in rows.values()))),
                  f"{sum(r['wall_s'] for r in rows.values()):.1f}", "", *extra, style="bold")
    console.print(f"time per stage in {args.results}/ (seconds summed over jobs"
                  f"{', the jobs of this run' if since is not None else ''})")
    console.print(table)
    if since is not None:
        console.print(f"wall time of this run: {_minutes(time.time() - since)}")
    if args.save:
        wall = {"wall_s": round(time.time() - since, 1)} if since is not None else {}
        write_json(args.save, {"machine": {"cpus": os.cpu_count()}, "note": args.note, **wall,
                               "stages": {s: {k: round(v, 1) for k, v in r.items()} for s, r in sorted(rows.items())}})
        console.print(f"saved as the reference: {args.save}")
