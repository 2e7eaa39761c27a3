"""How far a policy is from solving tasks: the log-probability it gives each turn of the oracle's
episodes (teacher forcing), per turn and per mutation kind.

    .venv/bin/python bench/oracle_likelihood.py [--policy results/policy/sft] \
        [--tasks results/validated/*.jsonl] [--per-repo 5] [--out bench/out/oracle_likelihood]

For each task (at most `--per-repo` per repository, one of each mutation kind first) the oracle
runs through the real agent loop in the process sandbox (real tool outputs, as the SFT data's
oracle episodes), and the policy scores that record's action tokens: log P(turn) = the sum of
its tokens' log-probs at temperature 1, the distribution the pipeline samples. exp(log P) is the
chance that one sampled turn is exactly the oracle's; the policy may solve a task another way,
so this is a lower bound of its success, and a cheap one: seconds per task, no rollouts.

Why it is worth printing: the difficulty filter keeps a task when 1..3 of k=4 episodes solve
it, so a task needs a per-episode success p of roughly 0.07..0.93 to land in the band with
probability > 1/4 (the last table). A turn whose typical P is 1e-6 says which skill is missing
long before a rollout says "0 resolved".
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def turn_spans(action_mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of action tokens: one per assistant turn."""
    spans, start = [], None
    for i, m in enumerate([*action_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def turn_name(action: str, text: str) -> str:
    """The oracle turn's role: find (grep), show (nl | sed), edit, test (pytest), submit."""
    if action != "bash":
        return action
    return "test" if "pytest" in text else "show" if "nl -ba" in text else "find"


def in_band(p: float, k: int = 4, lo: int = 1, hi: int = 3) -> float:
    """P(lo <= successes <= hi) of k independent episodes that each succeed with p."""
    return sum(math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range(lo, hi + 1))


def pick_tasks(files: list[str], per_repo: int) -> list[dict]:
    """Up to `per_repo` tasks of each file, spread over mutation kinds (one of each kind first)."""
    out = []
    for f in files:
        tasks = [json.loads(line) for line in Path(f).read_text().splitlines() if line.strip()]
        by_kind: dict[str, list[dict]] = defaultdict(list)
        for t in tasks:
            by_kind[str((t.get("mutation") or {}).get("kind"))].append(t)
        rounds = [t for r in range(max(map(len, by_kind.values()), default=0))
                  for kind in sorted(by_kind) if r < len(by_kind[kind]) for t in [by_kind[kind][r]]]
        out += rounds[:per_repo]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="results/policy/sft")
    ap.add_argument("--tasks", nargs="+", help="validated task JSONL files (default: repos.pool of params.yaml)")
    ap.add_argument("--per-repo", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/out/oracle_likelihood")
    args = ap.parse_args()

    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgeline import config
    from forgeline.agent.oracle import oracle_episode
    from forgeline.sandbox import get_sandbox

    torch.set_num_threads(args.threads)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    files = args.tasks or [str(ROOT / f"results/validated/{r}.jsonl") for r in params["repos"]["pool"]]
    tasks = pick_tasks([f for f in files if Path(f).exists()], args.per_repo)
    if not tasks:
        raise SystemExit(f"no tasks in {files}: run the pipeline up to `validate` first")
    tok = AutoTokenizer.from_pretrained(args.policy)
    model = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32).eval()
    sandbox = get_sandbox({**params["sandbox"], "backend": "process"})
    agent = config.load([ROOT / "params.yaml"]).agent

    rows = []
    for n, task in enumerate(tasks, 1):
        rec = oracle_episode(task, sandbox, tok, agent, repos_root=ROOT / params["repos"]["root"])
        if rec is None or rec["outcome"] != "resolved":  # None: the scan does not reach the fix
            continue
        ids = rec["tokens"]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        spans = turn_spans(rec["action_mask"])
        turns = [sum(float(logp[i - 1, ids[i]]) for i in range(a, b)) for a, b in spans]
        names = [turn_name(action, tok.decode(ids[a:b])) for action, (a, b) in zip(rec["oracle_actions"], spans)]
        rows.append({"instance_id": task["instance_id"], "kind": (task.get("mutation") or {}).get("kind"),
                     "turns": names, "turn_logp": turns, "tokens": [b - a for a, b in spans]})
        print(f"[{n}/{len(tasks)}] {task['instance_id']}: " + " ".join(
            f"{name} {lp:.1f}" for name, lp in zip(names, turns)), flush=True)

    def line(name: str, values: list[float]) -> str:
        ps = [math.exp(v) for v in values]
        return (f"| {name} | {len(values)} | {statistics.mean(values):.1f} | {statistics.median(values):.1f} "
                f"| {statistics.mean(ps):.2e} | {max(ps):.2e} | {sum(p > 0.05 for p in ps)} |")

    head = "| {} | n | mean log P | median log P | mean P | max P | P > 0.05 |\n|---|---|---|---|---|---|---|"
    by_turn: dict[str, list[float]] = defaultdict(list)
    edit_by_kind: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for name, lp in zip(r["turns"], r["turn_logp"]):
            by_turn[name].append(lp)
            if name == "edit":
                edit_by_kind[str(r["kind"])].append(lp)
        by_turn["whole episode"].append(sum(r["turn_logp"]))
    print(f"\npolicy {args.policy}, {len(rows)} oracle episodes, log P in nats (temperature 1)\n")
    print(head.format("turn"))
    for name in ["find", "show", "edit", "test", "submit", "whole episode"]:
        if by_turn[name]:
            print(line(name, by_turn[name]))
    print("\n" + head.format("edit turn, by mutation kind"))
    for name in sorted(edit_by_kind):
        print(line(name, edit_by_kind[name]))
    print("\n| per-episode success p | 0.01 | 0.03 | 0.07 | 0.15 | 0.3 | 0.5 |\n|---|---|---|---|---|---|---|")
    print("| P(1..3 of 4 solved) | " + " | ".join(f"{in_band(p):.2f}" for p in (0.01, 0.03, 0.07, 0.15, 0.3, 0.5)) + " |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    sys.exit(main())
