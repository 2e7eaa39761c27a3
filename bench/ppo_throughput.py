"""PPO step throughput on the tiny model: where a step's time goes, tokens/s of the update, peak
memory, and the same update through TRL's PPO trainer, side by side in one run.

    .venv/bin/python bench/ppo_throughput.py [--steps 3] [--tasks-per-step 8] [--policy DIR]
                                             [--trl-python bench/.venv-trl/bin/python] [--trl-repeats 2]
                                             [--no-trl] [--json bench/out/ppo_throughput.json]

Ours. Runs real PPO steps (`forgeline.train.ppo.run_step`: rollout through the agent in the
process sandbox on the six tiny tasks of tests/test_critic.py, rewards and gates, critic x2,
actor) with params.yaml's `train.ppo` (tasks_per_step from --tasks-per-step) and the tiny
policy: --policy DIR (e.g. results/policy/sft) or, without it, a fresh model of params.yaml's
`policy.init.model` shape with a small tokenizer trained here. Per step it prints the breakdown
(generation, sandbox, critic update, actor update), the update throughput (sequence tokens of
the kept episodes / (critic + actor seconds)), and the peak RSS of the process after the step
(resource.getrusage; on a GPU also torch.cuda.max_memory_allocated).

TRL. The kept episodes of the last step that kept any (per episode: the prompt = the tokens
before the first policy-generated one, the continuation, its action mask (1 = generated, 0 =
tool output / chat scaffolding), the episode return) go to bench/out/ppo_batch.json with the
policy folder and the config; bench/trl_ppo_step.py then runs TRL 0.11.4's
`PPOTrainer.step(queries, responses, scores, response_masks)` on that batch in its own venv
(`make bench-trl` makes bench/.venv-trl: TRL's step() on an external batch needs transformers
4.x, forgeline pins 5.x), with the same model (checked: the same mean log-prob of an episode),
the same LoRA, ppo_epochs, minibatches, clip ratio, value clip, lr, AdamW betas, grad clip,
gamma, lam and KL coefficient, timing step() only (`--trl-repeats` calls; the last is compared,
our update is that of the last step, also warm). The table gives both updates' wall and CPU
seconds, tokens/s and tokens per CPU second (the same token count: sequence tokens of the kept
episodes) and peak RSS (ours: the bench process; TRL: its own process, VmHWM), and the ratios
ours / TRL. On a shared machine read the CPU ratio: wall time follows the load of the moment.
Without the TRL venv the script says how to make it and exits 2 (--no-trl skips on purpose).

The two updates are the same batch and knobs, not the same algorithm:
- value: TRL's value head is a linear layer on the policy trunk (with the LoRA), trained in the
  same backward pass as the policy (loss = pg + vf_coef x value loss, one optimizer, lr
  actor_lr, ppo_epochs passes); ours is a separate full critic model (critic_lr,
  critic_updates passes before the actor's), so ours runs two models' forward/backward.
- KL: TRL puts kl_coef x k1 per token into the rewards (a penalty; adaptive controller off
  here); ours (kl_mode: loss) adds kl_coef x k3 to the actor loss. Ours adds an entropy bonus,
  TRL has none.
- rewards: TRL takes one scalar per episode on the last action token (the episode return is
  given); ours puts each turn's step reward on that turn's last token. TRL's GAE runs over
  every position of the padded sequence with masked values and rewards set to 0 (a turn's
  last action token bootstraps from 0 across the tool output); ours over action tokens only.
- batching: TRL pads the batch to its longest sequence and runs minibatches as padded
  tensors (minibatch size = a divisor of the episode count: an odd count gets minibatches of
  1); ours runs one episode at a time with no padding.
- TRL starts from a fresh adapter; ours has trained for the earlier steps (same compute).
- TRL's process holds only the model and the batch; ours also holds the rollout engine and
  the critic, so peak RSS is per process as a whole.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRL_PYTHON = ROOT / "bench" / ".venv-trl" / "bin" / "python"
TRL_SCRIPT = ROOT / "bench" / "trl_ppo_step.py"
TRL_MISSING = ("TRL side: {python} not found. Make the TRL venv with `make bench-trl` (python3.11 venv in "
               "bench/.venv-trl: torch 2.13.0 CPU, transformers 4.51.3, trl 0.11.4, peft 0.15.2, "
               "accelerate 1.6.0), or pass --no-trl to run our side only.")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def tiny_world(work: Path, policy_arg: str | None) -> tuple[dict, Path]:
    """The bench's world under `work`: the tiny repositories alpha, beta, gamma (the sandbox's
    python3 = this interpreter, which has pytest), the six tasks of tests/test_critic.py by id,
    and the policy folder: `policy_arg`, or a fresh model of params.yaml's `policy.init.model`
    shape with a 1,024-id tokenizer trained here on data/repos/tinycsv."""
    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from test_critic import make_tasks
    from tiny_project import TINY_REPOS, write_repo

    from forgeline.policy import model as tiny, tokenizer as tk

    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    for name in ("alpha", "beta", "gamma"):
        write_repo(work / "repos", name, *TINY_REPOS[name])
    tasks = {t["instance_id"]: t for t in make_tasks()}
    if policy_arg:
        return tasks, Path(policy_arg).resolve()
    policy = work / "policy"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    tok = tk.build_tokenizer(tk.collect_corpus([ROOT / "data" / "repos" / "tinycsv"], None), vocab_size=1024)
    shape = dict(params["policy"]["init"]["model"])
    embedding_std = shape.pop("embedding_std", None)
    lm = tiny.init_tiny_qwen3(tiny.tiny_qwen3_config(len(tok), eos_token_id=tok.eos_token_id,
                                                     pad_token_id=tok.pad_token_id, **shape), 1, embedding_std)
    tok.save_pretrained(policy)
    lm.save_pretrained(policy)
    return tasks, policy


def trl_episode(sample: dict) -> dict:
    """A kept episode as TRL's step() takes it: prompt ids, continuation ids, the action mask
    over the continuation, the episode return as its scalar reward."""
    mask = sample["action_mask"]
    if 1 not in mask:
        raise ValueError(f"{sample['key']}: no policy-generated token")
    first = mask.index(1)
    return {"key": sample["key"], "prompt": sample["tokens"][:first], "continuation": sample["tokens"][first:],
            "action_mask": mask[first:], "reward": float(sample["ret"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--policy", help="a policy folder (default: a fresh tiny model of params.yaml's shape)")
    ap.add_argument("--trl-python", default=str(TRL_PYTHON), help="the python of the TRL venv (`make bench-trl`)")
    ap.add_argument("--trl-repeats", type=int, default=2, help="TRL step() calls on the batch; the last is compared")
    ap.add_argument("--no-trl", action="store_true", help="run our side only")
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "ppo_throughput.json"))
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
    from forgeline.train import critic, ppo, ppo_update

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    work = Path(tempfile.mkdtemp(prefix="ppo-bench-"))
    tasks, policy = tiny_world(work, a.policy)
    (work / "critic").mkdir()
    critic.save_value_model(critic.init_value_model(policy, -0.2), work / "critic")

    cfg = config.load([ROOT / "params.yaml"])
    c = config.merged(cfg.train.ppo, {"tasks_per_step": a.tasks_per_step})
    agent = config.merged(cfg.agent, {"max_steps": 4, "max_new_tokens": 64, "alignment": "text",
                                      "rollout": {"concurrency": 4, "seeding": "episode"}})
    tokenizer = AutoTokenizer.from_pretrained(policy)
    base = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    actor = ppo_update.make_actor(base, c.lora, 0)
    trainer = ppo_update.PPOTrainer(actor, critic.load_value_model(work / "critic"), c, 0)
    c = config.as_dict(c)  # from here on: what the report and the TRL side read
    batches: dict[int, list] = {}  # step -> the kept samples its update got (run_step does not return them)
    update_cpu_s: dict[int, float] = {}  # step -> CPU seconds of its update (robust to a loaded machine)
    update = trainer.update

    def recording_update(samples, step):
        batches[step] = list(samples)
        t0 = time.process_time()
        try:
            return update(samples, step)
        finally:
            update_cpu_s[step] = time.process_time() - t0
    trainer.update = recording_update
    engine = HFEngine(actor, tokenizer)
    params_count = tiny.parameter_count(base)["total"]
    rows = []
    print(f"tiny policy: {params_count:,} parameters; {a.tasks_per_step} episodes/step; ppo_epochs "
          f"{c['ppo_epochs']}, minibatches {c['minibatches']}, critic_updates {c['critic_updates']}; torch threads 1")
    print(f"{'step':>4} {'wall s':>7} {'gen s':>6} {'sandbox s':>9} {'critic s':>8} {'actor s':>7} "
          f"{'kept':>4} {'tokens':>7} {'update tok/s':>12} {'peak RSS MB':>11}")
    for step in range(1, a.steps + 1):
        pairs = [(tasks[i], s) for i, s in ppo.step_pairs(sorted(tasks), step, 0, a.tasks_per_step, 1)]
        t0 = time.perf_counter()
        row = ppo.run_step(step, pairs, trainer, engine, ProcessSandbox(), agent, work / "repos", 60.0, "bench")
        wall = time.perf_counter() - t0
        upd = row["time"]["critic"] + row["time"]["actor"]
        row["update_tokens_per_s"] = row["tokens"] / upd if upd > 0 else None
        row["update_cpu_s"] = update_cpu_s.get(step)
        row["peak_rss_mb"] = peak_rss_mb()
        if torch.cuda.is_available():
            row["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
        rows.append(row)
        t = row["time"]
        print(f"{step:>4} {wall:>7.2f} {t['generation']:>6.2f} {t['sandbox']:>9.2f} {t['critic']:>8.2f} "
              f"{t['actor']:>7.2f} {row['kept']:>4} {row['tokens']:>7} "
              f"{(row['update_tokens_per_s'] or 0):>12.0f} {row['peak_rss_mb']:>11.0f}")
    result = {"parameters": params_count, "ppo": c, "rows": rows, "trl": None}
    if not a.no_trl:
        result["trl"] = compare_with_trl(a, rows, batches, actor, policy, c)
    print(f"load average: {os.getloadavg()}")
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if a.no_trl or result["trl"].get("runs") else 1


def compare_with_trl(a, rows, batches, actor, policy: Path, c: dict) -> dict:
    """Export the last kept batch, run bench/trl_ppo_step.py on it in the TRL venv, print the
    side-by-side table; returns TRL's result (or {"error": ...})."""
    import torch

    step = max((s for s, b in batches.items() if b), default=None)
    if step is None:
        print("TRL side: no step kept an episode, nothing to compare")
        return {"error": "no kept episodes"}
    ours = next(r for r in rows if r["step"] == step)
    samples = batches[step]
    with torch.no_grad(), actor.disable_adapter():  # the base policy, as TRL loads it
        ids = torch.tensor([samples[0]["tokens"]])
        logp = torch.log_softmax(actor(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])
    batch = {"policy": str(policy), "ppo": c, "seed": 0, "step": step,
             "episodes": [trl_episode(s) for s in samples],
             "check": {"tokens": samples[0]["tokens"], "mean_logprob": float(logp.mean())}}
    out_dir = Path(a.json).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    batch_path, result_path = out_dir / "ppo_batch.json", out_dir / "ppo_trl.json"
    batch_path.write_text(json.dumps(batch) + "\n")
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([a.trl_python, str(TRL_SCRIPT), "--batch", str(batch_path), "--out", str(result_path),
                           "--repeats", str(a.trl_repeats)], env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not result_path.exists():
        print(f"TRL side failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return {"error": proc.stderr[-3000:]}
    trl = json.loads(result_path.read_text())
    tokens = sum(len(e["prompt"]) + len(e["continuation"]) for e in batch["episodes"])
    assert tokens == ours["tokens"], (tokens, ours["tokens"])
    actions = sum(sum(e["action_mask"]) for e in batch["episodes"])
    ours_s = ours["time"]["critic"] + ours["time"]["actor"]
    v = trl["versions"]
    print(f"\nupdate of step {step}'s batch: {len(samples)} episodes, {tokens} sequence tokens "
          f"({actions} policy-generated); TRL {v['trl']}, transformers {v['transformers']}, peft {v['peft']}")
    print(f"{'update':<28} {'wall s':>7} {'tok/s':>7} {'CPU s':>7} {'tok/CPU s':>9} {'peak RSS MB':>11}")
    print(f"{'forgeline (critic+actor)':<28} {ours_s:>7.2f} {ours['update_tokens_per_s']:>7.0f} "
          f"{ours['update_cpu_s']:>7.2f} {tokens / ours['update_cpu_s']:>9.0f} {ours['peak_rss_mb']:>11.0f}")
    for i, run in enumerate(trl["runs"], 1):
        label = f"TRL step() call {i}" + (" (warm-up)" if i < len(trl["runs"]) else "")
        print(f"{label:<28} {run['seconds']:>7.2f} {run['tokens_per_s']:>7.0f} {run['cpu_seconds']:>7.2f} "
              f"{tokens / run['cpu_seconds']:>9.0f} {run['peak_rss_mb']:>11.0f}")
    last = trl["runs"][-1]
    trl["ratio_tokens_per_s"] = ours["update_tokens_per_s"] / last["tokens_per_s"]
    trl["ratio_tokens_per_cpu_s"] = last["cpu_seconds"] / ours["update_cpu_s"]
    print(f"ratio forgeline / TRL (last call): tokens/s {trl['ratio_tokens_per_s']:.2f}, tokens/CPU s "
          f"{trl['ratio_tokens_per_cpu_s']:.2f} (on a loaded machine read the CPU one)")
    print(f"TRL: minibatch size {trl['minibatch_size']}, {trl['optimizer_steps_per_epoch']} optimizer steps x "
          f"{c['ppo_epochs']} epochs, policy + value head in one backward; peak RSS "
          f"{trl['peak_rss_before_step_mb']:.0f} MB before step(). Ours: {c['minibatches']} x {c['ppo_epochs']} actor steps, {c['minibatches']} x "
          f"{c['critic_updates']} critic steps of a separate critic")
    return trl


if __name__ == "__main__":
    sys.exit(main())
