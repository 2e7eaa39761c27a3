"""PPO: the update math learns a synthetic reward; the stage runs end to end on the tiny random
policy through the real agent and the process sandbox, writes a PEFT adapter that a FRESH
process loads onto the base policy (and that changes its logits), resumes an interrupted run to
the same adapter, and gives the same adapter under torchrun with 2 processes (gloo)."""
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
from forgeline.train import critic, ppo, ppo_checkpoints, ppo_update  # noqa: E402

from embedded import PARAMS  # noqa: E402
from test_critic import make_tasks  # noqa: E402
from tiny_models import tiny_lm, tok  # noqa: E402
from tiny_project import TINY_REPOS, write_repo  # noqa: E402

__all__ = ["tok"]  # a fixture from tiny_models: pytest finds it by this name

BIN = Path(sys.executable).parent
torch.set_num_threads(1)
# the update math as these tests were written for: GAE lambda 0.95, one actor pass, one minibatch
PPO = config.merged(PARAMS.train.ppo, {"lam": 0.95, "ppo_epochs": 1, "minibatches": 1, "actor_lr": 3e-4,
                                       "threads": 1})


# -- the update math: a synthetic reward, no sandbox --------------------------------------------

def test_ppo_updates_raise_a_synthetic_reward(tok):
    """Reward 1 when the first generated token is in S, else 0; S = the tokens whose embedding
    points along a fixed random direction u (about half the vocabulary), so the adapter CAN
    prefer all of S at once by turning the last hidden state towards u. The output embeddings
    are scaled up x10 (a random init's are so small that no hidden state separates S from the
    rest by more than ~0.2 logits). A few PPO steps (fresh samples each, the real trainer: GAE
    with a learned critic, clipped loss, KL to the base) must raise the mean reward well above
    the base policy's ~0.5."""
    torch.manual_seed(0)
    lm = tiny_lm(tok)
    with torch.no_grad():
        lm.get_input_embeddings().weight.mul_(10.0)
    u = torch.randn(lm.config.hidden_size, generator=torch.Generator().manual_seed(5))
    in_s = (lm.get_input_embeddings().weight @ u > 0).tolist()
    actor = ppo_update.make_actor(lm, AdapterConfig(r=8, alpha=16, dropout=0.0,
                                             target_modules=list(tiny.LORA_TARGET_MODULES)), seed=1)
    value = critic.value_model(tiny_lm(tok, seed=12).model, init_value=0.5)
    cfg = config.merged(PPO, {"actor_lr": 1e-2, "critic_lr": 1e-2, "minibatches": 2, "ppo_epochs": 2,
                              "kl_coef": 0.001, "entropy_coef": 0.0})
    trainer = ppo_update.PPOTrainer(actor, value, cfg, seed=3)
    engine = HFEngine(actor, tok)
    prompt = tok.encode("def add(a, b):", add_special_tokens=False)

    def draw(n, seed):
        actor.eval()
        gens = engine.generate([prompt] * n, 2, 1.0, 1.0, seed=seed)
        samples = []
        for i, g in enumerate(gens):
            rewards = [0.0] * (len(prompt) + len(g.token_ids))
            rewards[-1] = float(in_s[g.token_ids[0]])
            samples.append({"index": i, "key": f"s{i}", "tokens": prompt + g.token_ids,
                            "action_mask": [0] * len(prompt) + [1] * len(g.token_ids), "rewards": rewards})
        return samples, sum(float(in_s[g.token_ids[0]]) for g in gens) / n

    _, before = draw(128, 999)
    stats = []
    for step in range(1, 7):
        samples, _ = draw(32, step)
        stats.append(trainer.update(samples, step))
    _, after = draw(128, 999)
    assert 0.25 < before < 0.75
    assert after > before + 0.2, (before, after, stats)
    assert stats[-1]["kl"] > 0 and all(0 <= s["clip_frac"] <= 1 for s in stats)


def test_trainer_log_probs_are_those_the_tokens_were_sampled_from(tok):
    """At a sampling temperature != 1 the policy PPO optimises is softmax(logits / T): the
    trainer's log-probs of sampled tokens equal the engine's sampling log-probs only when the
    trainer is told T."""
    lm = tiny_lm(tok)
    with torch.no_grad():
        lm.get_input_embeddings().weight.mul_(10.0)  # logits far from flat, so T matters
    actor = ppo_update.make_actor(lm, AdapterConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj"]), seed=1)
    value = critic.value_model(tiny_lm(tok, seed=12).model)
    prompt = tok.encode("def add(a, b):", add_special_tokens=False)
    actor.eval()
    gens = HFEngine(actor, tok).generate([prompt] * 3, 6, 0.6, 1.0, seed=4)
    cfg = PPO
    tempered = ppo_update.PPOTrainer(actor, value, cfg, seed=0, temperature=0.6)
    plain = ppo_update.PPOTrainer(actor, value, cfg, seed=0)
    for i, g in enumerate(gens):
        n = len(g.token_ids)
        sample = {"key": f"s{i}", "tokens": prompt + g.token_ids, "action_mask": [0] * len(prompt) + [1] * n,
                  "rewards": [0.0] * (len(prompt) + n)}
        sampled = torch.tensor(g.logprobs)
        assert torch.allclose(tempered.action_logprobs(sample), sampled, atol=1e-4)
        assert not torch.allclose(plain.action_logprobs(sample), sampled, atol=1e-2)
    with pytest.raises(ValueError, match="temperature"):
        ppo_update.PPOTrainer(actor, value, cfg, seed=0, temperature=0.0)


def test_pure_parts():
    pairs = ppo.step_pairs(["b", "a", "c"], 4, 9, 5, 2)
    assert len(pairs) == 10 and len(set(pairs)) == 10
    assert [iid for iid, _ in pairs[:6:2]] and pairs == ppo.step_pairs(["c", "a", "b"], 4, 9, 5, 2)
    assert {iid for iid, _ in pairs[:6]} == {"a", "b", "c"}  # a whole shuffle before any repeat
    assert pairs != ppo.step_pairs(["a", "b", "c"], 5, 9, 5, 2)
    mbs = ppo_update.minibatches(7, 3, 1, 1, "actor", 0)
    assert sorted(i for mb in mbs for i in mb) == list(range(7)) and [len(m) for m in mbs] == [3, 2, 2]
    rec = {"instance_id": "x", "seed": 1, "outcome": "failed", "tokens": [1, 2], "action_mask": [0, 1],
           "validity": {"outcome": True, "labels": False, "trajectory": True, "alignment": False}}
    assert ppo.failed_gate(rec) == "labels"
    assert ppo.drop_counts([ppo.episode_sample(rec, 0, PARAMS.agent.reward)]) == {
        "outcome": 0, "labels": 1, "trajectory": 0, "alignment": 0}
    with pytest.raises(config.ConfigError, match="unknown key 'clip'"):
        config.merged(PPO, {"clip": 0.1})
    with pytest.raises(config.ConfigError, match="kl_mode: 'both' is not one of"):
        config.merged(PPO, {"kl_mode": "both"})


# -- the stage -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("ppo")
    for name in ("alpha", "beta", "gamma"):
        write_repo(root / "repos", name, *TINY_REPOS[name])
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in make_tasks()))
    policy = root / "policy"
    tok.save_pretrained(policy)
    tiny_lm(tok).save_pretrained(policy)
    (root / "critic").mkdir()
    critic.save_value_model(critic.init_value_model(policy, init_value=-0.2), root / "critic")
    data = config.merged(PARAMS, {
        "seed": 3, "repos": {"root": str(root / "repos")},
        "sandbox": {"backend": "process", "test_timeout_s": 60},
        # text alignment: the random tiny policy's turns drift from the canonical ids
        "agent": {"max_steps": 2, "max_new_tokens": 16, "alignment": "text", "context_limit": 2048,
                  "command_timeout_s": 30, "temperature": 1.0, "rollout": {"concurrency": 2}},
        "train": {"ppo": {**config.as_dict(PPO), "steps": 2, "tasks_per_step": 4, "checkpoint_every": 1,
                          "keep_checkpoints": 0, "minibatches": 2, "actor_lr": 1e-2,
                          "lora": {"dropout": 0.05}}},
        # the embedded default evaluates PPO's step-8 checkpoint: a step of this 2-step run instead
        "evaluation": {"policies": {"ppo-parent": {"step": 2}}}}).data
    return {"root": root, "policy": policy, "critic": root / "critic", "tasks": root / "tasks.jsonl", "data": data}


def _args(world, out: Path, **kw) -> argparse.Namespace:
    base = dict(policy=str(world["policy"]), critic=str(world["critic"]), tasks=[str(world["tasks"])],
                out=str(out), checkpoints=None, manifest=None, stop_after=0, base_url=None, served_model=None,
                parent=None, steps=0)
    return argparse.Namespace(**{**base, **kw})


def _env() -> dict[str, str]:
    # the sandbox's python3 = this interpreter (it has pytest)
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}


def _adapter(folder: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("run_a") / "adapter"
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", _env()["PATH"])
    try:
        ppo.run(Config(data=world["data"]), _args(world, out))
    finally:
        mp.undo()
    return out


def test_stage_writes_a_loadable_adapter_log_and_summary(world, uninterrupted):
    out = uninterrupted
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "train_log.jsonl", "checkpoint-summary.json",
            "reward_success.png", "kl.png", "ev.png", "drops.png", "manifest.json"} <= names
    conf = json.loads((out / "adapter_config.json").read_text())
    assert conf["r"] == 8 and conf["lora_alpha"] == 16 and conf["peft_type"] == "LORA"
    assert conf["target_modules"] == sorted(tiny.LORA_TARGET_MODULES)
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    keys = {"step", "reward_mean", "success_rate", "kl", "clip_frac", "value_loss", "ev", "entropy",
            "policy_loss", "drops", "solved", "episodes", "kept", "tokens", "wall_s", "time"}
    assert [r["step"] for r in rows] == [1, 2] and all(set(r) == keys for r in rows)
    assert all(set(r["drops"]) == set(ppo.GATES) and set(r["time"]) == {"generation", "sandbox", "critic", "actor"}
               for r in rows)
    assert all(r["episodes"] == 4 and r["kept"] + sum(r["drops"].values()) == 4 for r in rows)
    # the tasks that carried the successes: as many as success_rate counts, each a task of the pool
    assert all(sum(r["solved"].values()) == round(r["success_rate"] * r["episodes"]) for r in rows)
    assert rows[0]["kept"] > 0 and rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1 IS the base policy
    summary = json.loads((out / "checkpoint-summary.json").read_text())
    assert summary["step"] == 2 and summary["tensors"] == 2 * 7 * 2  # A and B of 7 modules x 2 layers
    from forgeline.provenance import sha256_file
    assert summary["files"]["adapter_model.safetensors"]["sha256"] == sha256_file(out / "adapter_model.safetensors")
    # a FRESH process: PeftModel.from_pretrained on the base policy; the adapter changes the logits
    code = (
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM\n"
        "from peft import PeftModel\n"
        "base = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "ids = torch.tensor([[5, 17, 42, 99, 7, 3]])\n"
        "with torch.no_grad():\n"
        "    ref = base(ids).logits\n"
        "    model = PeftModel.from_pretrained(base, sys.argv[2])\n"
        "    new = model(ids).logits\n"
        "print('DIFF', float((new - ref).abs().max()))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(world["policy"]), str(out)], capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = float(proc.stdout.split("DIFF")[1])
    assert diff > 1e-4


def test_interrupted_run_resumes_to_the_same_adapter(world, uninterrupted, tmp_path):
    out = tmp_path / "adapter"
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", _env()["PATH"])
    try:
        ppo.run(Config(data=world["data"]), _args(world, out, stop_after=1))
        [run_dir] = (tmp_path / "adapter-checkpoints").iterdir()  # one folder per fingerprint
        assert not out.exists() and ppo_checkpoints.latest_checkpoint(run_dir).name == "step-000001"
        ppo.run(Config(data=world["data"]), _args(world, out))
    finally:
        mp.undo()
    a, b = _adapter(uninterrupted), _adapter(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_s", "time")} for r in rows]  # noqa: E731
    read = lambda d: [json.loads(x) for x in (d / "train_log.jsonl").read_text().splitlines()]  # noqa: E731
    assert strip(read(out)) == strip(read(uninterrupted))
    man = json.loads((out / "manifest.json").read_text())
    assert man["notes"]["resumed_from"] == 1
    # another config never resumes this run's state: it starts afresh in a folder of its own
    other = config.deep_merge(world["data"], {"train": {"ppo": {"clip_ratio": 0.3}}})
    mp.setenv("PATH", _env()["PATH"])
    try:
        ppo.run(Config(data=other), _args(world, tmp_path / "other", stop_after=1,
                                          checkpoints=str(tmp_path / "adapter-checkpoints")))
    finally:
        mp.undo()
    dirs = sorted((tmp_path / "adapter-checkpoints").iterdir())
    assert run_dir in dirs and len(dirs) == 2
    [new_dir] = [d for d in dirs if d != run_dir]
    assert ppo_checkpoints.latest_checkpoint(new_dir).name == "step-000001"


def test_the_series_keeps_an_adapter_and_critic_per_checkpoint_step(world, uninterrupted):
    """checkpoint_every 1 over 2 steps: two series entries, each a PEFT adapter with its summary
    and the critic of that step; the last one is the final adapter; checkpoints.json lists them
    with the train log's numbers of their steps."""
    out = uninterrupted
    index = json.loads((out / "checkpoints.json").read_text())
    rows = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in index] == [1, 2]
    for entry, row in zip(index, rows):
        folder = out / entry["path"]
        assert json.loads((folder / "checkpoint-summary.json").read_text())["step"] == entry["step"]
        assert (entry["success_rate"], entry["reward_mean"]) == (row["success_rate"], row["reward_mean"])
        assert (folder / "critic" / "model.safetensors").is_file()
    last, first = _adapter(out / index[-1]["path"]), _adapter(out / index[0]["path"])
    final = _adapter(out)
    assert all(torch.equal(final[k], last[k]) for k in final)
    assert any(not torch.equal(first[k], last[k]) for k in first)  # step 2 moved the adapter
    # the manifest's digest covers the series
    man = json.loads((out / "manifest.json").read_text())
    assert any(o["path"].endswith("checkpoints") and o["kind"] == "dir" and o["files"] > 0 for o in man["outputs"])


def test_a_warm_start_continues_the_parents_checkpoint_with_a_fresh_optimizer(world, uninterrupted, tmp_path):
    """The child of the step-1 checkpoint runs step 2 (steps counted from the parent's). Its
    episodes are the parent's own step-2 episodes (same step seeds, same weights: the step-1
    adapter), so its rollout numbers equal the parent's; its update starts from a fresh optimizer,
    so its adapter is not the parent's step-2 adapter."""
    parent = uninterrupted / "checkpoints" / "step-000001"
    out = tmp_path / "child"
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", _env()["PATH"])
    try:
        ppo.run(Config(data=world["data"]), _args(world, out, critic=None, parent=str(parent), steps=1))
    finally:
        mp.undo()
    child = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (uninterrupted / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in child] == [2]
    same = ("reward_mean", "success_rate", "drops", "solved", "episodes", "kept", "tokens")
    assert {k: child[0][k] for k in same} == {k: ref[1][k] for k in same}
    assert json.loads((out / "checkpoint-summary.json").read_text())["step"] == 2
    assert [e["step"] for e in json.loads((out / "checkpoints.json").read_text())] == [2]
    a, b = _adapter(out), _adapter(uninterrupted)
    assert any(not torch.allclose(a[k], b[k]) for k in a)
    man = json.loads((out / "manifest.json").read_text())
    assert man["notes"]["parent"] == {"path": str(parent), "step": 1} and man["notes"]["steps"] == 1
    assert str(parent) in {i["path"] for i in man["inputs"]} and str(parent / "critic") in {i["path"] for i in man["inputs"]}
    # a parent of another adapter shape is refused, naming both
    world_r4 = config.deep_merge(world["data"], {"train": {"ppo": {"lora": {"r": 4}}}})
    with pytest.raises(SystemExit, match=r"adapter_config.json: the parent's adapter .*'r': 8.*builds {'r': 4"):
        ppo.run(Config(data=world_r4), _args(world, tmp_path / "bad", critic=None, parent=str(parent), steps=1))


def test_torchrun_two_processes_equal_one(world, uninterrupted, tmp_path):
    out = tmp_path / "adapter"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cfg": world["data"], "args": vars(_args(world, out))}))
    runner = tmp_path / "runner.py"
    runner.write_text("import argparse, json, sys, torch\n"
                      "torch.set_num_threads(1)\n"
                      "from forgeline.config import Config\n"
                      "from forgeline.train import ppo\n"
                      "spec = json.load(open(sys.argv[1]))\n"
                      "ppo.run(Config(data=spec['cfg']), argparse.Namespace(**spec['args']))\n")
    proc = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", str(runner), str(spec)],
                          capture_output=True, text=True, env=_env(), timeout=400)
    assert proc.returncode == 0, proc.stderr[-5000:]
    man = json.loads((out / "manifest.json").read_text())
    assert man["notes"]["world_size"] == 2
    a, b = _adapter(uninterrupted), _adapter(out)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), k
    rows = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (uninterrupted / "train_log.jsonl").read_text().splitlines()]
    for r, s in zip(rows, ref):
        assert (r["episodes"], r["kept"], r["drops"], r["tokens"]) == (s["episodes"], s["kept"], s["drops"], s["tokens"])
        assert r["reward_mean"] == pytest.approx(s["reward_mean"]) and r["value_loss"] == pytest.approx(s["value_loss"], rel=1e-4)


def test_adapter_loads_with_peft_auto_classes_from_any_directory(tok, tmp_path, monkeypatch):
    """PEFT hands the adapter's base_model_name_or_path to transformers, which resolves it
    against the CURRENT directory. The path the stage is given (results/policy/sft, relative to
    the project root) would load only from there; the absolute path recorded in its place loads
    from anywhere. A hub base is recorded as its id at its pinned commit."""
    project = tmp_path / "project"
    policy = project / "results" / "policy" / "sft"
    tok.save_pretrained(policy)
    tiny_lm(tok).save_pretrained(policy)
    monkeypatch.chdir(project)
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained("results/policy/sft")  # as the rule passes it
    actor = ppo_update.make_actor(base, PARAMS.train.ppo.lora, seed=1)
    ppo_checkpoints.save_adapter(actor, "results/adapter",
                                 ppo_checkpoints.base_reference("results/policy/sft", PARAMS.policy.base))
    ppo_checkpoints.save_adapter(actor, "results/adapter-as-peft-wrote-it")
    recorded = json.loads((project / "results/adapter/adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == str(policy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import sys\nfrom peft import AutoPeftModelForCausalLM\n"
            "model = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1])\n"
            "print('LOADED', type(model).__name__, model.peft_config['default'].base_model_name_or_path)\n")
    env = {**_env(), "HF_HUB_OFFLINE": "1"}  # a local base: nothing may be fetched

    def load(adapter: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, str(project / "results" / adapter)],
                              cwd=elsewhere, capture_output=True, text=True, env=env, timeout=120)

    proc = load("adapter")
    assert proc.returncode == 0 and "LOADED PeftModelForCausalLM" in proc.stdout, proc.stderr[-3000:]
    assert load("adapter-as-peft-wrote-it").returncode != 0  # PEFT's own relative record
    pinned = config.merged(PARAMS.policy.base, {"source": "hub", "hub": {"repo_id": "org/agent-8b",
                                                                         "revision": "a" * 40}})
    assert ppo_checkpoints.base_reference("results/policy/hub", pinned) == {
        "base_model_name_or_path": "org/agent-8b", "revision": "a" * 40}
