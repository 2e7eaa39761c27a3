"""The SFT stage's two costs, each side by side in one run:

    .venv/bin/python bench/sft_speed.py [--before REV] [--examples 200] [--steps 6] [--repeats 3]
                                        [--threads 2] [--tokenizer results/policy/init]
                                        [--json bench/out/sft_speed.json]

- `data`: making `--examples` synthetic conversations (train.sft.synthetic as params.yaml says,
  seed 1) with this checkout's code and with the code of git revision `--before` (a temporary
  worktree, run in a subprocess the same way); each prints the sha256 of what it made, so the
  table shows whether the output is the same.
- `tokens`: turning those conversations into tokens and action masks
  (`sft.conversation_tokens`) with `--tokenizer`'s tokenizer, each checkout's code in its own
  subprocess, the sha256 of the tokens and masks beside (skipped when the folder is missing).
- `step`: SFT optimizer steps on batches shaped like the stage's (right-padded pairs of
  examples of 1,700-2,400 tokens, 15% action tokens) with an attention mask (the stage until
  session 16) and without one (the causal mask alone, sdpa's fused kernel), the same loss.

Variants alternate per repeat so machine load hits both alike; medians are shown.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run in a subprocess with the src/ of the checkout being measured first on sys.path
DATA_SCRIPT = """
import hashlib, json, sys, time
from pathlib import Path
from forgeline.config import load
from forgeline.agent.tools import tool_schemas
from forgeline.train.synthetic import synthetic_conversations, synthetic_sources
cfg = load([str(Path(sys.argv[1]) / "params.yaml")])
tokenizer_dir = sys.argv[3]
s, a = cfg.train.sft.synthetic, cfg.agent
files = synthetic_sources([Path(sys.argv[1]) / cfg.repos.root / r for r in cfg.repos.sft], True, True,
                          int(s.max_file_bytes))
t = time.perf_counter()
out = synthetic_conversations(files, int(sys.argv[2]), 1, s.kinds, int(s.max_lines), int(s.per_file),
                              int(a.max_tool_output_chars), float(s.rename), int(s.max_guesses),
                              float(s.recovery), tool_schemas(a.tools))
made = {"s": time.perf_counter() - t, "n": len(out),
        "sha256": hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()}
if tokenizer_dir:
    from transformers import AutoTokenizer
    from forgeline.train.sft import conversation_tokens
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    t = time.perf_counter()
    tokens = [conversation_tokens(tok, msgs, tool_schemas(a.tools)) for _, msgs in out]
    made["tok_s"] = time.perf_counter() - t
    made["tok_sha256"] = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()
print(json.dumps(made))
"""


def time_data(src: Path, n: int, tokenizer: str) -> dict:
    res = subprocess.run([sys.executable, "-c", DATA_SCRIPT, str(ROOT), str(n), tokenizer], capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin",
                                                     "PYTHONHASHSEED": "0"})
    return json.loads(res.stdout.strip().splitlines()[-1])


def time_steps(model, batches, masked: bool) -> float:
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    t = time.perf_counter()
    for ids, att, lm in batches:
        hidden = model.get_decoder()(input_ids=ids, attention_mask=att if masked else None).last_hidden_state
        m = lm[:, 1:].bool()
        loss = F.cross_entropy(model.get_output_embeddings()(hidden[:, :-1][m]).float(), ids[:, 1:][m])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="HEAD~1", help="git revision of the `before` data code")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokenizer", default="results/policy/init",
                    help="a tokenizer folder for the tokens rows (missing: no tokens rows)")
    ap.add_argument("--json", default="bench/out/sft_speed.json")
    args = ap.parse_args()

    import torch
    import yaml

    from forgeline.policy import model as tiny

    torch.set_num_threads(args.threads)
    shape = yaml.safe_load((ROOT / "params.yaml").read_text())["policy"]["init"]["model"]
    shape = {k: v for k, v in shape.items() if k != "embedding_std"}
    model = tiny.init_tiny_qwen3(tiny.tiny_qwen3_config(5120, eos_token_id=1, pad_token_id=0, **shape), seed=0)
    model.train()
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.steps):
        lengths = torch.randint(1700, 2401, (2,), generator=gen).tolist()
        ids = torch.zeros((2, max(lengths)), dtype=torch.long)
        att, lm = torch.zeros_like(ids), torch.zeros_like(ids)
        for b, n in enumerate(lengths):
            ids[b, :n] = torch.randint(10, 5120, (n,), generator=gen)
            att[b, :n] = 1
            lm[b, :n] = (torch.rand(n, generator=gen) < 0.15).long()
        batches.append((ids, att, lm))
    tokens = sum(int(a.sum()) for _, a, _ in batches)

    tokenizer = str(Path(args.tokenizer).resolve()) if (Path(args.tokenizer) / "tokenizer.json").is_file() else ""
    rows: dict[str, list[float]] = {"step: attention mask": [], "step: causal only": [],
                                    "data: before": [], "data: now": []}
    if tokenizer:
        rows.update({"tokens: before": [], "tokens: now": []})
    if not args.steps:
        del rows["step: attention mask"], rows["step: causal only"]
    hashes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.before],
                       check=True, capture_output=True)
        try:
            for _ in range(args.repeats):
                if args.steps:
                    rows["step: attention mask"].append(time_steps(model, batches, True))
                    rows["step: causal only"].append(time_steps(model, batches, False))
                for name, src in (("before", old / "src"), ("now", ROOT / "src")):
                    r = time_data(src, args.examples, tokenizer)
                    rows[f"data: {name}"].append(r["s"])
                    hashes[f"data: {name}"] = f"{r['n']} conversations, sha256 {r['sha256'][:12]}"
                    if tokenizer:
                        rows[f"tokens: {name}"].append(r["tok_s"])
                        hashes[f"tokens: {name}"] = f"sha256 {r['tok_sha256'][:12]}"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"threads {args.threads}; medians of {args.repeats}; before = {args.before}")
    print("| variant | median s | rate | speed-up |\n|---|---|---|---|")
    for k, v in med.items():
        kind = k.split(":")[0]
        base = med["step: attention mask"] if kind == "step" else med[f"{kind}: before"]
        rate = (f"{tokens / v:,.0f} tokens/s" if kind == "step"
                else f"{args.examples / v:.1f} conversations/s ({hashes[k]})")
        print(f"| {k} | {v:.2f} | {rate} | {base / v:.2f}x |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "seconds": rows, "hashes": hashes}, indent=1) + "\n")


if __name__ == "__main__":
    main()
