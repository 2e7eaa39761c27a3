"""The per-stage time table of a run, read from the manifests the stages wrote.

`make run` prints it twice: before the run, the table of the last measured run on this kind
of machine (`--expected --reference bench/make_run_timings.json`: how long to wait, phase by
phase), and after it, this run's table beside that one, counting only the manifests written
since the run started (`--since`: a manifest left by another config or an earlier run is not
this run's) and the wall time since then. `--save FILE` keeps this run's table as the
reference, with the machine it ran on.

Where the time went between the jobs: `--cpu-start` (the `cpu` line of /proc/stat at the run's
start) gives the share of the machine's cores that were busy over the run, and `--timeline PNG`
draws every job of the run as a bar from its start to its end (its manifest's write time less
its wall time), so the stretches where one job held up the rest can be seen.
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


def job_spans(results: Path, since: float | None = None) -> list[dict]:
    """[{stage, job, start, end}] of every manifest below `results` (written at or after `since`),
    by start: a job ends when it writes its manifest and began its wall time before that."""
    spans = []
    for path in sorted(results.rglob("*manifest.json")):
        end = path.stat().st_mtime
        if since is not None and end < since:
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            stage, wall = record["stage"], float(record["timings"]["wall_s"])
        except (ValueError, KeyError, TypeError):
            continue
        job = str(path.relative_to(results)).removesuffix("manifest.json").rstrip("./") or stage
        spans.append({"stage": stage, "job": job, "start": end - wall, "end": end})
    return sorted(spans, key=lambda s: (s["start"], s["job"]))


def cpu_busy_share(start_line: str, end_line: str) -> float | None:
    """The share of the machine's CPU time that was busy between two `cpu` lines of /proc/stat
    (user, nice, system, idle, iowait, irq, softirq, steal ...), or None when either is unreadable."""
    try:
        a, b = ([int(x) for x in line.split()[1:9]] for line in (start_line, end_line))
    except ValueError:
        return None
    delta = [y - x for x, y in zip(a, b)]
    total = sum(delta)
    if len(delta) < 8 or total <= 0:
        return None
    idle = delta[3] + delta[4]  # idle + iowait
    return (total - idle) / total


def proc_stat_cpu() -> str:
    """The `cpu` line of /proc/stat now ("" where there is none)."""
    try:
        return Path("/proc/stat").read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""


def plot_timeline(spans: list[dict], origin: float, path: Path) -> Path:
    """One bar per job from its start to its end, minutes since `origin`, coloured by stage."""
    from forgeline import plots

    plt = plots.pyplot({"font.size": 8})
    stages = sorted({s["stage"] for s in spans})
    colours = {st: plt.get_cmap("tab20")(i % 20) for i, st in enumerate(stages)}
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.16 * len(spans) + 1.2)))
    for y, span in enumerate(spans):
        start, end = (span["start"] - origin) / 60, (span["end"] - origin) / 60
        ax.barh(y, max(end - start, 0.05), left=start, color=colours[span["stage"]], height=0.8)
    ax.set_yticks(range(len(spans)), [s["job"] for s in spans], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("minutes since the run started")
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[st]) for st in stages]
    ax.legend(handles, stages, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    try:
        return plots.save_png(fig, path, dpi=100)
    finally:
        plt.close(fig)


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
    parser.add_argument("--cpu-start", default="",
                        help="with --since: the `cpu` line of /proc/stat at the run's start; prints the "
                             "share of the cores that were busy over the run")
    parser.add_argument("--timeline", type=Path,
                        help="with --since: draw the run's jobs, start to end, into this PNG")


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
    wall_s = None
    if since is not None:
        # to the last manifest the run wrote, so a table made after the run says the same
        spans = job_spans(args.results, since)
        wall_s = (max(s["end"] for s in spans) if spans else time.time()) - since
        console.print(f"wall time of this run: {_minutes(wall_s)} (from --since to its last manifest)")
        busy = cpu_busy_share(args.cpu_start, proc_stat_cpu()) if getattr(args, "cpu_start", "") else None
        if busy is not None:
            console.print(f"the machine's {os.cpu_count()} cores were busy {busy:.0%} of it (/proc/stat: "
                          f"every process, the containers' too)")
        if getattr(args, "timeline", None) and spans:
            console.print(f"the run's {len(spans)} jobs, start to end: {plot_timeline(spans, since, args.timeline)}")
    if args.save:
        wall = {"wall_s": round(wall_s, 1)} if wall_s is not None else {}
        write_json(args.save, {"machine": {"cpus": os.cpu_count()}, "note": args.note, **wall,
                               "stages": {s: {k: round(v, 1) for k, v in r.items()} for s, r in sorted(rows.items())}})
        console.print(f"saved as the reference: {args.save}")
