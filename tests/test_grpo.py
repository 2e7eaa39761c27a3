"""GRPO: the group-relative advantages (centring, std, leave-one-out, groups without signal
dropped and counted), the asymmetric clip, the token-level loss whose gradient on a toy softmax
policy equals the analytic one; the trainer raises a synthetic reward on the tiny LM; the stage
runs end to end through the real agent and the process sandbox, exports a PEFT adapter,
resumes an interrupted run to the same adapter and gives the same adapter under torchrun with 2
processes (gloo)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline import config  # noqa: E402
from forgeline.config import Config  # noqa: E402
from forgeline.params import AdapterConfig  # noqa: E402
from forgeline.policy import model as tiny  # noqa: E402
from forgeline.policy.engine import HFEngine  # noqa: E402
from forgeline.train import grpo, grpo_update, ppo_update  # noqa: E402

from embedded import PARAMS  # noqa: E402
from test_critic import make_tasks  # noqa: E402
from tiny_models import tiny_lm, tok  # noqa: E402
from tiny_project import TINY_REPOS, write_repo  # noqa: E402

__all__ = ["tok"]  # a fixture from tiny_models: pytest finds it by this name

BIN = Path(sys.executable).parent
torch.set_num_threads(1)
GRPO = config.merged(PARAMS.train.grpo, {"threads": 1})


# -- advantages ---------------------------------------------------------------------------------

def test_group_advantages_centre_scale_and_leave_one_out():
    r = [1.0, 0.0, 0.0, 1.0, 1.0]
    mean = 0.6
    assert grpo_update.group_advantages(r, "mean") == pytest.approx([x - mean for x in r])
    assert sum(grpo_update.group_advantages(r, "mean")) == pytest.approx(0.0, abs=1e-12)
    std = torch.tensor(r, dtype=torch.float64).std().item()  # the sample std (n - 1)
    assert grpo_update.group_advantages(r, "std") == pytest.approx([(x - mean) / (std + 1e-6) for x in r])
    loo = [x - (sum(r) - x) / 4 for x in r]  # r_i - the mean of the other four
    assert grpo_update.group_advantages(r, "loo") == pytest.approx(loo)
    # scale-free under std, scaled under mean
    assert grpo_update.group_advantages([10 * x for x in r], "std") == pytest.approx(
        grpo_update.group_advantages(r, "std"), rel=1e-5)
    with pytest.raises(ValueError, match="no signal"):
        grpo_update.group_advantages([0.5, 0.5], "std")
    with pytest.raises(ValueError, match="advantage mode"):
        grpo_update.group_advantages(r, "whiten")


def test_groups_of_equal_rewards_are_dropped_and_counted():
    def s(group, ret, gate=None):
        return {"group": group, "ret": ret, "gate": gate, "key": f"{group}:{ret}:{gate}"}

    samples = [s(0, 1.0), s(0, 0.0),            # signal
               s(1, 0.0), s(1, 0.0),            # all equal: dropped
               s(2, 1.0), s(2, 0.0, "labels"),  # one kept: dropped
               s(3, 0.0, "outcome"), s(3, 1.0, "outcome"),  # none kept: dropped
               s(4, 0.5), s(4, 0.5, "labels"), s(4, -0.5)]  # a gated episode leaves the group
    kept, counts = grpo_update.assign_advantages(samples, "mean")
    assert counts == {"groups": 5, "dropped": 3}
    assert [(k["group"], k["advantage"]) for k in kept] == [(0, 0.5), (0, -0.5), (4, 0.5), (4, -0.5)]
    assert "advantage" not in samples[0]  # copies, the input untouched


# -- the loss -----------------------------------------------------------------------------------

def test_token_level_gradient_equals_the_analytic_one_on_a_softmax_policy():
    """A one-step policy pi = softmax(theta) over 5 actions; 3 episodes of 1, 2 and 4 tokens
    (actions drawn from pi) with advantages 1.5, -0.5, -1; ratio 1 (old = current). The GRPO
    loss is -(1/N) sum_tokens A_i log-ratio's gradient, so its gradient is
    -(1/N) sum_tokens A_i (e_a - pi), N = 7 tokens: each TOKEN weighs 1/7, the 4-token episode
    4/7 (a per-sequence mean would give each episode 1/3)."""
    torch.manual_seed(0)
    theta = torch.randn(5, dtype=torch.float64, requires_grad=True)
    pi = torch.softmax(theta.detach(), -1)
    episodes = [([2], 1.5), ([0, 4], -0.5), ([1, 1, 3, 2], -1.0)]
    n = sum(len(a) for a, _ in episodes)
    for clip_low, clip_high in ((0.2, 0.28), (0.0, 0.0)):  # at ratio 1 no clip acts, even at 0
        theta.grad = None
        total = 0.0
        for actions, a in episodes:
            logp = torch.log_softmax(theta, -1)[torch.tensor(actions)]
            loss, clip_frac, approx_kl = grpo_update.grpo_loss(
                logp, logp.detach(), torch.full_like(logp, a), clip_low, clip_high, count=n)
            loss.backward()
            total += float(loss.detach())
            assert float(clip_frac) == 0.0 and float(approx_kl) == 0.0
        expected = torch.zeros(5, dtype=torch.float64)
        for actions, a in episodes:
            for act in actions:
                expected -= a * (torch.nn.functional.one_hot(torch.tensor(act), 5).double() - pi) / n
        assert torch.allclose(theta.grad, expected, atol=1e-12), (theta.grad, expected)
        assert total == pytest.approx(-sum(a * len(acts) for acts, a in episodes) / n)
    # the per-sequence mean (each episode 1/3) is another gradient: the normalisation matters
    seq = torch.zeros(5, dtype=torch.float64)
    for actions, a in episodes:
        for act in actions:
            seq -= a * (torch.nn.functional.one_hot(torch.tensor(act), 5).double() - pi) / (3 * len(actions))
    assert not torch.allclose(seq, expected, atol=1e-3)


def test_clip_is_asymmetric():
    """clip-higher (eps_low 0.2, eps_high 0.28): a positive advantage keeps its gradient up to
    ratio 1.28 (a symmetric 0.2 clip would stop it at 1.2); a negative one loses it below 0.8."""
    def grad_and_clip(ratio: float, adv: float) -> tuple[float, float]:
        logp = torch.tensor([0.0], dtype=torch.float64, requires_grad=True)
        old = torch.tensor([-torch.log(torch.tensor(ratio, dtype=torch.float64)).item()], dtype=torch.float64)
        loss, clip_frac, _ = grpo_update.grpo_loss(logp, old, torch.tensor([adv], dtype=torch.float64), 0.2, 0.28)
        loss.backward()
        return float(logp.grad[0]), float(clip_frac)

    g, frac = grad_and_clip(1.25, 1.0)
    assert g == pytest.approx(-1.25) and frac == 0.0   # inside [0.8, 1.28]: d(-A ratio)/d logp
    assert grad_and_clip(1.30, 1.0) == (0.0, 1.0)      # above 1 + eps_high: clipped, no gradient
    assert grad_and_clip(0.79, -1.0) == (0.0, 1.0)     # below 1 - eps_low: clipped
    g, frac = grad_and_clip(0.81, -1.0)
    assert g == pytest.approx(0.81) and frac == 0.0
    # the clip only ever removes a push further in the advantage's direction
    assert grad_and_clip(0.5, 1.0)[0] == pytest.approx(-0.5)
    assert grad_and_clip(1.5, -1.0)[0] == pytest.approx(1.5)


# -- the trainer on the tiny LM ------------------------------------------------------------------

def test_grpo_updates_raise_a_synthetic_reward(tok):
    """test_ppo's synthetic reward (1 when the first generated token is in a half of the
    vocabulary the adapter can prefer at once): a few GRPO steps of 8 groups of 4 (no critic)
    raise the mean reward well above the base policy's ~0.5; KL to the base grows from 0."""
    torch.manual_seed(0)
    lm = tiny_lm(tok)
    with torch.no_grad():
        lm.get_input_embeddings().weight.mul_(10.0)
    u = torch.randn(lm.config.hidden_size, generator=torch.Generator().manual_seed(5))
    in_s = (lm.get_input_embeddings().weight @ u > 0).tolist()
    actor = ppo_update.make_actor(lm, AdapterConfig(r=8, alpha=16, dropout=0.0,
                                                    target_modules=list(tiny.LORA_TARGET_MODULES)), seed=1)
    trainer = grpo_update.GRPOTrainer(actor, config.merged(GRPO, {"lr": 1e-2}), seed=3)
    engine = HFEngine(actor, tok)
    prompt = tok.encode("def add(a, b):", add_special_tokens=False)

    def draw(n, seed, group=1):
        actor.eval()
        gens = engine.generate([prompt] * n, 2, 1.0, 1.0, seed=seed)
        samples = [{"index": i, "group": i // group, "gate": None, "key": f"s{i}", "tokens": prompt + g.token_ids,
                    "action_mask": [0] * len(prompt) + [1] * len(g.token_ids), "ret": float(in_s[g.token_ids[0]])}
                   for i, g in enumerate(gens)]
        return samples, sum(s["ret"] for s in samples) / n

    _, before = draw(128, 999)
    stats = []
    for step in range(1, 7):
        samples, _ = draw(32, step, group=4)
        kept, counts = grpo_update.assign_advantages(samples, "std")
        assert counts["groups"] == 8
        if kept:
            stats.append(trainer.update(kept, step))
    _, after = draw(128, 999)
    assert 0.25 < before < 0.75
    assert after > before + 0.2, (before, after, stats)
    assert stats[0]["kl"] == pytest.approx(0.0, abs=1e-6) and stats[-1]["kl"] > 0
    assert all(0 <= s["clip_frac"] <= 1 for s in stats)


# -- the stage -------------------------------------------------------------------------------

def test_step_groups_pair_a_tasks_episodes():
    groups = grpo.step_groups(["b", "a", "c"], 4, 9, 2, 3)
    assert [g for g, _, _ in groups] == [0, 0, 0, 1, 1, 1]
    assert len({iid for _, iid, _ in groups[:3]}) == 1 and len({iid for _, iid, _ in groups[3:]}) == 1
    assert groups[0][1] != groups[3][1]  # distinct tasks in a step
    assert len({s for _, _, s in groups}) == 6  # G different episodes of a task, not G copies
    assert groups == grpo.step_groups(["c", "a", "b"], 4, 9, 2, 3)
    assert groups != grpo.step_groups(["a", "b", "c"], 5, 9, 2, 3)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("grpo")
    for name in ("alpha", "beta", "gamma"):
        write_repo(root / "repos", name, *TINY_REPOS[name])
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in make_tasks()))
    policy = root / "policy"
    tok.save_pretrained(policy)
    lm = tiny_lm(tok)
    with torch.no_grad():  # eos likely enough that a turn ends after 3-16 tokens, seed by seed
        out = lm.get_output_embeddings().weight
        out[tok.eos_token_id] = 4.0 * torch.randn(out.shape[1], generator=torch.Generator().manual_seed(0)) \
            / out.shape[1] ** 0.5
    lm.save_pretrained(policy)
    # A random policy's episodes are all invalid calls: one return for all, no signal. Here the
    # second turn's prompt + max_new_tokens exceeds context_limit when the first turn was long
    # (context_exceeded after 1 step: -0.5 - 0.01) and fits when it was short (invalid after 2:
    # -0.2 - 0.02), so a group's returns differ with its episodes' first turns. (Measured: the
    # first prompt is ~396 tokens, the second ~65 + the first turn's 2-16 tokens later.)
    data = config.merged(PARAMS, {
        "seed": 3, "repos": {"root": str(root / "repos")},
        "sandbox": {"backend": "process", "test_timeout_s": 60},
        "agent": {"max_steps": 2, "max_new_tokens": 16, "alignment": "text", "context_limit": 488,
                  "command_timeout_s": 30, "temperature": 1.0, "rollout": {"concurrency": 2}},
        "train": {"grpo": {**config.as_dict(GRPO), "steps": 2, "tasks_per_step": 2, "group_size": 3,
                           "checkpoint_every": 1, "keep_checkpoints": 0, "lr": 1e-2,
                           "advantage": "mean", "lora": {"dropout": 0.05}}}}).data
    return {"root": root, "policy": policy, "tasks": root / "tasks.jsonl", "data": data}


def _args(world, out: Path, **kw) -> argparse.Namespace:
    base = dict(policy=str(world["policy"]), tasks=[str(world["tasks"])], out=str(out), checkpoints=None,
                manifest=None, stop_after=0, base_url=None, served_model=None,
                parent=None, steps=0)
    return argparse.Namespace(**{**base, **kw})


def _run(world, args):
    mp = pytest.MonkeyPatch()
    # the sandbox's python3 = this interpreter (it has pytest)
    mp.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    try:
        grpo.run(Config(data=world["data"]), args)
    finally:
        mp.undo()


def _adapter(folder: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("run_a") / "adapter-grpo"
    _run(world, _args(world, out))
    return out


def test_stage_writes_an_adapter_log_plots_and_manifest(world, uninterrupted):
    out = uninterrupted
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "train_log.jsonl", "checkpoint-summary.json",
            "grpo_curve.png", "manifest.json"} <= names
    conf = json.loads((out / "adapter_config.json").read_text())
    assert conf["peft_type"] == "LORA" and conf["target_modules"] == sorted(tiny.LORA_TARGET_MODULES)
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["episodes"] == 6 and r["kept"] + sum(r["drops"].values()) == 6
        assert r["groups"] == 2 and 0 <= r["groups_dropped"] <= 2
        assert (r["trained"] == 0) == (r["groups_dropped"] == 2) == (r["kl"] is None)
        assert set(r) >= {"success_rate", "reward_mean", "kl", "clip_frac", "policy_loss", "tokens", "time", "solved"}
        assert sum(r["solved"].values()) == round(r["success_rate"] * r["episodes"])
    # the random tiny policy's episodes differ in their process rewards: some group trains
    assert any(r["trained"] > 0 for r in rows), rows
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "train.grpo" and "train.grpo" in manifest["params"]
    assert not any("critic" in str(i) for i in manifest["inputs"])
    summary = json.loads((out / "checkpoint-summary.json").read_text())
    assert summary["step"] == 2 and summary["tensors"] > 0
    weights = _adapter(out)
    assert any(float(t.abs().max()) > 0 for k, t in weights.items() if "lora_B" in k)  # it moved off the base
    # the series: an adapter per checkpoint step (every step here), no critic; the last is the final one
    index = json.loads((out / "checkpoints.json").read_text())
    assert [(e["step"], e["clip_frac"]) for e in index] == [(r["step"], r["clip_frac"]) for r in rows]
    assert not (out / index[0]["path"] / "critic").exists()
    last = _adapter(out / index[-1]["path"])
    assert all(torch.equal(last[k], weights[k]) for k in weights)


def test_stage_resumes_an_interrupted_run_to_the_same_adapter(world, uninterrupted, tmp_path):
    out = tmp_path / "adapter-grpo"
    ckpt = tmp_path / "ckpt"
    _run(world, _args(world, out, checkpoints=str(ckpt), stop_after=1))
    assert not out.exists() and list(ckpt.glob("*/step-000001/state.pt"))
    _run(world, _args(world, out, checkpoints=str(ckpt)))
    a, b = _adapter(uninterrupted), _adapter(out)
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    rows = lambda folder: [{k: v for k, v in json.loads(line).items() if k not in ("wall_s", "time")}  # noqa: E731
                           for line in (folder / "train_log.jsonl").read_text().splitlines()]
    assert rows(out) == rows(uninterrupted)


def test_torchrun_two_processes_equal_one(world, uninterrupted, tmp_path):
    out = tmp_path / "adapter-grpo"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cfg": world["data"], "args": vars(_args(world, out))}))
    runner = tmp_path / "runner.py"
    runner.write_text("import argparse, json, sys, torch\n"
                      "torch.set_num_threads(1)\n"
                      "from forgeline.config import Config\n"
                      "from forgeline.train import grpo\n"
                      "spec = json.load(open(sys.argv[1]))\n"
                      "grpo.run(Config(data=spec['cfg']), argparse.Namespace(**spec['args']))\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", str(runner), str(spec)],
                          capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert json.loads((out / "manifest.json").read_text())["notes"]["world_size"] == 2
    a, b = _adapter(uninterrupted), _adapter(out)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), k
    rows = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (uninterrupted / "train_log.jsonl").read_text().splitlines()]
    for r, s in zip(rows, ref):
        assert (r["episodes"], r["kept"], r["drops"], r["groups_dropped"], r["trained"], r["tokens"]) == \
            (s["episodes"], s["kept"], s["drops"], s["groups_dropped"], s["trained"], s["tokens"])
        assert r["reward_mean"] == pytest.approx(s["reward_mean"])
        assert (r["policy_loss"] is None) == (s["policy_loss"] is None)
        if r["policy_loss"] is not None:
            assert r["policy_loss"] == pytest.approx(s["policy_loss"], rel=1e-4, abs=1e-7)
