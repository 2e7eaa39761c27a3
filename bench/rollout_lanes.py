"""A rollout with its episodes in one lane vs several, and with more or fewer episodes at once,
side by side in one run:

    .venv/bin/python bench/rollout_lanes.py [--tasks results/validated/ledgerkit.jsonl]
        [--max-tasks 6] [--k 4] [--lanes 1 2] [--concurrency 8 [16 ...]] [--threads 1] [--repeats 2]
        [--policy results/policy/sft] [--json bench/out/rollout_lanes.json]

Each variant runs the same (task, seed) pairs through `run_policy_on_tasks` (the difficulty
stage's path: the config's sandbox, in-process engine) with `agent.rollout.seeding: episode`,
so every variant draws the same episodes (up to the float rounding of batched arithmetic) and
does the same work; only the schedule differs. `lanes: 1`: every episode generates, then every
episode's tools run; `lanes: 2`: one half generates while the other half's tools and tests run.
`--concurrency`: episodes at once (sandbox sessions; rows of one batched generate call). A
variant is one (lanes, concurrency) pair. Variants alternate per repeat; the table shows medians of wall seconds, the machine's busy
CPU seconds (/proc/stat: this process, the containers, the Docker daemon, anything else) and
the rollout's own CPU seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def busy_jiffies() -> int:
    """All CPUs' non-idle time so far, in clock ticks."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return user + nice + system + irq + softirq + steal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="results/validated/ledgerkit.jsonl")
    ap.add_argument("--max-tasks", type=int, default=6)
    ap.add_argument("--k", type=int, default=4, help="seeds per task")
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8])
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policy", default="results/policy/sft")
    ap.add_argument("--json", default="bench/out/rollout_lanes.json")
    args = ap.parse_args()

    import torch

    from forgeline import config
    from forgeline.agent.rollout import run_policy_on_tasks, sample_seeds
    from forgeline.policy.engine import PolicySpec
    from forgeline.provenance import read_jsonl

    torch.set_num_threads(args.threads)
    os.chdir(ROOT)
    base = config.load(["params.yaml"])
    tasks = sorted(read_jsonl(args.tasks), key=lambda t: t["instance_id"])[: args.max_tasks]
    seeds = sample_seeds(base.seed, args.k)
    ticks = os.sysconf("SC_CLK_TCK")
    variants = [(lanes, conc) for conc in args.concurrency for lanes in args.lanes]
    runs: dict[tuple[int, int], list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for lanes, conc in variants:
            cfg = config.merged(base, {"agent": {"rollout": {"lanes": lanes, "seeding": "episode",
                                                             "concurrency": conc}}})
            with tempfile.TemporaryDirectory() as tmp:
                j0, c0, t0 = busy_jiffies(), time.process_time(), time.perf_counter()
                run = run_policy_on_tasks(cfg, "bench.lanes", PolicySpec(policy=args.policy), tasks, seeds,
                                          Path(tmp) / "record.jsonl")
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                busy = (busy_jiffies() - j0) / ticks
            eps = run.episodes
            runs[(lanes, conc)].append({"wall_s": wall, "busy_cpu_s": busy, "rollout_cpu_s": cpu,
                                        "turns": sum(len(e["turns"]) for e in eps),
                                        "resolved": sum(e["outcome"] == "resolved" for e in eps)})
            print(f"lanes {lanes}, concurrency {conc}: {runs[(lanes, conc)][-1]}", file=sys.stderr, flush=True)
    first = statistics.median(r["wall_s"] for r in runs[variants[0]])
    print(f"{len(tasks)} tasks x {args.k} seeds, torch threads {args.threads}, {os.cpu_count()} CPUs, "
          f"medians of {args.repeats}; load after: {os.getloadavg()[0]:.1f}")
    print("| lanes | concurrency | wall s | busy CPU s (machine) | rollout CPU s | turns | resolved | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for (lanes, conc), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {lanes} | {conc} | {med['wall_s']:.1f} | {med['busy_cpu_s']:.1f} | {med['rollout_cpu_s']:.1f} | "
              f"{med['turns']:.0f} | {med['resolved']:.0f} | {first / med['wall_s']:.2f}x |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "runs": {f"lanes {v[0]}, concurrency {v[1]}": r
                                                            for v, r in runs.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
