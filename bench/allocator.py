"""glibc's malloc vs tcmalloc (LD_PRELOAD) under the torch stages, side by side in one run:

    .venv/bin/python bench/allocator.py [--stages sft ppo] [--sft-steps 60] [--repeats 2]
        [--json bench/out/allocator.json]

`make run` preloads tcmalloc (Debian's libtcmalloc-minimal4) into Snakemake, its jobs and the
zygotes. Each stage here is the command its rule runs, outputs in a scratch folder, in the
environment Snakemake gives the job (OMP_NUM_THREADS = the rule's threads): SFT with
train.sft.max_steps set to --sft-steps (an overlay), PPO as configured. The two allocators
alternate per repeat. The table gives medians of wall seconds, of the stage's own training
seconds (its manifest's timings) and of the machine's busy CPU seconds (/proc/stat: the job,
its containers, the Docker daemon), and whether both allocators wrote the same weights. Needs
a finished run's results/ (SFT: the init model and the oracle episodes; PPO: the base policy,
the critic and the train split).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TCMALLOC = "libtcmalloc_minimal.so.4"


def tcmalloc() -> str | None:
    """The library `make run` preloads (the same lookup as the Makefile's), or None."""
    for lib in sorted(Path("/usr/lib").glob(f"*/{TCMALLOC}")):
        return str(lib)
    return None


def busy_jiffies() -> int:
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return user + nice + system + irq + softirq + steal


def stage_command(stage: str, out: Path, overlay: Path) -> tuple[list[str], int, str]:
    """The rule's command, its threads, and the weights file it writes."""
    forgeline = str(Path(sys.executable).parent / "forgeline")
    if stage == "sft":
        return ([forgeline, "sft", "--config", "params.yaml", "--config", str(overlay),
                 "--init", "results/policy/init", "--oracle", "results/sft/oracle/tinycsv.jsonl",
                 "results/sft/oracle/moneyfmt.jsonl", "--out", str(out / "sft"), "--log", str(out / "sft.log")],
                2, "sft/model.safetensors")
    return ([forgeline, "ppo", "--config", "params.yaml", "--policy", "results/policy/sft", "--critic",
             "results/critic", "--tasks", "results/split/train.jsonl", "--out", str(out / "ppo"),
             "--checkpoints", str(out / "ppo-checkpoints"), "--log", str(out / "ppo.log")],
            2, "ppo/adapter_model.safetensors")


def run_once(stage: str, preload: str | None, overlay: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-alloc-{stage}-") as tmp:
        out = Path(tmp)
        cmd, threads, weights = stage_command(stage, out, overlay)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        env.pop("LD_PRELOAD", None)
        env.pop("FORGELINE_ZYGOTE", None)
        if preload:
            env["LD_PRELOAD"] = preload
        cpu, t0 = busy_jiffies(), time.monotonic()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall, busy = time.monotonic() - t0, (busy_jiffies() - cpu) / os.sysconf("SC_CLK_TCK")
        manifest = json.loads((out / weights).parent.joinpath("manifest.json").read_text())
        return {"wall_s": wall, "cpu_s": busy, "train_s": manifest.get("timings", {}).get("train"),
                "sha256": hashlib.sha256((out / weights).read_bytes()).hexdigest()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", nargs="+", default=["sft", "ppo"], choices=["sft", "ppo"])
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="bench/out/allocator.json")
    args = ap.parse_args()
    lib = tcmalloc()
    if lib is None:
        sys.exit(f"no {TCMALLOC} under /usr/lib: apt-get install libtcmalloc-minimal4")
    ways = [("glibc malloc", None), ("tcmalloc", lib)]
    rows: dict[str, dict[str, list[dict]]] = {s: {w: [] for w, _ in ways} for s in args.stages}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as overlay:
        overlay.write(f"train:\n  sft:\n    max_steps: {args.sft_steps}\n")
        overlay.flush()
        for rep in range(args.repeats):
            for stage in args.stages:
                for way, preload in ways if rep % 2 == 0 else ways[::-1]:
                    rows[stage][way].append(run_once(stage, preload, Path(overlay.name)))
                    print(f"repeat {rep + 1}/{args.repeats}: {stage}, {way} done", file=sys.stderr, flush=True)

    def med(values, key):
        vals = [v[key] for v in values if v[key] is not None]
        return statistics.median(vals) if vals else float("nan")

    print(f"\n{args.repeats} repeats, medians; load average after: {os.getloadavg()[0]:.2f}\n")
    print("| stage | allocator | wall s | training s | machine CPU s | same weights |")
    print("|---|---|---|---|---|---|")
    table = {}
    for stage, by_way in rows.items():
        shas = {r["sha256"] for runs in by_way.values() for r in runs}
        table[stage] = {w: {k: med(r, k) for k in ("wall_s", "cpu_s", "train_s")} for w, r in by_way.items()}
        table[stage]["same_weights"] = len(shas) == 1
        label = f"sft ({args.sft_steps} steps)" if stage == "sft" else stage
        for way, _ in ways:
            t = table[stage][way]
            print(f"| {label} | {way} | {t['wall_s']:.1f} | {t['train_s']:.1f} | {t['cpu_s']:.1f} | "
                  f"{'yes' if len(shas) == 1 else 'NO'} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"library": lib, "sft_steps": args.sft_steps, "repeats": args.repeats,
                               "stages": table, "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
