"""Copy pre-training: the tiny model learns to repeat what it saw earlier in its context.

An agent on an unseen repository must copy: the function name from the issue into grep, the
path and line number from grep's output into the edit. A few million parameters trained for a
few hundred SFT steps never learn that from agent data alone (issue 4's notes: 0 exact copies),
because copy targets are a few tokens per conversation. Here every loss token is one: each
sequence is `prefix, span, <sep>, span` of random ids, and the loss is on the second span,
which can only be predicted by finding the current id earlier in the context and emitting the
id that followed it (an induction circuit). Random ids make the circuit about positions and
identity, not about any word, so it applies to names the model has never seen.

Pure parts: `copy_batch` (the data), `copy_loss`. `pretrain` trains a model in place;
`plot_curve` draws its curve.
"""
from __future__ import annotations

import math
import random
from typing import Any, Mapping, Sequence

from tqdm import tqdm

COPY_DEFAULTS: dict[str, Any] = {
    "steps": 0,              # optimizer steps (0 = no copy pre-training)
    "batch": 64,             # sequences per step
    "prefix": [5, 20],       # random ids before the span (inclusive range)
    "span": [8, 20],         # ids in the span that is repeated (inclusive range)
    "lr": 3.0e-3,            # AdamW learning rate after warm-up (constant)
    "warmup_steps": 20,      # linear warm-up
    "grad_clip": 1.0,        # max global gradient norm
    "log_every": 50,         # steps between curve points
}


def copy_batch(rng: random.Random, ids: Sequence[int], sep_id: int, batch: int,
               prefix: Sequence[int], span: Sequence[int], ignore: int = -100):
    """(input_ids, labels) tensors of `batch` copy sequences, right-padded with `sep_id`:
    input = prefix + span + [sep] + span (ids drawn from `ids` by `rng`), labels = -100 except
    on the second span, where they are its ids (the model predicts each from the one before)."""
    import torch

    rows = []
    for _ in range(batch):
        p = [rng.choice(ids) for _ in range(rng.randint(*prefix))]
        s = [rng.choice(ids) for _ in range(rng.randint(*span))]
        rows.append((p + s + [sep_id] + s, [ignore] * (len(p) + len(s) + 1) + s))
    width = max(len(x) for x, _ in rows)
    x = torch.full((batch, width), sep_id, dtype=torch.long)
    y = torch.full((batch, width), ignore, dtype=torch.long)
    for i, (xs, ys) in enumerate(rows):
        x[i, :len(xs)] = torch.tensor(xs)
        y[i, :len(ys)] = torch.tensor(ys)
    return x, y


def copy_loss(logits, labels, ignore: int = -100):
    """(mean cross-entropy, accuracy) of next-token predictions on the labelled positions."""
    import torch

    pred, tgt = logits[:, :-1], labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), tgt.reshape(-1),
                                             ignore_index=ignore)
    mask = tgt != ignore
    acc = (pred.argmax(-1)[mask] == tgt[mask]).float().mean()
    return loss, float(acc)


def pretrain(model, ids: Sequence[int], sep_id: int, cfg: Mapping[str, Any], seed: int,
             progress: bool = True) -> list[dict]:
    """Train `model` in place on copy batches for cfg['steps'] steps; returns the curve
    [{step, loss, copy_accuracy, lr}] every `log_every` steps and at the last one
    (loss and accuracy averaged over the steps since the previous point; chance loss is
    ln(len(ids))). Deterministic for the same inputs and seed."""
    import torch

    c = {**COPY_DEFAULTS, **cfg}
    steps = int(c["steps"])
    if steps <= 0:
        return []
    torch.manual_seed(seed)
    rng = random.Random(f"copy:{seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=float(c["lr"]), betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    curve: list[dict] = []
    window: list[tuple[float, float]] = []
    bar = tqdm(range(1, steps + 1), desc="copy pre-training", unit="step", dynamic_ncols=True,
               disable=not progress)
    for step in bar:
        lr = float(c["lr"]) * min(1.0, step / max(int(c["warmup_steps"]), 1))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = copy_batch(rng, ids, sep_id, int(c["batch"]), c["prefix"], c["span"])
        loss, acc = copy_loss(model(input_ids=x).logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(c["grad_clip"]))
        opt.step()
        window.append((float(loss.detach()), acc))
        if step % int(c["log_every"]) == 0 or step == steps:
            curve.append({"step": step, "loss": round(sum(w[0] for w in window) / len(window), 4),
                          "copy_accuracy": round(sum(w[1] for w in window) / len(window), 4),
                          "lr": lr})
            window = []
            bar.set_postfix(loss=f"{curve[-1]['loss']:.2f}", copy=f"{curve[-1]['copy_accuracy']:.0%}",
                            chance=f"{math.log(len(ids)):.2f}")
    model.eval()
    return curve


def plot_curve(curve: Sequence[Mapping[str, Any]], path, chance_loss: float) -> None:
    """A PNG of the loss on the repeated span (against chance, ln of the ids drawn from) and
    the share of its ids predicted exactly, per curve point."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in curve]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, [c["loss"] for c in curve], lw=1.5, label="loss on the repeated span")
    ax.axhline(chance_loss, ls="--", lw=0.8, color="grey", label="chance (ln ids)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    acc = ax.twinx()
    acc.plot(steps, [c["copy_accuracy"] for c in curve], lw=1.5, color="tab:green", label="copy accuracy")
    acc.set_ylim(0, 1)
    acc.set_ylabel("ids copied exactly")
    ax.set_title("copy pre-training")
    fig.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
