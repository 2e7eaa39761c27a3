"""The episode's step budget (`agent.max_steps`): what a shorter one saves and what it loses,
side by side in one run:

    .venv/bin/python bench/step_budget.py [--repos cronparse semver ledgerkit]
        [--policy results/policy/sft] [--budgets 26 12] [--json bench/out/step_budget.json]

Each budget runs the very command the `difficulty` rule runs (`forgeline difficulty --config
params.yaml --config OVERLAY ...`, the overlay setting only `agent.max_steps`), one repository
after the other, outputs in a scratch folder. The policy, tasks and seeds are the same, so an
episode that ends within the shorter budget is the same episode under both (up to float
rounding in other batches and commands cut at their time limit); the table shows what the
longer budget bought: the episodes it resolved that the shorter one did not, and the turns,
generated tokens and time it spent on episodes that failed anyway.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from job_pairing import busy_jiffies, command, require_validated  # noqa: E402  (the difficulty rule's command)


def run_budget(max_steps: int, repos: list[str], policy: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"budget-{max_steps}-") as tmp:
        out = Path(tmp)
        overlay = out / "budget.yaml"
        overlay.write_text(f"agent:\n  max_steps: {max_steps}\n")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        jiffies, t0 = busy_jiffies(), time.perf_counter()
        walls = {}
        for repo in repos:
            t = time.perf_counter()
            argv = command(repo, policy, out)
            argv[argv.index("params.yaml") + 1:argv.index("params.yaml") + 1] = ["--config", str(overlay)]
            subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            walls[repo] = round(time.perf_counter() - t, 1)
        wall = time.perf_counter() - t0
        busy = (busy_jiffies() - jiffies) / os.sysconf("SC_CLK_TCK")
        episodes = {}
        for repo in repos:
            for line in (out / f"{repo}.episodes.jsonl").read_text().splitlines():
                r = json.loads(line)
                episodes[f"{r['instance_id']}@{r['seed']}"] = {
                    "outcome": r["outcome"], "turns": int(r["stats"]["steps"]),
                    "generated": int(r["stats"]["generated_tokens"]), "tokens": len(r["tokens"])}
        kept = {repo: json.loads((out / f"{repo}.difficulty.json").read_text()).get("kept")
                for repo in repos}
    return {"max_steps": max_steps, "wall_s": round(wall, 1), "busy_cpu_s": round(busy, 1),
            "wall_per_repo_s": walls, "kept": kept, "episodes": episodes}


def summary(run: dict) -> str:
    eps = run["episodes"].values()
    resolved = sum(e["outcome"] == "resolved" for e in eps)
    return (f"| {run['max_steps']} | {run['wall_s']:.0f} | {run['busy_cpu_s']:.0f} | {resolved}/{len(eps)} | "
            f"{sum(e['turns'] for e in eps)} | {sum(e['generated'] for e in eps)} | "
            f"{sum(e['tokens'] for e in eps)} | {sum(len(ids) for ids in run['kept'].values())} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", nargs="+", default=["cronparse", "semver", "ledgerkit"])
    ap.add_argument("--policy", default="results/policy/sft")
    ap.add_argument("--budgets", nargs="+", type=int, default=[26, 12])
    ap.add_argument("--json", default="bench/out/step_budget.json")
    args = ap.parse_args()
    os.chdir(ROOT)
    require_validated(args.repos)
    runs = []
    for budget in args.budgets:
        runs.append(run_budget(budget, args.repos, args.policy))
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "episodes"}), flush=True)
    print(f"\n{' + '.join(args.repos)} (difficulty, one job after the other), "
          f"load average after: {os.getloadavg()[0]:.1f}")
    print("| max_steps | wall s | busy CPU s | resolved | turns | generated tokens | episode tokens | band tasks |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        print(summary(run))
    longest, *others = runs
    for run in others:
        lost = sorted(k for k, e in longest["episodes"].items()
                      if e["outcome"] == "resolved" and run["episodes"].get(k, {}).get("outcome") != "resolved")
        gained = sorted(k for k, e in run["episodes"].items()
                        if e["outcome"] == "resolved" and longest["episodes"].get(k, {}).get("outcome") != "resolved")
        print(f"max_steps {run['max_steps']} against {longest['max_steps']}: wall "
              f"{run['wall_s'] / longest['wall_s']:.2f}x; resolved only under {longest['max_steps']}: "
              f"{lost or 'none'}; only under {run['max_steps']}: {gained or 'none'}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"repos": args.repos, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
