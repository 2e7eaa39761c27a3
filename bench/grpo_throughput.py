"""GRPO update throughput on the tiny model: tokens/s and tokens per CPU second of our update,
peak memory, and TRL's GRPOTrainer loss on the same batch from the same weights, side by side.

    .venv/bin/python bench/grpo_throughput.py [--steps 3] [--tasks-per-step 2] [--group-size 4]
                                              [--policy DIR] [--repeats 3] [--trl-loss bnpo|dapo]
                                              [--trl-python bench/.venv-trl-grpo/bin/python]
                                              [--no-trl] [--json bench/out/grpo_throughput.json]

Ours. Runs real GRPO steps (`forgeline.train.grpo.run_step`: groups of `--group-size` episodes
of `--tasks-per-step` tasks through the agent in the process sandbox, on the six tiny tasks of
bench/ppo_throughput.py, rewards and gates, group advantages, the update) with params.yaml's
`train.grpo` and the tiny policy (--policy DIR, e.g. results/policy/sft, or a fresh model of
params.yaml's shape: see `ppo_throughput.tiny_world`; without --policy, results/policy/sft when
it exists, because a fresh model samples nearly the same episode for every seed, so every group
has one return and nothing to learn from). Per step it prints where the time goes and the
update's tokens/s (sequence tokens of the trained episodes / update seconds). Then it reruns
the update of the last step that trained anything `--repeats` times, each from the adapter
that step's update started from and a fresh AdamW (as TRL's side), timing
`GRPOTrainer.update` only (old/reference log-probs + epochs x minibatches), wall and process
CPU seconds; the table gives the medians.

TRL. That batch goes to bench/out/grpo_batch.json: per trained episode the prompt (tokens
before the first policy-generated one), the completion (the rest), the action mask over it
(TRL's tool mask: 0 = tool output / chat scaffolding), the advantage and our old log-probs of
its action tokens; the minibatches of each epoch as ours drew them; the adapter the update
started from (bench/out/grpo_adapter/). bench/trl_grpo_step.py then runs TRL's GRPOTrainer
loss on it in its own venv (`make bench-trl-grpo`), checking first that its log-probs are ours.
Without the venv the script says how to make it and exits 2 (--no-trl skips on purpose).
The list of what is the same and what differs is in bench/README.md and trl_grpo_step.py.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from ppo_throughput import peak_rss_mb, tiny_world  # noqa: E402  (a sibling script, not a package)

TRL_PYTHON = ROOT / "bench" / ".venv-trl-grpo" / "bin" / "python"
TRL_SCRIPT = ROOT / "bench" / "trl_grpo_step.py"
TRL_MISSING = ("TRL side: {python} not found. Make the TRL venv with `make bench-trl-grpo` (a venv in "
               "bench/.venv-trl-grpo: torch 2.13.0 CPU, trl 1.16.0, transformers 5.25.0, peft 0.21.2, "
               "accelerate 1.16.0), or pass --no-trl to run our side only.")


def cpu_list(runs: list[dict]) -> str:
    return ", ".join(f"{r['cpu_seconds']:.2f}" for r in runs)


def trl_episode(sample: dict, old_logprobs: list[float]) -> dict:
    """A trained episode as TRL's loss takes it: prompt ids, completion ids, the action mask
    over the completion, the advantage, our old log-probs of the action tokens (in order)."""
    mask = sample["action_mask"]
    if 1 not in mask:
        raise ValueError(f"{sample['key']}: no policy-generated token")
    first = mask.index(1)
    return {"key": sample["key"], "group": sample["group"], "prompt": sample["tokens"][:first],
            "completion": sample["tokens"][first:], "action_mask": mask[first:],
            "advantage": float(sample["advantage"]), "old_logprobs": old_logprobs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--policy", help="a policy folder (default: results/policy/sft if `make run` made it, "
                    "else a fresh tiny model of params.yaml's shape, whose groups rarely differ)")
    ap.add_argument("--repeats", type=int, default=3, help="timed updates of the compared batch, each side")
    ap.add_argument("--trl-loss", choices=("bnpo", "dapo"), default="bnpo",
                    help="TRL's loss_type (bnpo: / the minibatch's action tokens, as ours; dapo: / the "
                         "whole batch's / minibatches)")
    ap.add_argument("--trl-python", default=str(TRL_PYTHON), help="the python of the TRL venv (`make bench-trl-grpo`)")
    ap.add_argument("--no-trl", action="store_true", help="run our side only")
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "grpo_throughput.json"))
    a = ap.parse_args()
    if not a.no_trl and not Path(a.trl_python).exists():
        print(TRL_MISSING.format(python=a.trl_python), file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgeline import config
    from forgeline.policy import model as tiny
    from forgeline.policy.engine import HFEngine
    from forgeline.sandbox.process import ProcessSandbox
    from forgeline.train import grpo, grpo_update, ppo_update

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    work = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    sft = ROOT / "results" / "policy" / "sft"
    # GRPO learns only from groups whose returns differ: a fresh model's episodes hardly do
    tasks, policy = tiny_world(work, a.policy or (str(sft) if (sft / "config.json").exists() else None))
    cfg = config.load([ROOT / "params.yaml"])
    c = config.merged(cfg.train.grpo, {"tasks_per_step": a.tasks_per_step, "group_size": a.group_size})
    # as bench/ppo_throughput.py's agent; the GRPO stage forces per-episode seeding (distinct group seeds)
    agent = config.merged(cfg.agent, {"max_steps": 4, "max_new_tokens": 64, "alignment": "text",
                                      "rollout": {"concurrency": 4, "seeding": "episode"}})
    tokenizer = AutoTokenizer.from_pretrained(policy)
    base = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    actor = ppo_update.make_actor(base, c.lora, 0)
    trainer = grpo_update.GRPOTrainer(actor, c, 0, temperature=float(agent.temperature))
    batches: dict[int, list] = {}  # step -> the samples its update got (run_step does not return them)
    starts: dict[int, dict] = {}  # step -> the adapter + optimizer state its update started from
    update_cpu_s: dict[int, float] = {}
    update = trainer.update

    def recording_update(samples, step):
        # deep: the optimizer's state_dict() holds its live moment tensors
        batches[step], starts[step] = list(samples), copy.deepcopy(trainer.state_dict())
        t0 = time.process_time()
        try:
            return update(samples, step)
        finally:
            update_cpu_s[step] = time.process_time() - t0
    trainer.update = recording_update
    engine = HFEngine(actor, tokenizer)
    params_count = tiny.parameter_count(base)["total"]
    cd = config.as_dict(c)
    print(f"tiny policy {policy}: {params_count:,} parameters; {a.tasks_per_step} tasks x G {a.group_size} "
          f"episodes/step; epochs {cd['epochs']}, minibatches {cd['minibatches']}, kl_coef {cd['kl_coef']}; "
          f"temperature {agent.temperature}; torch threads 1")
    print(f"{'step':>4} {'wall s':>7} {'gen s':>6} {'sandbox s':>9} {'update s':>8} {'groups':>6} {'dropped':>7} "
          f"{'trained':>7} {'tokens':>7} {'update tok/s':>12} {'peak RSS MB':>11}")
    rows = []
    task_ids = sorted(tasks)
    for step in range(1, a.steps + 1):
        groups = [(g, tasks[i], s) for g, i, s in grpo.step_groups(task_ids, step, 0, a.tasks_per_step, a.group_size)]
        t0 = time.perf_counter()
        row = grpo.run_step(step, groups, trainer, engine, ProcessSandbox(), agent, work / "repos", 60.0,
                            "bench", cd["advantage"])
        wall = time.perf_counter() - t0
        upd = row["time"]["actor"]
        row["update_tokens_per_s"] = row["tokens"] / upd if upd > 0 else None
        row["update_cpu_s"] = update_cpu_s.get(step)
        row["peak_rss_mb"] = peak_rss_mb()
        rows.append(row)
        t = row["time"]
        print(f"{step:>4} {wall:>7.2f} {t['generation']:>6.2f} {t['sandbox']:>9.2f} {upd:>8.2f} {row['groups']:>6} "
              f"{row['groups_dropped']:>7} {row['trained']:>7} {row['tokens']:>7} "
              f"{(row['update_tokens_per_s'] or 0):>12.0f} {row['peak_rss_mb']:>11.0f}")
    result = {"parameters": params_count, "grpo": cd, "temperature": float(agent.temperature), "rows": rows,
              "ours": None, "trl": None}
    step = max((s for s, b in batches.items() if b), default=None)
    if step is None:
        # a fresh model samples almost the same episode for every seed: every group is one return
        print("no step trained anything: every group's returns were equal (no signal). A fresh model samples "
              "nearly one episode per task; pass a trained policy, e.g. --policy results/policy/sft")
        return 1
    result["ours"] = ours = rerun_update(trainer, update, batches[step], starts[step], step, a.repeats)
    if not a.no_trl:
        result["trl"] = compare_with_trl(a, trainer, batches[step], starts[step], step, policy, cd,
                                         float(agent.temperature), ours)
    print(f"load average: {os.getloadavg()}")
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if a.no_trl or result["trl"].get("runs") else 1


def rerun_update(trainer, update, samples, start: dict, step: int, repeats: int) -> dict:
    """`repeats` timed calls of our update on `samples`, each from `start` (the adapter the
    step's own update began with) and a fresh optimizer: wall and CPU seconds, their medians."""
    runs = []
    for _ in range(repeats):
        trainer.load_state_dict(copy.deepcopy(start))  # the optimizer would update `start` in place
        trainer.opt.state.clear()  # a fresh AdamW, as TRL's side has: then both updates are one computation
        t0, c0 = time.perf_counter(), time.process_time()
        stats = update(samples, step)
        runs.append({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                     "peak_rss_mb": peak_rss_mb(), "policy_loss": stats["policy_loss"],
                     "clip_frac": stats["clip_frac"], "kl": stats["kl"]})
    return {"step": step, "episodes": len(samples), "tokens": stats["tokens"],
            "action_tokens": stats["action_tokens"], "runs": runs,
            "seconds": statistics.median(r["seconds"] for r in runs),
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs)}


def old_logprobs(trainer, samples, start: dict) -> list[list[float]]:
    """Per sample, the log-probs of its action tokens under the weights the update started from,
    computed as the update computes its old log-probs (`_tensors`, `_logits`: the same code)."""
    import torch

    from forgeline.train import rl

    trainer.load_state_dict(copy.deepcopy(start))
    trainer.actor.eval()
    out = []
    with torch.no_grad():
        for s in samples:
            t = trainer._tensors(s)
            out.append([float(x) for x in rl.logprobs_from_logits(trainer._logits(t), t["target"])])
    return out


def compare_with_trl(a, trainer, samples, start: dict, step: int, policy: Path, c: dict, temperature: float,
                     ours: dict) -> dict:
    """Export the batch, run bench/trl_grpo_step.py on it in the TRL venv, print the
    side-by-side table; returns TRL's result (or {"error": ...})."""
    from forgeline.train.ppo_update import minibatches

    out_dir = Path(a.json).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    adapter = out_dir / "grpo_adapter"
    logps = old_logprobs(trainer, samples, start)  # leaves the actor at `start`
    trainer.actor.save_pretrained(adapter)  # the adapter TRL starts from: the one our update started from
    n = len(samples)
    batch = {"policy": str(policy), "adapter": str(adapter), "grpo": c, "temperature": temperature, "seed": 0,
             "step": step, "torch_threads": 1, "loss_type": a.trl_loss, "repeats": a.repeats,
             "minibatches": [minibatches(n, int(c["minibatches"]), trainer.seed, step, "grpo", e)
                             for e in range(int(c["epochs"]))],
             "episodes": [trl_episode(s, lp) for s, lp in zip(samples, logps)]}
    batch_path, result_path = out_dir / "grpo_batch.json", out_dir / "grpo_trl.json"
    batch_path.write_text(json.dumps(batch) + "\n")
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([a.trl_python, str(TRL_SCRIPT), "--batch", str(batch_path), "--out", str(result_path)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not result_path.exists():
        print(f"TRL side failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return {"error": proc.stderr[-3000:]}
    trl = json.loads(result_path.read_text())
    tokens = sum(len(e["prompt"]) + len(e["completion"]) for e in batch["episodes"])
    actions = sum(sum(e["action_mask"]) for e in batch["episodes"])
    assert tokens == ours["tokens"] and actions == ours["action_tokens"], (tokens, actions, ours)
    v, chk = trl["versions"], trl["model_check"]
    print(f"\nupdate of step {step}'s batch: {n} episodes, {tokens} sequence tokens ({actions} policy-generated), "
          f"{trl['padded_tokens']} as TRL pads them; TRL {v['trl']}, transformers {v['transformers']}, "
          f"peft {v['peft']}, loss_type {trl['config']['loss_type']}")
    print(f"same weights: mean log-prob of episode 1's action tokens {chk['trl']:.6f} (TRL) vs {chk['forgeline']:.6f} "
          f"(ours); largest per-token difference over the batch {chk['max_abs_diff']:.1e}")
    trl_loss = statistics.fmean(trl["runs"][0]["losses"])
    # bnpo divides by each minibatch's action tokens as ours does: the same numbers up to float noise
    print(f"same update: policy loss (mean over minibatches) {trl_loss:.6f} (TRL) vs "
          f"{ours['runs'][0]['policy_loss']:.6f} (ours)"
          + ("" if a.trl_loss == "bnpo" else f"; {a.trl_loss} normalises otherwise"))
    trl_last = trl["runs"][1:] or trl["runs"]  # the first call warms up
    trl_s = statistics.median(r["seconds"] for r in trl_last)
    trl_cpu = statistics.median(r["cpu_seconds"] for r in trl_last)
    trl_rss = max(r["peak_rss_mb"] for r in trl["runs"])
    ours_rss = max(r["peak_rss_mb"] for r in ours["runs"])
    print(f"{'update (median of ' + str(len(ours['runs'])) + ')':<26} {'wall s':>7} {'tok/s':>7} {'CPU s':>7} "
          f"{'tok/CPU s':>9} {'peak RSS MB':>11}")
    for label, s, cpu, rss in (("forgeline GRPOTrainer", ours["seconds"], ours["cpu_seconds"], ours_rss),
                               ("TRL GRPOTrainer", trl_s, trl_cpu, trl_rss)):
        print(f"{label:<26} {s:>7.2f} {tokens / s:>7.0f} {cpu:>7.2f} {tokens / cpu:>9.0f} {rss:>11.0f}")
    trl["ratio_tokens_per_s"] = trl_s / ours["seconds"]
    trl["ratio_tokens_per_cpu_s"] = trl_cpu / ours["cpu_seconds"]
    trl["median"] = {"seconds": trl_s, "cpu_seconds": trl_cpu}
    print(f"ratio forgeline / TRL: tokens/s {trl['ratio_tokens_per_s']:.2f}, tokens/CPU s "
          f"{trl['ratio_tokens_per_cpu_s']:.2f} (on a loaded machine read the CPU one)")
    w = trl["runs"][0]
    print(f"TRL warm-up call: {w['seconds']:.2f} s, {w['cpu_seconds']:.2f} CPU s; peak RSS "
          f"{trl['peak_rss_before_update_mb']:.0f} MB before its first update. Per call, ours: "
          f"{cpu_list(ours['runs'])} CPU s; TRL: {cpu_list(trl['runs'])} CPU s")
    return trl


if __name__ == "__main__":
    sys.exit(main())
