"""PPO step throughput on the tiny model: where a step's time goes, tokens/s of the update, peak memory.

    .venv/bin/python bench/ppo_throughput.py [--steps 3] [--tasks-per-step 8] [--policy DIR]
                                             [--json bench/out/ppo_throughput.json]

Runs real PPO steps (`forgeline.train.ppo.run_step`: rollout through the agent in the process
sandbox on the six tiny tasks of tests/test_critic.py, rewards and gates, critic x2, actor)
with the tiny policy: --policy DIR (e.g. results/policy/sft) or, without it, a fresh model of
params.yaml's `policy.init.model` shape with a small tokenizer trained here. Per step it prints
the breakdown (generation, sandbox, critic update, actor update), the update throughput
(sequence tokens of the kept episodes / (critic + actor seconds)), and the peak RSS of the
process after the step (resource.getrusage; on a GPU also torch.cuda.max_memory_allocated).

TRL's PPO trainer is not run side by side: it trains single-turn completions that it samples
itself from a prompt dataset and scores with a reward MODEL, so it cannot take this batch
(multi-turn episodes with tool outputs, sandbox-verified rewards); timing it on its own
workload would compare two different things. The script prints this instead of a ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRL_NOTE = ("TRL PPO: left out - PPOTrainer generates single-turn completions from a prompt dataset "
            "and scores them with a reward model; it cannot run this update on this batch "
            "(multi-turn agent episodes, tool outputs, verifier rewards), so no like-for-like ratio.")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--policy", help="a policy folder (default: a fresh tiny model of params.yaml's shape)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "ppo_throughput.json"))
    a = ap.parse_args()

    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(ROOT / "tests"))
    from test_critic import make_tasks
    from tiny_project import TINY_REPOS, write_repo

    from forgeline.agent.episode import agent_config
    from forgeline.policy import model as tiny, tokenizer as tk
    from forgeline.policy.engine import HFEngine
    from forgeline.sandbox.process import ProcessSandbox
    from forgeline.train import critic, ppo

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    work = Path(tempfile.mkdtemp(prefix="ppo-bench-"))
    for name in ("alpha", "beta", "gamma"):
        write_repo(work / "repos", name, *TINY_REPOS[name])
    tasks = {t["instance_id"]: t for t in make_tasks()}
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    if a.policy:
        policy = Path(a.policy)
    else:
        policy = work / "policy"
        tok = tk.build_tokenizer(tk.collect_corpus([ROOT / "data" / "repos" / "tinycsv"], None), vocab_size=1024)
        shape = params["policy"]["init"]["model"]
        lm = tiny.init_tiny_qwen3(tiny.tiny_qwen3_config(len(tok), eos_token_id=tok.eos_token_id,
                                                         pad_token_id=tok.pad_token_id, **shape), seed=1)
        tok.save_pretrained(policy)
        lm.save_pretrained(policy)
    (work / "critic").mkdir()
    critic.save_value_model(critic.init_value_model(policy, -0.2), work / "critic")

    c = ppo.ppo_config({"tasks_per_step": a.tasks_per_step})
    agent = agent_config({**params["agent"], "max_steps": 4, "max_new_tokens": 64, "alignment": "text",
                          "rollout": {"concurrency": 4, "seeding": "episode"}})
    tokenizer = AutoTokenizer.from_pretrained(policy)
    base = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    actor = ppo.make_actor(base, c["lora"], 0)
    trainer = ppo.PPOTrainer(actor, critic.load_value_model(work / "critic"), c, 0)
    engine = HFEngine(actor, tokenizer)
    params_count = tiny.parameter_count(base)["total"]
    rows = []
    print(f"tiny policy: {params_count:,} parameters; {a.tasks_per_step} episodes/step; torch threads 1")
    print(f"{'step':>4} {'wall s':>7} {'gen s':>6} {'sandbox s':>9} {'critic s':>8} {'actor s':>7} "
          f"{'kept':>4} {'tokens':>7} {'update tok/s':>12} {'peak RSS MB':>11}")
    for step in range(1, a.steps + 1):
        pairs = [(tasks[i], s) for i, s in ppo.step_pairs(sorted(tasks), step, 0, a.tasks_per_step, 1)]
        t0 = time.perf_counter()
        row = ppo.run_step(step, pairs, trainer, engine, ProcessSandbox(), agent, work / "repos", 60.0, "bench")
        wall = time.perf_counter() - t0
        upd = row["time"]["critic"] + row["time"]["actor"]
        row["update_tokens_per_s"] = row["tokens"] / upd if upd > 0 else None
        row["peak_rss_mb"] = peak_rss_mb()
        if torch.cuda.is_available():
            row["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
        rows.append(row)
        t = row["time"]
        print(f"{step:>4} {wall:>7.2f} {t['generation']:>6.2f} {t['sandbox']:>9.2f} {t['critic']:>8.2f} "
              f"{t['actor']:>7.2f} {row['kept']:>4} {row['tokens']:>7} "
              f"{(row['update_tokens_per_s'] or 0):>12.0f} {row['peak_rss_mb']:>11.0f}")
    print(TRL_NOTE)
    print(f"load average: {os.getloadavg()}")
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"parameters": params_count, "rows": rows, "trl": TRL_NOTE}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
