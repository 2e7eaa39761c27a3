"""A difficulty-shaped rollout with and without `agent.max_malformed_turns`, side by side:

    .venv/bin/python bench/malformed_cap.py [--tasks results/validated/intervalset.jsonl]
        [--max-tasks 8] [--k 4] [--caps 0 4] [--seeding episode] [--repeats 2]
        [--policy results/policy/sft] [--base DIR] [--json bench/out/malformed_cap.json]

Each variant runs the same (task, seed) pairs through `run_policy_on_tasks` (the difficulty
stage's path: the config's sandbox, the in-process engine) and differs only in the cap on turns
without a well-formed call per episode (0 = none). With `seeding: episode` every episode draws
from its own seed, so a capped episode is the uncapped one cut short: the table counts the
episodes whose outcome changed, and which way (a resolved episode cut off would show here).
With `seeding: batch` (the pipeline's) the episodes of a round share one generator, and cutting
one changes the others' draws. Variants alternate per repeat; the table shows medians. A policy
that resolves often (`--policy results/adapter --base results/policy/sft --tasks
results/split/train.jsonl --k 8`) shows whether the cap cuts off episodes that would have won.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="results/validated/intervalset.jsonl")
    ap.add_argument("--max-tasks", type=int, default=8)
    ap.add_argument("--k", type=int, default=4, help="seeds per task")
    ap.add_argument("--caps", type=int, nargs="+", default=[0, 4])
    ap.add_argument("--seeding", choices=["episode", "batch"], default="episode")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policy", default="results/policy/sft")
    ap.add_argument("--base", help="the base model of a PEFT adapter --policy")
    ap.add_argument("--json", default="bench/out/malformed_cap.json")
    args = ap.parse_args()

    import torch

    from forgeline import config
    from forgeline.agent.rollout import run_policy_on_tasks, sample_seeds
    from forgeline.policy.engine import PolicySpec
    from forgeline.provenance import read_jsonl

    torch.set_num_threads(1)  # as the stage's engine: one thread, the containers the rest
    tasks_file = Path(args.tasks).resolve()
    spec = PolicySpec(policy=str(Path(args.policy).resolve()),
                      base=str(Path(args.base).resolve()) if args.base else None)
    os.chdir(ROOT)
    base = config.load(["params.yaml"])
    tasks = sorted(read_jsonl(tasks_file), key=lambda t: t["instance_id"])[: args.max_tasks]
    seeds = sample_seeds(base.seed, args.k)
    load = os.getloadavg()[0]
    runs: dict[int, list[dict]] = {c: [] for c in args.caps}
    outcomes: dict[int, dict[tuple, str]] = {}
    for _ in range(args.repeats):
        for cap in args.caps:
            cfg = config.merged(base, {"agent": {"max_malformed_turns": cap,
                                                 "rollout": {"seeding": args.seeding}}})
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                run = run_policy_on_tasks(cfg, "bench.malformed_cap", spec, tasks, seeds,
                                          Path(tmp) / "record.jsonl")
                wall = time.perf_counter() - t0
            eps = run.episodes
            outcomes[cap] = {(e["instance_id"], e["seed"]): e["outcome"] for e in eps}
            runs[cap].append({
                "wall_s": wall, "turns": sum(e["stats"]["steps"] for e in eps),
                "generated_tokens": sum(e["stats"]["generated_tokens"] for e in eps),
                "input_tokens": sum(e["stats"]["input_tokens"] for e in eps),
                "outcomes": dict(Counter(e["outcome"] for e in eps))})
            print(f"cap {cap}: {runs[cap][-1]}", file=sys.stderr, flush=True)

    ref = args.caps[0]
    print(f"{args.policy}: {len(tasks)} tasks x {args.k} seeds of {tasks_file.name}, seeding {args.seeding}, "
          f"{os.cpu_count()} CPUs, medians of {args.repeats}; load before: {load:.1f}")
    print("| max_malformed_turns | wall s | turns | generated tokens | prompt tokens | outcomes | "
          f"changed vs {ref} |")
    print("|---|---|---|---|---|---|---|")
    table = []
    for cap in args.caps:
        med = {k: statistics.median(r[k] for r in runs[cap])
               for k in ("wall_s", "turns", "generated_tokens", "input_tokens")}
        changed = Counter(f"{outcomes[ref][key]}->{out}" for key, out in outcomes[cap].items()
                          if outcomes[ref].get(key) != out)
        row = {"cap": cap, **med, "outcomes": runs[cap][-1]["outcomes"], "changed": dict(changed),
               "runs": runs[cap]}
        table.append(row)
        outs = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
        chg = ", ".join(f"{k} {v}" for k, v in sorted(changed.items())) or "none"
        print(f"| {cap or 'none'} | {med['wall_s']:.0f} | {med['turns']:.0f} | "
              f"{med['generated_tokens']:.0f} | {med['input_tokens']:.0f} | {outs} | {chg} |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"tasks": str(tasks_file), "k": args.k, "seeding": args.seeding,
                                           "load_before": load, "rows": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
