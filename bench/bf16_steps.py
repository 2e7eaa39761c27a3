"""The tiny model's training steps in float32 and under bfloat16 autocast, side by side:

    .venv/bin/python bench/bf16_steps.py [--policy results/policy/init] [--steps 8] \
        [--repeats 3] [--threads 2] [--json bench/out/bf16_steps.json]

The batches are those of the stages that train the tiny model from scratch: the three phases
of copy pre-training (`policy.init.copy`, its batch shapes from params.yaml) and SFT batches
of `train.sft.tokens_per_batch` padded tokens at three example lengths (random ids, every
tenth position an action token). Each workload runs `--steps` optimizer steps with
`autocast: null` and with `autocast: bfloat16` (the code the stages run:
`forgeline.policy.model.autocast` around the loss), the two alternating within each repeat so
the machine's load hits both alike; the table has the median seconds per step. The model is
`--policy` (an HF folder) or, without one, a fresh model of params.yaml's shape. The loss of
the first step of each (the same weights, the same batch) is printed beside it: how far the
bfloat16 arithmetic moves the number the optimizer follows.
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def model_of(policy: str | None, cfg):
    from forgeline.policy.model import init_tiny_qwen3, tiny_qwen3_config

    if policy:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(policy)
    m = cfg.policy.init.model
    config = tiny_qwen3_config(vocab_size=int(cfg.policy.init.tokenizer.vocab_size),
                               hidden_size=m.hidden_size, layers=m.layers, heads=m.heads,
                               kv_heads=m.kv_heads, intermediate=m.intermediate, head_dim=m.head_dim,
                               max_position_embeddings=m.max_position_embeddings,
                               rope_theta=m.rope_theta, eos_token_id=1, pad_token_id=0)
    return init_tiny_qwen3(config, 0, m.embedding_std)


def workloads(cfg, vocab: int):
    """(name, make_batch(rng), loss_fn) of each training batch shape."""
    from forgeline.policy.copy_pretrain import copy_loss, recall_batch, repeat_batch
    from forgeline.train.sft import action_loss

    c = cfg.policy.init.copy
    ids = list(range(16, vocab))
    out = [("copy: repeat", lambda rng: repeat_batch(rng, ids, 1, int(c.repeat.batch), c.repeat.prefix,
                                                     c.repeat.span), copy_loss),
           ("copy: recall", lambda rng: recall_batch(rng, ids, int(c.recall.batch), int(c.recall.length),
                                                     c.recall.gap, c.recall.span), copy_loss),
           ("copy: match", lambda rng: recall_batch(rng, ids, int(c.match.batch), int(c.match.length),
                                                    c.match.gap, c.match.span, int(c.match.pool)), copy_loss)]

    def sft_batch(length: int):
        import torch

        def make(rng):
            g = torch.Generator().manual_seed(rng.randrange(2 ** 31))
            x = torch.randint(16, vocab, (max(1, int(cfg.train.sft.tokens_per_batch) // length), length), generator=g)
            mask = torch.zeros_like(x)
            mask[:, ::10] = 1
            return x, mask
        return make

    def sft_loss(model, x, mask):
        return action_loss(model, x, mask)[0], None

    for length in (1280, 1706, 2560):
        out.append((f"sft: {length} tokens x {int(cfg.train.sft.tokens_per_batch) // length}",
                    sft_batch(length), sft_loss))
    return out


def time_steps(model, make, loss_fn, dtype: str | None, steps: int, seed: int) -> tuple[float, float]:
    """(median seconds per optimizer step, loss of the first step) on a copy of `model`."""
    import torch

    from forgeline.policy.model import autocast

    m = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    rng = random.Random(seed)
    times, first = [], None
    for i in range(steps + 1):
        x, y = make(rng)
        t = time.perf_counter()
        with autocast(dtype):
            loss, _ = loss_fn(m, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i == 0:
            first = float(loss.detach())
        else:  # the first step pays for allocations: left out
            times.append(time.perf_counter() - t)
    return statistics.median(times), first


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=None, help="an HF model folder (default: a fresh model of params.yaml's shape)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch

    from forgeline import config

    torch.set_num_threads(a.threads)
    cfg = config.load([ROOT / "params.yaml"])
    model = model_of(a.policy, cfg)
    vocab = model.get_input_embeddings().weight.shape[0]
    rows = []
    for name, make, loss_fn in workloads(cfg, vocab):
        runs: dict[str | None, list[float]] = {None: [], "bfloat16": []}
        losses: dict[str | None, float] = {}
        for r in range(a.repeats):
            order = [None, "bfloat16"] if r % 2 == 0 else ["bfloat16", None]
            for dtype in order:
                s, loss = time_steps(model, make, loss_fn, dtype, a.steps, seed=r)
                runs[dtype].append(s)
                losses.setdefault(dtype, loss)
        f32, bf16 = statistics.median(runs[None]), statistics.median(runs["bfloat16"])
        rows.append({"workload": name, "float32_s": round(f32, 4), "bfloat16_s": round(bf16, 4),
                     "ratio": round(bf16 / f32, 3), "loss_float32": round(losses[None], 4),
                     "loss_bfloat16": round(losses["bfloat16"], 4)})
        print(f"{name}: float32 {f32:.3f} s/step, bfloat16 {bf16:.3f} ({bf16 / f32:.2f}x)", file=sys.stderr)
    print("| workload | float32 s/step | bfloat16 s/step | ratio | first loss float32 / bfloat16 |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['float32_s']:.3f} | {r['bfloat16_s']:.3f} | {r['ratio']:.2f}x | "
              f"{r['loss_float32']:.4f} / {r['loss_bfloat16']:.4f} |")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"threads": a.threads, "steps": a.steps, "repeats": a.repeats,
                                            "policy": a.policy, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
