"""The in-process engine on agent-shaped conversations: transformers `generate` vs forgeline's
decode loop, without and with its prefix cache, side by side in one run.

    .venv/bin/python bench/hf_decode.py [--rows 8] [--turns 10] [--new-tokens 96] [--answer 200]
                                        [--threads 1] [--repeats 3] [--policy DIR]
                                        [--json bench/out/hf_decode.json]

A rollout round is one batched call over `--rows` episodes; at each of `--turns` turns every
row's prompt grows by its sample and a tool answer of `--answer` tokens, as an agent's does.
Each variant runs the same conversation schedule (the answers are fixed ids; the samples are
its own), all at T = 0.5, eos suppressed for rows that end early only by the length limit:

- `generate`: transformers' `model.generate` over the left-padded batch, full prefill every
  turn (HFEngine until session 15);
- `decode`: `HFEngine(prefix_cache_bytes=0)`: forgeline.policy.decode, full prefill per turn;
- `decode+cache`: `HFEngine()`: each row prefills only what its cached prefix lacks;
- `decode+cache, a seed per row`: the same with per-prompt `seeds` (`rollout.seeding: episode`,
  what PPO and GRPO use);
- `one row per call+cache`: one `generate` per prompt with its own seed, how `seeding: episode`
  generated before (each episode alone);
- `decode+cache, model forward + multinomial`: `decode+cache` as it ran until session 24: each
  decode step through the model's own forward (not `forgeline.policy.qwen3_step`) and each
  token drawn with torch.multinomial (not one uniform number through the cumulative
  distribution).

Variants alternate per repeat so machine load hits all alike; the table shows medians of
wall seconds for the whole conversation, generated tokens per second, and the ratio to
`generate`. The model is --policy DIR or a random one of params.yaml's `policy.init.model`
shape with a 5,120-token vocabulary (speed does not depend on what the weights say).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def random_policy(vocab: int, seed: int):
    import yaml

    from forgeline.policy import model as tiny

    shape = yaml.safe_load((ROOT / "params.yaml").read_text())["policy"]["init"]["model"]
    shape = {k: v for k, v in shape.items() if k != "embedding_std"}
    return tiny.init_tiny_qwen3(tiny.tiny_qwen3_config(vocab, eos_token_id=1, pad_token_id=0, **shape), seed=seed)


class _Ids:
    """The little of a tokenizer the engine needs when prompts are ids."""

    eos_token_id, pad_token_id = 1, 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def generate_variant(model, eos: list[int], pad: int):
    """transformers' own `generate`, left-padded, as the engine called it before."""
    import torch
    from transformers import GenerationConfig

    def run(prompts, new_tokens, seed):
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), pad)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        config = GenerationConfig(max_new_tokens=new_tokens, do_sample=True, temperature=0.5, top_p=1.0, top_k=0,
                                  eos_token_id=eos, pad_token_id=pad, output_scores=True,
                                  return_dict_in_generate=True)
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        rows = []
        for row in out.sequences[:, width:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            rows.append(row[:end])
        return rows
    return run


def engine_variant(engine, per_row: bool = False, one_by_one: bool = False):
    """HFEngine: one call for the batch (one seed, or `per_row` seeds), or `one_by_one` call per
    prompt with its own seed (how `seeding: episode` generated before session 15)."""
    def run(prompts, new_tokens, seed):
        seeds = [seed * 1000 + i for i in range(len(prompts))]
        if one_by_one:
            return [engine.generate([p], new_tokens, 0.5, 1.0, seed=s)[0].token_ids for p, s in zip(prompts, seeds)]
        gens = engine.generate(prompts, new_tokens, 0.5, 1.0, seed=seed, seeds=seeds if per_row else None)
        return [g.token_ids for g in gens]
    run.engine = engine
    return run


def before_session_24(run):
    """`run` with decode steps through the model's forward and torch.multinomial draws."""
    import torch

    from forgeline.policy import decode

    def multinomial_sample(logits, temperature, top_p, generator):
        scores = logits / temperature  # top_p = 1 here
        logp = torch.log_softmax(scores, -1)
        if isinstance(generator, (list, tuple)):
            token = torch.cat([torch.multinomial(row.exp(), 1, generator=g) for row, g in zip(logp, generator)])
        else:
            token = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
        return token, logp.gather(-1, token[:, None])[:, 0]

    def legacy(prompts, new_tokens, seed):
        saved = decode.Qwen3Step.of, decode.sample_next
        decode.Qwen3Step.of, decode.sample_next = (lambda model: None), multinomial_sample
        try:
            return run(prompts, new_tokens, seed)
        finally:
            decode.Qwen3Step.of, decode.sample_next = saved
    legacy.engine = run.engine
    return legacy


def conversation(run, rows: int, turns: int, new_tokens: int, answer: int, vocab: int, seed: int) -> dict:
    import random

    rng = random.Random(seed)
    prompts = [[rng.randrange(10, vocab) for _ in range(300 + 20 * i)] for i in range(rows)]
    t0 = time.perf_counter()
    generated = 0
    for turn in range(turns):
        samples = run(prompts, new_tokens, seed + turn)
        generated += sum(map(len, samples))
        prompts = [p + s + [rng.randrange(10, vocab) for _ in range(answer)] for p, s in zip(prompts, samples)]
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "generated": generated, "final_prompt_tokens": max(map(len, prompts))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--answer", type=int, default=200, help="tool-answer tokens appended per turn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", help="an HF model folder (default: a random tiny Qwen3)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "out" / "hf_decode.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    from forgeline.policy.engine import HFEngine

    torch.set_num_threads(args.threads)
    if args.policy:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.policy).eval()
        tok = AutoTokenizer.from_pretrained(args.policy)
        vocab = len(tok)
    else:
        vocab = 5120
        model, tok = random_policy(vocab, 0).eval(), _Ids()
    eos = [1]
    variants = {
        "generate": generate_variant(model, eos, 0),
        "decode": engine_variant(HFEngine(model, tok, eos_token_ids=eos, prefix_cache_bytes=0, threads=None)),
        "decode+cache": engine_variant(HFEngine(model, tok, eos_token_ids=eos, threads=None)),
        "decode+cache, a seed per row": engine_variant(HFEngine(model, tok, eos_token_ids=eos, threads=None), per_row=True),
        "one row per call+cache": engine_variant(HFEngine(model, tok, eos_token_ids=eos, threads=None), one_by_one=True),
        "decode+cache, model forward + multinomial": before_session_24(
            engine_variant(HFEngine(model, tok, eos_token_ids=eos, threads=None))),
    }
    for run in variants.values():  # warm-up, untimed
        run([[5] * 40, [6] * 30], 4, 0)
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for r in range(args.repeats):
        for name, run in variants.items():
            if getattr(run, "engine", None) is not None and run.engine.prefix_cache is not None:
                run.engine.prefix_cache.clear()
            results[name].append(conversation(run, args.rows, args.turns, args.new_tokens, args.answer,
                                              vocab, seed=100 + r))
    base = statistics.median(x["wall_s"] for x in results["generate"])
    print(f"{args.rows} rows x {args.turns} turns, up to {args.new_tokens} new tokens + {args.answer} answer "
          f"tokens a turn; torch threads {args.threads}; medians of {args.repeats}")
    print("| variant | wall s | generated tokens | tokens/s | speed vs generate |")
    print("|---|---|---|---|---|")
    table = {}
    for name, runs in results.items():
        wall = statistics.median(x["wall_s"] for x in runs)
        gen = statistics.median(x["generated"] for x in runs)
        table[name] = {"wall_s": wall, "generated": gen, "tok_per_s": gen / wall, "speedup": base / wall, "runs": runs}
        print(f"| {name} | {wall:.2f} | {gen:.0f} | {gen / wall:.0f} | {base / wall:.2f}x |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"args": vars(args), "results": table}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
