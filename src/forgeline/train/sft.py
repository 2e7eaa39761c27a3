"""Stage `sft`: supervised fine-tuning of the tiny base policy on agent trajectories.

Data (never a pool or panel repository: asserted):

- oracle episodes of the `repos.sft` repositories (`forgeline agent-oracle` records: `tokens`,
  `action_mask`); the loss is on the action tokens only (the assistant turns, each with its
  closing <|im_end|>), exactly the tokens a policy would have generated;
- synthetic edit trajectories, built without any sandbox (`forgeline.train.synthetic`): one
  `forgeline.tasks.mutations` mutation of a function of some Python source (the SFT
  repositories' package code and the interpreter's standard library), rendered as the oracle's
  conversation, with the tool outputs written the way the agent writes them; tokenized here
  (`conversation_tokens`) like an agent record.

Training: examples cut to `max_seq_len`, shuffled per epoch with a seeded RNG, packed into
batches of at most `tokens_per_batch` padded tokens, AdamW, linear warm-up then cosine (or
linear) decay, gradient-norm clipping, torch deterministic algorithms. Writes a Hugging Face
folder (weights + tokenizer, like `policy-init`) with `loss_curve.json` / `loss_curve.png`,
atomically (temp folder + rename), then the manifest.

Pure parts (unit-tested): `conversation_tokens`, `example_from_record`, `truncate_example`,
`make_batches`, `collate`, `masked_lm_loss`, `lr_at`.
"""
from __future__ import annotations

import argparse
import logging
import math
import random
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.tools import IM_END, tool_schemas
from forgeline.config import as_dict
from forgeline.params import SftConfig
from forgeline.plots import figure, save_png
from forgeline.policy.chat import render
from forgeline.policy.model import autocast
from forgeline.policy.tokenizer import portable_tokenizer_config
from forgeline.provenance import MANIFEST_NAME, Manifest, atomic_dir, read_jsonl, write_json
from forgeline.seeds import stage_seed
from forgeline.tasks.schema import repo_key
from forgeline.train.synthetic import synthetic_conversations, synthetic_sources

log = logging.getLogger(__name__)
STAGE = "train.sft"

# -- examples -------------------------------------------------------------------------------

def conversation_tokens(tokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[dict]
                        ) -> tuple[list[int], list[int]]:
    """(tokens, action_mask) of a conversation, built like the agent's record: the rendered
    non-assistant parts tokenized, each assistant turn's content tokenized alone plus
    <|im_end|> (mask 1, or 0 for a turn marked `"train": False`), the rest mask 0. Every boundary is a special token, so `tokens` equals
    the tokenization of the full rendering (tested)."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    full = render(tokenizer, messages, tools, add_generation_prompt=False)
    parts: list[tuple[str, int, list[int]]] = []  # (text, mask of its tokens, ids after it)
    pos = 0
    for prompt, msg in _prompts(tokenizer, messages, tools, full):
        parts += [(prompt[pos:], 0, []), (msg["content"], int(msg.get("train", True)), [im_end])]
        pos = len(prompt) + len(msg["content"]) + len(IM_END)
    parts.append((full[pos:], 0, []))
    # one batched call: a call per part cost ~0.1 ms of Python each
    encoded = tokenizer([text for text, _, _ in parts], add_special_tokens=False)["input_ids"]
    tokens: list[int] = []
    mask: list[int] = []
    for (_, m, after), ids in zip(parts, encoded):
        tokens += ids + after
        mask += [m] * (len(ids) + len(after))
    return tokens, mask


def _prompts(tokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[dict], full: str
             ) -> list[tuple[str, Mapping[str, Any]]]:
    """(the prompt the turn was generated from, the message) for each assistant turn k: the
    prompt is `render(messages[:k], add_generation_prompt=True)`, which is `full` up to there
    where the template only ever appends. A render per turn was most of the stage's
    tokenizing (~1 ms each, 11 per synthetic conversation); here the turns are found in
    `full` at its generation-prompt headers, and only the first and last prompts are rendered,
    to confirm. A template that rewrites earlier turns, or a message that holds a header,
    takes the render per turn."""
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    if not turns:
        return []
    first = render(tokenizer, messages[:turns[0]], tools, add_generation_prompt=True)
    header = first[len(render(tokenizer, messages[:turns[0]], tools, add_generation_prompt=False)):]
    starts = list(_find_all(full, header)) if header else []
    found, pos = [], 0
    if len(starts) == len(turns):
        for start, k in zip(starts, turns):
            text = header + messages[k]["content"] + IM_END
            if start < pos or not full.startswith(text, start):
                break
            found.append((start + len(header), messages[k]))
            pos = start + len(text)
    if len(found) == len(turns) and full[:found[0][0]] == first \
            and render(tokenizer, messages[:turns[-1]], tools, add_generation_prompt=True) == full[:found[-1][0]]:
        return [(full[:end], msg) for end, msg in found]
    return [(render(tokenizer, messages[:k], tools, add_generation_prompt=True), messages[k]) for k in turns]


def _find_all(text: str, needle: str) -> Iterable[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + len(needle))


def example_from_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """An SFT example from an agent record (oracle or policy): its `tokens` and `action_mask`."""
    tokens, mask = list(record["tokens"]), list(record["action_mask"])
    if len(tokens) != len(mask):
        raise ValueError(f"{record.get('instance_id')}: tokens and action_mask differ in length")
    return {"id": f"oracle:{record['instance_id']}", "tokens": tokens, "mask": mask}


def truncate_example(example: Mapping[str, Any], max_len: int) -> dict[str, Any] | None:
    """The example cut to its first `max_len` tokens; None if no action token is left."""
    tokens, mask = example["tokens"][:max_len], example["mask"][:max_len]
    if not any(mask[1:]):
        return None
    return {**example, "tokens": list(tokens), "mask": list(mask)}



# -- batching and the loss --------------------------------------------------------------------

def make_batches(lengths: Sequence[int], tokens_per_batch: int, seed: int, epoch: int,
                 shuffle: bool = True, sort_window: int = 0) -> list[list[int]]:
    """Index batches for one epoch: indices shuffled by random.Random(f"{seed}:{epoch}") (or in
    order), then packed in that order so that len(batch) x max length <= tokens_per_batch (a
    longer single example is a batch alone). Every index appears exactly once.

    `sort_window` > 0: each run of that many shuffled indices is sorted by length before the
    packing, and the batches are shuffled after it (same RNG). A batch then holds examples of
    about one length: in the SFT stage's data (1,200-3,072 tokens) a random pair pads 16% of
    its tokens and 26% of its attention work (which grows with the square of the length)."""
    order = list(range(len(lengths)))
    rng = random.Random(f"{seed}:{epoch}")
    if shuffle:
        rng.shuffle(order)
    if sort_window <= 0:
        return _pack(order, lengths, tokens_per_batch)
    batches = [b for s in range(0, len(order), sort_window)
               for b in _pack(sorted(order[s:s + sort_window], key=lambda i: lengths[i]), lengths,
                              tokens_per_batch)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def _pack(order: Sequence[int], lengths: Sequence[int], tokens_per_batch: int) -> list[list[int]]:
    """`order` cut into consecutive batches with len(batch) x max length <= tokens_per_batch."""
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > tokens_per_batch:
            batches.append(cur)
            cur, new_longest = [], lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    return batches


def collate(examples: Sequence[Mapping[str, Any]], pad_id: int):
    """(input_ids, loss_mask) LongTensors [B, T], right-padded with pad_id (loss_mask 0 there).
    No attention mask: see `action_loss`."""
    import torch

    width = max(len(e["tokens"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    loss = torch.zeros((len(examples), width), dtype=torch.long)
    for b, e in enumerate(examples):
        n = len(e["tokens"])
        ids[b, :n] = torch.tensor(e["tokens"], dtype=torch.long)
        loss[b, :n] = torch.tensor(e["mask"], dtype=torch.long)
    return ids, loss


def masked_lm_loss(logits, input_ids, loss_mask):
    """Mean next-token cross-entropy over the positions whose TARGET token has loss_mask 1
    (logits[:, t] predicts input_ids[:, t+1]). Returns (loss, number of target tokens)."""
    import torch.nn.functional as F

    target = input_ids[:, 1:]
    m = loss_mask[:, 1:].bool()
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    count = int(m.sum())
    return (nll[m].sum() / max(count, 1)), count


def action_loss(model, input_ids, loss_mask):
    """`masked_lm_loss` of a causal LM without its full logits: the output head runs only
    on the positions that predict an action token (~15% of an agent conversation), which
    saves most of the head's time and memory. `input_ids` is right-padded: under the causal
    mask a real position never sees a pad, so no attention mask is passed, which lets sdpa
    take its fused causal kernel (2-2.5x per step here; the same loss and gradients). Returns
    (loss, number of target tokens)."""
    import torch.nn.functional as F

    hidden = model.get_decoder()(input_ids=input_ids).last_hidden_state
    m = loss_mask[:, 1:].bool()
    logits = model.get_output_embeddings()(hidden[:, :-1][m])
    count = int(m.sum())
    return F.cross_entropy(logits.float(), input_ids[:, 1:][m], reduction="sum") / max(count, 1), count


def lr_at(step: int, total: int, warmup: int, base: float, min_ratio: float, kind: str = "cosine") -> float:
    """Learning rate of optimizer step `step` (0-based) of `total`: linear warm-up over
    `warmup` steps to `base`, then cosine or linear decay to base x min_ratio at the end."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    span = max(total - warmup, 1)
    frac = min(max(step - warmup, 0) / span, 1.0)
    decay = 0.5 * (1 + math.cos(math.pi * frac)) if kind == "cosine" else 1 - frac
    return base * (min_ratio + (1 - min_ratio) * decay)


def train(model, examples: Sequence[Mapping[str, Any]], cfg: SftConfig, seed: int,
          pad_id: int, progress: bool = True) -> list[dict]:
    """Train `model` in place on `examples` ({tokens, mask}) as `cfg` (the config's train.sft)
    says; returns the loss curve
    [{step, epoch, loss, tokens, lr, grad_norm}]. Deterministic for the same inputs and seed
    (torch.manual_seed(seed), deterministic algorithms, seeded batch order)."""
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    lengths = [len(e["tokens"]) for e in examples]
    epochs = int(cfg.epochs)
    window = int(cfg.sort_window)
    plan = [(ep, b) for ep in range(epochs)
            for b in make_batches(lengths, int(cfg.tokens_per_batch), seed, ep, sort_window=window)]
    if int(cfg.max_steps) > 0:
        # more steps than the epochs give: keep drawing epochs
        ep = epochs
        while len(plan) < int(cfg.max_steps):
            plan += [(ep, b) for b in make_batches(lengths, int(cfg.tokens_per_batch), seed, ep,
                                                   sort_window=window)]
            ep += 1
        plan = plan[: int(cfg.max_steps)]
    total = len(plan)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(cfg.weight_decay)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(cfg.lr), betas=tuple(cfg.betas), eps=1e-8)
    model.train()
    curve: list[dict] = []
    bar = tqdm(plan, desc="sft", unit="step", dynamic_ncols=True, disable=not progress)
    for step, (epoch, idx) in enumerate(bar):
        lr = lr_at(step, total, int(cfg.warmup_steps), float(cfg.lr), float(cfg.min_lr_ratio),
                   cfg.schedule)
        for g in opt.param_groups:
            g["lr"] = lr
        ids, lmask = collate([examples[i] for i in idx], pad_id)
        with autocast(cfg.autocast):
            loss, count = action_loss(model, ids, lmask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg.grad_clip))
        opt.step()
        curve.append({"step": step, "epoch": epoch, "loss": round(float(loss.detach()), 6), "tokens": count,
                      "examples": len(idx), "lr": lr, "grad_norm": round(float(norm), 6)})
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", lr=f"{lr:.1e}")
    model.eval()
    return curve


def plot_curve(curve: Sequence[Mapping[str, Any]], path: Path) -> None:
    """A PNG of the loss per step (and its 20-step moving average)."""
    steps = [c["step"] for c in curve]
    loss = [c["loss"] for c in curve]
    k = 20
    avg = [sum(loss[max(0, i - k + 1):i + 1]) / len(loss[max(0, i - k + 1):i + 1]) for i in range(len(loss))]
    with figure(figsize=(7, 4), dpi=100) as (fig, ax):
        ax.plot(steps, loss, lw=0.6, alpha=0.5, label="loss (action tokens)")
        ax.plot(steps, avg, lw=1.5, label=f"{k}-step mean")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title("SFT")
        ax.legend()
        fig.tight_layout()
        save_png(fig, path)


# -- the stage ------------------------------------------------------------------------------

def check_sft_repos(records: Iterable[Mapping[str, Any]], sft: Sequence[str], forbidden: Sequence[str]) -> None:
    """Raise unless every record's repository is an SFT repository and none is forbidden
    (the RL pool, the panel)."""
    sft_set, bad = set(sft), set(forbidden)
    assert not sft_set & bad, f"repos.sft overlaps the pool/panel: {sorted(sft_set & bad)}"
    for rec in records:
        key = repo_key(rec["repo"])
        if key not in sft_set or key in bad:
            raise ValueError(f"{rec.get('instance_id')}: repository {key} is not an SFT repository "
                             f"(repos.sft = {sorted(sft_set)}): SFT never sees pool or panel tasks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--init", required=True, help="the policy folder to start from (policy-init)")
    parser.add_argument("--oracle", nargs="*", default=[], help="oracle episode JSONL file(s)")
    parser.add_argument("--out", required=True, help="the trained policy folder")
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")


def run(cfg, args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    c, a = cfg.train.sft, cfg.agent
    torch.set_num_threads(max(1, int(c.threads)))
    seed = stage_seed(cfg.seed, STAGE)
    repos_root = Path(cfg.repos.root)
    sft_repos = sorted(cfg.repos.sft)
    forbidden = sorted(set(cfg.repos.pool) | set(cfg.repos.panel))
    manifest = Manifest(stage=STAGE, params={"train.sft": as_dict(c), "agent.tools": a.tools},
                        seeds={"sft": seed}, inputs=[args.init, *args.oracle],
                        code=__name__)
    tokenizer = AutoTokenizer.from_pretrained(args.init)
    model = AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32)

    with manifest.timed("data"):
        records = [r for f in sorted(args.oracle) for r in read_jsonl(f)]
        check_sft_repos(records, sft_repos, forbidden)
        records = sorted((r for r in records if r.get("outcome") == "resolved"),
                         key=lambda r: r["instance_id"])
        examples = [example_from_record(r) for r in records] * max(1, int(c.oracle_repeat))
        s = c.synthetic
        tools = tool_schemas(a.tools)
        synth: list = []
        if int(s.examples) > 0:
            files = synthetic_sources([repos_root / r for r in sft_repos], bool(s.stdlib),
                                      bool(s.repos), int(s.max_file_bytes))
            synth = synthetic_conversations(files, int(s.examples), seed, s.kinds,
                                            int(s.max_lines), int(s.per_file),
                                            int(a.max_tool_output_chars), float(s.rename),
                                            int(s.max_guesses), float(s.recovery), tools,
                                            workers=int(c.threads))
        for sid, msgs in synth:
            tokens, mask = conversation_tokens(tokenizer, msgs, tools)
            examples.append({"id": sid, "tokens": tokens, "mask": mask})
        cut = [truncate_example(e, int(c.max_seq_len)) for e in examples]
        n_cut = sum(len(e["tokens"]) > int(c.max_seq_len) for e in examples)
        examples = [e for e in cut if e is not None]
    if not examples:
        raise SystemExit("no SFT examples (no resolved oracle episodes and no synthetic ones)")
    log.info("SFT data: %d oracle episodes (x%d), %d synthetic, %d cut to %d tokens; "
             "%d tokens, %d action", len(records), int(c.oracle_repeat), len(synth), n_cut,
             int(c.max_seq_len),
             sum(len(e["tokens"]) for e in examples), sum(sum(e["mask"]) for e in examples))
    t0 = time.process_time()
    with manifest.timed("train"):
        curve = train(model, examples, c, seed, tokenizer.pad_token_id)
    cpu_s = time.process_time() - t0

    out = Path(args.out)
    with atomic_dir(out, owned=(MANIFEST_NAME, "config.json")) as tmp:
        with manifest.timed("save"):
            tokenizer.save_pretrained(tmp)
            model.save_pretrained(tmp)
            portable_tokenizer_config(tmp / "tokenizer_config.json")
            write_json(tmp / "loss_curve.json", curve)
            plot_curve(curve, tmp / "loss_curve.png")
    outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    n_tok = sum(x["tokens"] for x in curve)
    first = [x["loss"] for x in curve[:10]]
    last = [x["loss"] for x in curve[-10:]]
    manifest.notes = {
        "oracle_episodes": len(records), "oracle_repos": sorted({repo_key(r["repo"]) for r in records}),
        "synthetic_examples": len(synth), "examples": len(examples),
        "cut_examples": n_cut,
        "sequence_tokens": sum(len(e["tokens"]) for e in examples),
        "action_tokens": sum(sum(e["mask"]) for e in examples),
        "steps": len(curve), "trained_action_tokens": n_tok,
        "loss_first10": sum(first) / max(len(first), 1), "loss_last10": sum(last) / max(len(last), 1),
        "train_cpu_s": round(cpu_s, 1),
    }
    manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
    log.info("wrote %s: %d steps, loss %.3f -> %.3f", out, len(curve), manifest.notes["loss_first10"],
             manifest.notes["loss_last10"])
