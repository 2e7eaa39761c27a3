"""torch jobs in their own process vs in a fork of a zygote, side by side in one run:

    .venv/bin/python bench/zygote_jobs.py [--policies base ppo] [--panel test] [--repeats 3]
        [--json bench/out/zygote_jobs.json]

Each job is the command the `evaluate` rule runs for one policy on one panel (`forgeline
evaluate --config params.yaml ...`, outputs in a scratch folder), in the environment Snakemake
gives a one-thread job: "own process" without FORGELINE_ZYGOTE, "zygote" with it, against a
zygote this script starts (forgeline.workflow.zygote, as `make run` does) and stops. Variants
alternate per repeat. The table gives medians of wall seconds and of the machine's busy CPU
seconds (/proc/stat: the job, the zygote's fork, the containers, the Docker daemon), and
whether both variants wrote the same episodes (their timing fields aside). Needs a finished
run's results/ (the policies and the panel's tasks).
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
sys.path.insert(0, str(ROOT / "src"))
from forgeline.workflow import zygote  # noqa: E402

POLICY_ARGS = {"base": ["--policy", "results/policy/sft"],
               "ppo": ["--policy", "results/adapter", "--base", "results/policy/sft"],
               "grpo": ["--policy", "results/adapter-grpo", "--base", "results/policy/sft"]}


def busy_jiffies() -> int:
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return user + nice + system + irq + softirq + steal


def command(policy: str, panel: str, out: Path) -> list[str]:
    return [str(Path(sys.executable).parent / "forgeline"), "evaluate", "--config", "params.yaml",
            "--tasks", f"results/split/{panel}.jsonl", "--panel", panel, *POLICY_ARGS[policy], "--name", policy,
            "--out", str(out / "eval.jsonl"), "--episodes", str(out / "episodes.jsonl"),
            "--manifest", str(out / "manifest.json"), "--log", str(out / "eval.log")]


def episodes(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:
        r.pop("timing", None)
    return rows


def run(cmd: list[str], env: dict) -> tuple[float, float]:
    cpu, t0 = busy_jiffies(), time.monotonic()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0, (busy_jiffies() - cpu) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", default=["base", "ppo"], choices=sorted(POLICY_ARGS))
    ap.add_argument("--panel", default="test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    for policy in args.policies:
        folder = POLICY_ARGS[policy][1]
        if not (ROOT / folder).exists():
            raise SystemExit(f"{folder} is missing: build it first (snakemake --cores 2 {folder})")
    load = os.getloadavg()[0]
    env = {k: v for k, v in os.environ.items() if k != zygote.ENV}
    env.update({name: "1" for name in zygote.THREAD_VARS})  # a one-thread job, as Snakemake sets it
    with tempfile.TemporaryDirectory(prefix="zygote-bench-") as tmp:
        zdir = Path(tmp) / "zygote"
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        zygote.start(str(zdir), [1])
        os.environ.clear()
        os.environ.update(saved)
        served = {**env, zygote.ENV: str(zdir)}
        deadline = time.monotonic() + 120
        while not Path(zygote.socket_path(str(zdir), 1)).exists():
            if time.monotonic() > deadline:
                raise SystemExit("the zygote did not answer within 120 s")
            time.sleep(0.2)
        rows = []
        try:
            for policy in args.policies:
                times = {"own process": [], "zygote": []}
                same = True
                for r in range(args.repeats):
                    got = {}
                    for variant, venv in (("own process", env), ("zygote", served))[::1 if r % 2 == 0 else -1]:
                        out = Path(tmp) / f"{policy}-{variant.replace(' ', '_')}-{r}"
                        out.mkdir()
                        times[variant].append(run(command(policy, args.panel, out), venv))
                        got[variant] = episodes(out)
                    same &= got["own process"] == got["zygote"]
                row = {"policy": policy, "panel": args.panel, "same_episodes": same}
                for variant, ts in times.items():
                    row[variant] = {"wall_s": round(statistics.median(t for t, _ in ts), 2),
                                    "cpu_s": round(statistics.median(c for _, c in ts), 2)}
                rows.append(row)
        finally:
            zygote.stop(str(zdir))
    print(f"evaluate jobs on panel {args.panel}, {args.repeats} repeats, medians "
          f"(load average before: {load:.2f})")
    print("| policy | own process: wall s / CPU s | zygote: wall s / CPU s | CPU ratio | same episodes |")
    print("|---|---|---|---|---|")
    for row in rows:
        own, warm = row["own process"], row["zygote"]
        print(f"| {row['policy']} | {own['wall_s']} / {own['cpu_s']} | {warm['wall_s']} / {warm['cpu_s']} | "
              f"{warm['cpu_s'] / own['cpu_s']:.2f}x | {'yes' if row['same_episodes'] else 'NO'} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
