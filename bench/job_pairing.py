"""Difficulty jobs one after the other vs all at once, side by side in one run:

    .venv/bin/python bench/job_pairing.py [--repos gridpath ledgerkit] [--policy results/policy/sft]
        [--repeats 2] [--json bench/out/job_pairing.json]

Each variant runs the very command the `difficulty` rule runs (`forgeline difficulty --config
params.yaml ...`, a process per repository, outputs in a scratch folder): "serial" starts one
when the last has ended, as Snakemake does when each job holds both cores (`threads: 2`);
"paired" starts them all at once, as it does when each holds one. Variants alternate per
repeat. The table gives medians of wall seconds and of the machine's busy CPU seconds
(/proc/stat: the jobs, their containers, the Docker daemon, anything else), and each
variant's episodes (resolved / all, assistant turns, commands cut at the time limit), which must agree for the comparison to
mean anything: the same policy, tasks and seeds, so only the float rounding of other batches
or a test that hit its time limit could move one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def busy_jiffies() -> int:
    """All CPUs' non-idle time so far, in clock ticks."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return user + nice + system + irq + softirq + steal


def command(repo: str, policy: str, out: Path) -> list[str]:
    """The difficulty rule's command for one repository, its outputs under `out`."""
    return [str(Path(sys.executable).parent / "forgeline"), "difficulty", "--config", "params.yaml",
            "--tasks", f"results/validated/{repo}.jsonl", "--policy", policy,
            "--out", str(out / f"{repo}.jsonl"), "--report", str(out / f"{repo}.difficulty.json"),
            "--episodes", str(out / f"{repo}.episodes.jsonl"), "--manifest", str(out / f"{repo}.manifest.json"),
            "--log", str(out / f"{repo}.log")]


def require_validated(repos: list[str]) -> None:
    """Stop with the command that builds them when a repository's validated tasks are missing."""
    for repo in repos:
        if not Path(f"results/validated/{repo}.jsonl").is_file():
            raise SystemExit(f"results/validated/{repo}.jsonl is missing: build it first "
                             f"(snakemake --cores 2 results/validated/{repo}.jsonl)")


def episodes_of(out: Path, repo: str) -> tuple[int, int, int, int]:
    """(resolved, episodes, assistant turns, commands that hit agent.command_timeout_s) of one
    job's episode file: a command slowed past its limit by the other job would show here."""
    text = (out / f"{repo}.episodes.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return (sum(r["outcome"] == "resolved" for r in rows), len(rows), sum(int(r["stats"]["steps"]) for r in rows),
            text.count("timed out after"))


def run_variant(name: str, repos: list[str], policy: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"pairing-{name}-") as tmp:
        out = Path(tmp)
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        jiffies, t0 = busy_jiffies(), time.perf_counter()
        if name == "serial":
            for repo in repos:
                subprocess.run(command(repo, policy, out), cwd=ROOT, env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            procs = [subprocess.Popen(command(repo, policy, out), cwd=ROOT, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for repo in repos]
            for p in procs:
                if p.wait() != 0:
                    raise SystemExit(f"{name}: a job failed (exit {p.returncode}); its log is in {out}")
        wall = time.perf_counter() - t0
        busy = (busy_jiffies() - jiffies) / os.sysconf("SC_CLK_TCK")
        per_repo = {repo: episodes_of(out, repo) for repo in repos}
    return {"variant": name, "wall_s": round(wall, 2), "busy_cpu_s": round(busy, 2),
            "busy_share": round(busy / (wall * (os.cpu_count() or 1)), 3), "episodes": per_repo}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", nargs="+", default=["gridpath", "ledgerkit"])
    ap.add_argument("--policy", default="results/policy/sft")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="bench/out/job_pairing.json")
    args = ap.parse_args()
    os.chdir(ROOT)
    require_validated(args.repos)
    runs = []
    for r in range(args.repeats):
        for name in (["serial", "paired"] if r % 2 == 0 else ["paired", "serial"]):
            runs.append({"repeat": r, **run_variant(name, args.repos, args.policy)})
            print(json.dumps(runs[-1]), flush=True)
    print(f"\n{' + '.join(args.repos)} (difficulty), {args.repeats} repeats, "
          f"load average after: {os.getloadavg()[0]:.1f}")
    print("| variant | wall s | busy CPU s | cores busy | per job: resolved/episodes, turns, timed-out commands |")
    print("|---|---|---|---|---|")
    table = {}
    for name in ("serial", "paired"):
        mine = [x for x in runs if x["variant"] == name]
        wall = statistics.median(x["wall_s"] for x in mine)
        busy = statistics.median(x["busy_cpu_s"] for x in mine)
        eps = "; ".join(" ".join(f"{r}/{n} {t} {o}" for r, n, t, o in x["episodes"].values()) for x in mine)
        table[name] = wall
        print(f"| {name} | {wall:.1f} | {busy:.1f} | {busy / (wall * (os.cpu_count() or 1)):.0%} | {eps} |")
    print(f"paired / serial wall: {table['paired'] / table['serial']:.2f}x")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"repos": args.repos, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
