"""Stage `critic`: pretrain the value model on offline rollouts, before PPO.

The value model is the base policy's architecture (its Qwen3 backbone, loaded from the policy
folder, without the LM head) plus a scalar head: one value per token. Its own weights: the
backbone fully fine-tuned (`mode: full`) or frozen with a LoRA adapter (`mode: lora`, merged
into the backbone when saved); the head is always trained. The head starts at weight 0 and
bias = the mean train target, i.e. exactly the trivial baseline, so any EV > 0 is learned.

Data: `forgeline agent-rollout` records (several seeds per task). Kept: alignment valid,
complete process labels, a valid terminal outcome, at most `max_seq_len` tokens, at least one
action token; every drop is counted by reason. Targets: per action token, the lambda-return of
the per-token rewards (`agent.reward`: process rewards per turn + the terminal reward, placed
by `rewards.token_rewards`) with V = 0 (`rl.lambda_returns`; gamma = lam = 1: the reward-to-go).
The value of action token i is read at position i - 1 (the state it is generated from).

Split: by TASK (instance_id), so no task is in two sets. `heldout: split`: the episodes of the
frozen split's val and test tasks (`--val-tasks`, `--test-tasks`: other repositories than the
train tasks) are val and test, all others train. `heldout: tasks`: the tasks ranked by
sha256(seed:instance_id) and cut by the `split` fractions. Train several epochs; after each,
MSE and EV on train and val; the epoch with the lowest val MSE is kept; MSE and EV on test are
reported next to the baseline that predicts the mean train target.

Outputs (`--out`, written as a whole): `model.safetensors` (backbone + `value_head.*`),
`config.json` (the backbone's), `critic_config.json`, `metrics.json`, `learning_curve.png`, then
the manifest. `load_value_model(DIR)` loads it back.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.rewards import OUTCOMES, token_rewards
from forgeline.config import as_dict
from forgeline.params import AdapterConfig, CriticConfig, RewardConfig
from forgeline.plots import figure, save_png
from forgeline.train.sft import make_batches
from forgeline.provenance import (MANIFEST_NAME, Manifest, atomic_dir, read_jsonl,
                                  write_json)
from forgeline.seeds import stage_seed
from forgeline.train import rl

log = logging.getLogger(__name__)
STAGE = "train.critic"
CRITIC_CONFIG = "critic_config.json"

# -- data ------------------------------------------------------------------------------------

DROP_REASONS = ("alignment", "labels", "outcome", "too_long", "no_action")


def drop_reason(record: Mapping[str, Any], max_seq_len: int) -> str | None:
    """Why an episode record is not usable as critic data (the first reason in DROP_REASONS
    order), or None: `alignment` (alignment_valid false), `labels` (a turn without its
    well_formed_call/command_ran labels), `outcome` (no valid terminal outcome: no reward),
    `too_long` (more than max_seq_len tokens), `no_action` (no action token to value)."""
    if not record.get("alignment_valid"):
        return "alignment"
    turns = record.get("turns") or []
    validity = record.get("validity") or {}
    if not turns or validity.get("labels") is False or not all(
            isinstance((t.get("labels") or {}).get(k), bool) for t in turns
            for k in ("well_formed_call", "command_ran")):
        return "labels"
    if record.get("outcome") not in OUTCOMES or validity.get("outcome") is False:
        return "outcome"
    if len(record["tokens"]) > max_seq_len:
        return "too_long"
    if not rl.action_positions(record["action_mask"]):
        return "no_action"
    return None


def filter_records(records: Sequence[Mapping[str, Any]], max_seq_len: int
                   ) -> tuple[list[Mapping[str, Any]], dict[str, int]]:
    """(usable records, {reason: count} for every reason in DROP_REASONS)."""
    dropped = {r: 0 for r in DROP_REASONS}
    kept = []
    for rec in records:
        reason = drop_reason(rec, max_seq_len)
        if reason is None:
            kept.append(rec)
        else:
            dropped[reason] += 1
    return kept, dropped


def critic_example(record: Mapping[str, Any], reward_cfg: RewardConfig, gamma: float, lam: float
                   ) -> dict[str, Any]:
    """{key, task, tokens, positions, targets} of one record: `positions` are the model output
    positions (i - 1 for each action token i >= 1), `targets` the lambda-returns of the
    per-token rewards at those action tokens."""
    import torch

    acts = rl.action_positions(record["action_mask"])
    per_token = token_rewards(record, reward_cfg)
    if any(r for i, r in enumerate(per_token) if r and i not in set(acts)):
        raise ValueError(f"{record['instance_id']}: a reward on a non-action token")
    # the recursion over the action tokens only (the rest carry nothing)
    rewards = torch.tensor([per_token[i] for i in acts], dtype=torch.float64)
    returns = rl.lambda_returns(rewards, torch.ones_like(rewards), gamma, lam)
    return {"key": f"{record['instance_id']}:{record['seed']}", "task": record["instance_id"],
            "tokens": [int(t) for t in record["tokens"]], "positions": [i - 1 for i in acts],
            "targets": returns.tolist()}


def task_rank(seed: int, task: str) -> str:
    return hashlib.sha256(f"{seed}:{task}".encode()).hexdigest()


def split_tasks(tasks: Sequence[str], fractions: Mapping[str, float], seed: int) -> dict[str, list[str]]:
    """{train, val, test: sorted task ids}: the distinct ids ranked by sha256(seed:id), the
    first round(n * val) to val, the next round(n * test) to test, the rest to train (with at
    least 3 tasks, val and test get at least one each when their fraction is > 0)."""
    ids = sorted(set(tasks), key=lambda t: (task_rank(seed, t), t))
    n = len(ids)
    sizes = {}
    for name in ("val", "test"):
        k = int(round(n * float(fractions[name])))
        if n >= 3 and float(fractions[name]) > 0:
            k = max(k, 1)
        sizes[name] = k
    n_val = min(sizes["val"], n)
    n_test = min(sizes["test"], n - n_val)
    return {"val": sorted(ids[:n_val]), "test": sorted(ids[n_val:n_val + n_test]),
            "train": sorted(ids[n_val + n_test:])}


def heldout_tasks(tasks: Sequence[str], val: Sequence[str], test: Sequence[str]) -> dict[str, list[str]]:
    """{train, val, test: sorted task ids} with val and test given (the frozen split's): the
    ids in `val` and `test` go there, every other id to train. A task in both is an error."""
    both = sorted(set(val) & set(test))
    if both:
        raise ValueError(f"{len(both)} task(s) are in both the val and the test tasks, e.g. {both[0]}")
    ids = set(tasks)
    return {"val": sorted(ids & set(val)), "test": sorted(ids & set(test)),
            "train": sorted(ids - set(val) - set(test))}


# -- the value model --------------------------------------------------------------------------

def _value_model_class():
    import torch

    class ValueModel(torch.nn.Module):
        """A causal-LM backbone (its last hidden states) + a linear head: one value per token."""

        def __init__(self, backbone, hidden_size: int):
            super().__init__()
            self.backbone = backbone
            self.value_head = torch.nn.Linear(hidden_size, 1)

        def forward(self, input_ids, attention_mask=None):
            """Values [B, T] (float32): values[:, t] is V(tokens[:t+1])."""
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.value_head(hidden.float()).squeeze(-1)

    return ValueModel


def lora_config(lora: AdapterConfig, task_type: str | None = None):
    """A PEFT LoraConfig from the config's adapter section (r, alpha, dropout, target_modules)."""
    from peft import LoraConfig

    return LoraConfig(r=int(lora.r), lora_alpha=int(lora.alpha), lora_dropout=float(lora.dropout),
                      target_modules=list(lora.target_modules), bias="none", task_type=task_type)


def value_model(backbone, init_value: float = 0.0, mode: str = "full", lora: AdapterConfig | None = None,
                seed: int = 0):
    """A ValueModel around `backbone` (a Qwen3Model): head weight 0, bias `init_value`; with
    mode lora the backbone is frozen and wrapped with a PEFT adapter (initialised from `seed`)."""
    import torch

    model = _value_model_class()(backbone, backbone.config.hidden_size)
    with torch.no_grad():
        model.value_head.weight.zero_()
        model.value_head.bias.fill_(float(init_value))
    if mode == "lora":
        from peft import get_peft_model
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.backbone = get_peft_model(backbone, lora_config(lora))
    return model


def init_value_model(policy_dir: str | Path, init_value: float = 0.0, mode: str = "full",
                     lora: AdapterConfig | None = None, seed: int = 0):
    """A ValueModel whose backbone is the policy folder's (AutoModelForCausalLM without its
    LM head)."""
    import torch
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32)
    return value_model(lm.model, init_value, mode, lora, seed)


def save_value_model(model, out: str | Path, extra: Mapping[str, Any] | None = None) -> list[Path]:
    """Write `model.safetensors` (backbone.* with any LoRA merged in, value_head.*),
    `config.json` (the backbone's) and `critic_config.json` into `out`; returns the paths.
    Does not change `model`."""
    from safetensors.torch import save_file

    out = Path(out)
    backbone = model.backbone
    if hasattr(backbone, "merge_and_unload"):  # PEFT: save plain weights, the adapter merged
        backbone = copy.deepcopy(backbone).merge_and_unload()
    state = {f"backbone.{k}": v.detach().contiguous().cpu() for k, v in backbone.state_dict().items()}
    state.update({f"value_head.{k}": v.detach().contiguous().cpu() for k, v in model.value_head.state_dict().items()})
    # one metadata key: safetensors writes the header's metadata map in no fixed order, and
    # the bytes of the file must not depend on the process (critic_config.json says the rest)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    backbone.config.to_json_file(str(out / "config.json"))
    write_json(out / CRITIC_CONFIG, {"architecture": "ValueModel", "backbone": type(backbone).__name__,
                                     "hidden_size": backbone.config.hidden_size, "value_head": "linear(hidden, 1)",
                                     "value_position": "values[t] = V(tokens[:t+1])", **(extra or {})})
    return [out / "model.safetensors", out / "config.json", out / CRITIC_CONFIG]


def load_value_model(path: str | Path, mode: str = "full", lora: AdapterConfig | None = None, seed: int = 0):
    """A saved value model (save_value_model's folder); with mode lora, a fresh adapter is
    put on the loaded (frozen) backbone."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(path)
    with torch.random.fork_rng(devices=[]):
        backbone = AutoModel.from_config(config, dtype=torch.float32)
    model = _value_model_class()(backbone, config.hidden_size)
    model.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=True)
    if mode == "lora":
        from peft import get_peft_model
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.backbone = get_peft_model(model.backbone, lora_config(lora))
    return model.eval()


def trainable_parameters(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]


# -- training ------------------------------------------------------------------------------

def collate_values(examples: Sequence[Mapping[str, Any]], pad_id: int):
    """(input_ids, target [B, T] float32, target mask [B, T]) with the targets placed at each
    example's output positions, right-padded: under the causal mask a real position never
    sees a pad, so the model runs without an attention mask (sdpa's fused causal kernel,
    ~2x faster here than with one) and the pads' values are never read."""
    import torch

    width = max(len(e["tokens"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    tgt = torch.zeros((len(examples), width), dtype=torch.float32)
    tmask = torch.zeros((len(examples), width), dtype=torch.float32)
    for b, e in enumerate(examples):
        n = len(e["tokens"])
        ids[b, :n] = torch.tensor(e["tokens"], dtype=torch.long)
        pos = torch.tensor(e["positions"], dtype=torch.long)
        tgt[b, pos] = torch.tensor(e["targets"], dtype=torch.float32)
        tmask[b, pos] = 1.0
    return ids, tgt, tmask


def predict(model, examples: Sequence[Mapping[str, Any]], pad_id: int, tokens_per_batch: int
            ) -> list[list[float]]:
    """The model's values at each example's positions (no gradient)."""
    import torch

    out: list[list[float] | None] = [None] * len(examples)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for idx in make_batches([len(e["tokens"]) for e in examples], tokens_per_batch, 0, 0, shuffle=False):
            batch = [examples[i] for i in idx]
            ids, _, _ = collate_values(batch, pad_id)
            values = model(ids)
            for b, i in enumerate(idx):
                out[i] = values[b, torch.tensor(examples[i]["positions"])].tolist()
    model.train(was_training)
    return out  # type: ignore[return-value]


def score(preds: Sequence[Sequence[float]], examples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """{mse, ev} over all action tokens of `examples`."""
    import torch

    p = torch.tensor([v for row in preds for v in row], dtype=torch.float64)
    y = torch.tensor([v for e in examples for v in e["targets"]], dtype=torch.float64)
    return {"mse": rl.mse(p, y), "ev": rl.explained_variance(p, y)}


def baseline_mse(examples: Sequence[Mapping[str, Any]], mean: float) -> float:
    """MSE of predicting `mean` for every action token."""
    ys = [v for e in examples for v in e["targets"]]
    return sum((y - mean) ** 2 for y in ys) / len(ys) if ys else float("nan")


def mean_target(examples: Sequence[Mapping[str, Any]]) -> float:
    """The mean target over all action tokens (the trivial baseline's prediction)."""
    ys = [v for e in examples for v in e["targets"]]
    return sum(ys) / len(ys) if ys else 0.0


def train_critic(model, train: Sequence[Mapping[str, Any]], val: Sequence[Mapping[str, Any]],
                 cfg: CriticConfig, seed: int, pad_id: int, progress: bool = True
                 ) -> tuple[list[dict], int, dict]:
    """Train `model` on `train` for cfg.epochs (`cfg`: the config's train.critic); after each
    epoch score train and val. Returns
    (epochs [{epoch, train_mse, train_ev, val_mse, val_ev}], chosen epoch (lowest val MSE;
    without val examples the last), the chosen epoch's state_dict). Deterministic."""
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    params = trainable_parameters(model)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2 and "norm" not in n]
    ids_decay = {id(p) for p in decay}
    no_decay = [p for p in params if id(p) not in ids_decay]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(cfg.weight_decay)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(cfg.lr), betas=tuple(cfg.betas), eps=1e-8)
    lengths = [len(e["tokens"]) for e in train]
    tpb = int(cfg.tokens_per_batch)
    epochs: list[dict] = []
    best: tuple[float, int, dict] | None = None
    step = 0
    bar = tqdm(total=int(cfg.epochs), desc="critic", unit="epoch", disable=not progress)
    for epoch in range(1, int(cfg.epochs) + 1):
        model.train()
        for idx in make_batches(lengths, tpb, seed, epoch):
            lr = float(cfg.lr) * min(1.0, (step + 1) / max(int(cfg.warmup_steps), 1))
            for g in opt.param_groups:
                g["lr"] = lr
            ids, tgt, tmask = collate_values([train[i] for i in idx], pad_id)
            values = model(ids)
            loss = rl.masked_mean((values - tgt) ** 2, tmask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, float(cfg.grad_clip))
            opt.step()
            step += 1
        tr = score(predict(model, train, pad_id, tpb), train)
        va = score(predict(model, val, pad_id, tpb), val) if val else {"mse": float("nan"), "ev": float("nan")}
        epochs.append({"epoch": epoch, "train_mse": tr["mse"], "train_ev": tr["ev"],
                       "val_mse": va["mse"], "val_ev": va["ev"]})
        key = va["mse"] if val else -epoch
        if best is None or key < best[0]:
            best = (key, epoch, copy.deepcopy(model.state_dict()))
        bar.update(1)
        bar.set_postfix(train_mse=f"{tr['mse']:.4f}", val_mse=f"{va['mse']:.4f}")
    bar.close()
    model.eval()
    assert best is not None
    return epochs, best[1], best[2]


def finite(x: float | None) -> float | None:
    """x, or None for NaN/inf (JSON has no NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)


def plot_learning_curve(epochs: Sequence[Mapping[str, Any]], chosen: int, baseline: float, path: Path) -> None:
    """Train/val MSE per epoch, the val baseline (mean train target) and the chosen epoch."""
    xs = [e["epoch"] for e in epochs]
    with figure(figsize=(7, 4), dpi=100) as (fig, ax):
        ax.plot(xs, [e["train_mse"] for e in epochs], marker="o", label="train MSE")
        ax.plot(xs, [e["val_mse"] for e in epochs], marker="o", label="val MSE")
        if math.isfinite(baseline):
            ax.axhline(baseline, ls="--", color="gray", label="val baseline (mean train return)")
        ax.axvline(chosen, ls=":", color="black", label=f"chosen epoch {chosen}")
        ax.set_xlabel("epoch")
        ax.set_ylabel("MSE of the value (per action token)")
        ax.set_title("critic pretraining")
        ax.legend()
        fig.tight_layout()
        save_png(fig, path)


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="the base policy folder (architecture + initial weights)")
    parser.add_argument("--episodes", nargs="+", required=True, help="rollout JSONL file(s) (agent-rollout)")
    parser.add_argument("--val-tasks", nargs="*", default=None,
                        help="heldout: split: task JSONL file(s) whose episodes are the val set")
    parser.add_argument("--test-tasks", nargs="*", default=None,
                        help="heldout: split: task JSONL file(s) whose episodes are the test set")
    parser.add_argument("--out", required=True, help="the critic folder to write")
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")


def run(cfg, args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoTokenizer

    c, reward_cfg = cfg.train.critic, cfg.agent.reward
    torch.set_num_threads(max(1, int(c.threads)))
    seed = stage_seed(cfg.seed, STAGE)
    val_files, test_files = args.val_tasks, args.test_tasks
    given = val_files is not None and test_files is not None
    if given != (c.heldout == "split"):
        raise SystemExit(f"train.critic.heldout is {c.heldout}: " + (
            "pass --val-tasks and --test-tasks (the frozen split's val.jsonl and test.jsonl)" if c.heldout == "split"
            else "--val-tasks/--test-tasks are for heldout: split; the held-out tasks come from train.critic.split"))
    manifest = Manifest(stage=STAGE, params={"train.critic": as_dict(c), "agent.reward": as_dict(reward_cfg)},
                        seeds={"critic": seed}, inputs=[args.policy, *args.episodes, *(val_files or []),
                                                        *(test_files or [])],
                        code=__name__)
    with manifest.timed("data"):
        records = sorted((r for f in args.episodes for r in read_jsonl(f)),
                         key=lambda r: (r["instance_id"], int(r["seed"])))
        kept, dropped = filter_records(records, int(c.max_seq_len))
        examples = [critic_example(r, reward_cfg, float(c.gamma), float(c.lam)) for r in kept]
        tasks = [e["task"] for e in examples]
        if given:
            split = heldout_tasks(tasks, [t["instance_id"] for f in val_files for t in read_jsonl(f)],
                                  [t["instance_id"] for f in test_files for t in read_jsonl(f)])
        else:
            split = split_tasks(tasks, as_dict(c.split), seed)
        parts = {name: [e for e in examples if e["task"] in set(ids)] for name, ids in split.items()}
    log.info("critic data: %d episodes kept of %d (dropped %s); tasks train/val/test %d/%d/%d (heldout: %s)",
             len(kept), len(records), dropped, *(len(split[k]) for k in ("train", "val", "test")), c.heldout)
    if not parts["train"]:
        raise SystemExit("no critic training episodes (all dropped, or too few tasks for the split)")
    if not parts["val"]:
        log.warning("critic: no val episodes: the last epoch is kept, unselected (heldout: %s)", c.heldout)
    pad_id = AutoTokenizer.from_pretrained(args.policy).pad_token_id or 0
    base = mean_target(parts["train"])
    model = init_value_model(args.policy, base, c.mode, c.lora, seed)
    with manifest.timed("train"):
        epochs, chosen, state = train_critic(model, parts["train"], parts["val"], c, seed, pad_id)
    model.load_state_dict(state)
    tpb = int(c.tokens_per_batch)
    val = score(predict(model, parts["val"], pad_id, tpb), parts["val"]) if parts["val"] else \
        {"mse": float("nan"), "ev": float("nan")}
    test = score(predict(model, parts["test"], pad_id, tpb), parts["test"]) if parts["test"] else \
        {"mse": float("nan"), "ev": float("nan")}
    metrics = {
        "epochs": [{k: (v if k == "epoch" else finite(v)) for k, v in e.items()} for e in epochs],
        "chosen_epoch": chosen,
        "val": {"mse": finite(val["mse"]), "ev": finite(val["ev"]),
                "baseline_mse": finite(baseline_mse(parts["val"], base))},
        "test": {"mse": finite(test["mse"]), "ev": finite(test["ev"]),
                 "baseline_mse": finite(baseline_mse(parts["test"], base)),
                 "episodes": len(parts["test"]), "tasks": len(split["test"])},
        "data": {"kept": len(kept), "dropped": dropped},
    }
    out = Path(args.out)
    with atomic_dir(out, owned=(MANIFEST_NAME, CRITIC_CONFIG)) as tmp:
        with manifest.timed("save"):
            save_value_model(model, tmp, {"mode": c.mode, "source_policy": str(args.policy),
                                          "chosen_epoch": chosen, "baseline_value": base})
            write_json(tmp / "metrics.json", metrics)
            plot_learning_curve(epochs, chosen, baseline_mse(parts["val"], base), tmp / "learning_curve.png")
    outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    manifest.notes = {"split": split, "episodes": {k: len(v) for k, v in parts.items()},
                      "action_tokens": {k: sum(len(e["targets"]) for e in v) for k, v in parts.items()},
                      "baseline_value": base, "chosen_epoch": chosen, "test": metrics["test"],
                      "dropped": dropped}
    manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
    log.info("critic: epoch %d chosen; test MSE %.4f (baseline %.4f), EV %s", chosen,
             test["mse"], metrics["test"]["baseline_mse"] or float("nan"), metrics["test"]["ev"])
