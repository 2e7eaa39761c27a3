"""What Snakemake's own process costs while jobs wait for cores, side by side:

    .venv/bin/python bench/snakemake_waiting.py [--hold 30] [--waiting 20] [--inputs 100] \
        [--repeats 2] [--limits 100/1s 100/60s]

A bare workflow in a temporary folder: one job holds both cores for `--hold` seconds (a sleep),
while `--waiting` ready jobs of `--inputs` input files each wait for a core (as forgeline's
evaluations and difficulty jobs wait behind a 2-thread PPO or SFT job). Snakemake re-runs its
job selection every time the `--max-jobs-per-timespan` window ends while anything waits (the
default 100/1s: every second), and each selection stats every input of every waiting job. The
table gives Snakemake's own CPU seconds (the process and its children; the jobs are `sleep` and
`touch`) and the wall time per limit. Variants alternate per repeat; medians.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNAKEFILE = """
N_WAITING, N_INPUTS, HOLD = {waiting}, {inputs}, {hold}

rule all:
    input: "hold.done", expand("waited/{{i}}.done", i=range(N_WAITING))

rule hold:
    output: "hold.done"
    threads: 2
    priority: 10
    shell: "sleep {{HOLD}} && touch {{output}}"

rule waiting:
    input: lambda w: [f"inputs/{{w.i}}/{{j}}.txt" for j in range(N_INPUTS)]
    output: "waited/{{i}}.done"
    threads: 1
    shell: "touch {{output}}"
"""


def run_once(folder: Path, limit: str) -> tuple[float, float]:
    for stale in ("hold.done", "waited", ".snakemake"):
        target = folder / stale
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--cores", "2", "--quiet",
                    "--max-jobs-per-timespan", limit], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hold", type=int, default=30, help="seconds the 2-core job runs")
    ap.add_argument("--waiting", type=int, default=20, help="ready jobs waiting for a core")
    ap.add_argument("--inputs", type=int, default=100, help="input files per waiting job")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--limits", nargs="+", default=["100/1s", "100/60s"],
                    help="--max-jobs-per-timespan values (Snakemake's default first)")
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {limit: [] for limit in args.limits}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "Snakefile").write_text(SNAKEFILE.format(waiting=args.waiting, inputs=args.inputs,
                                                           hold=args.hold))
        for i in range(args.waiting):
            (folder / "inputs" / str(i)).mkdir(parents=True)
            for j in range(args.inputs):
                (folder / "inputs" / str(i) / f"{j}.txt").write_text(f"{i}.{j}")
        for rep in range(args.repeats):
            for limit in args.limits:
                cpu, wall = run_once(folder, limit)
                results[limit].append((cpu, wall))
                print(f"repeat {rep + 1} {limit}: {cpu:.2f} CPU s, {wall:.1f} s wall", file=sys.stderr, flush=True)
    ref = statistics.median(c for c, _ in results[args.limits[0]])
    print(f"one job holds 2 cores for {args.hold} s; {args.waiting} jobs of {args.inputs} inputs wait "
          f"(medians of {args.repeats})")
    print("| --max-jobs-per-timespan | Snakemake CPU s | wall s | CPU vs the first |")
    print("|---|---|---|---|")
    for limit, rows in results.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"| {limit} | {cpu:.2f} | {wall:.1f} | {cpu / ref:.2f}x |")


if __name__ == "__main__":
    main()
