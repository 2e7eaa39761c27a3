"""The critic stage on real tiny episodes: scripted policies (solve / wrong fix / give up)
replayed through the real agent in the process sandbox on six tasks of three tiny repositories,
plus episodes of the random tiny policy; the value model trains on them, beats the mean-return
baseline on held-out TASKS, and its folder loads back to the same values."""
from __future__ import annotations

import argparse
import json

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline.agent.oracle import ScriptedEngine  # noqa: E402
from forgeline.agent.rollout import rollout  # noqa: E402
from forgeline import config  # noqa: E402
from forgeline.params import AdapterConfig  # noqa: E402
from forgeline.policy.chat import format_tool_call  # noqa: E402
from forgeline.policy.engine import HFEngine  # noqa: E402
from forgeline.sandbox.process import ProcessSandbox  # noqa: E402
from forgeline.tasks.generate import make_patch  # noqa: E402
from forgeline.tasks.repos import RepoSnapshot  # noqa: E402
from forgeline.train import critic  # noqa: E402

from embedded import PARAMS  # noqa: E402
from tiny_models import direct_python, tiny_lm, tok  # noqa: E402
from tiny_project import TINY_REPOS, write_repo  # noqa: E402

__all__ = ["direct_python", "tok"]  # fixtures from tiny_models: pytest finds them by these names

torch.set_num_threads(1)
# sampling at T=1 and the ids check: the random policy's episodes drift from the canonical ids
AGENT = config.merged(PARAMS.agent, {"context_limit": 4096, "max_new_tokens": 128, "max_steps": 5,
                                     "command_timeout_s": 20, "rollout": {"concurrency": 4},
                                     "temperature": 1.0, "alignment": "ids"})

# (repo, function, buggy change old -> new, FAIL_TO_PASS test names, the function's docstring)
BUGS = [
    ("alpha", "add", "return a + b", "return a - b", ["test_add", "test_add_zero"], '"""Sum."""'),
    ("alpha", "clamp", "if x < lo:", "if x > lo:", ["test_clamp_low", "test_clamp_high", "test_clamp_edge"],
     '"""Clamp x into [lo, hi]."""'),
    ("beta", "count_above", "if x > t:", "if x >= t:", ["test_count_above_edge"], '"""How many items exceed t."""'),
    ("beta", "scale", "x * k", "x + k", ["test_scale"], '"""Multiply each item by k."""'),
    ("gamma", "is_even", "n % 2 == 0", "n % 2 == 1", ["test_even", "test_odd"], '"""True for even n."""'),
    ("gamma", "span", "max(xs) - min(xs)", "max(xs) + min(xs)", ["test_span"], '"""max - min of a non-empty list."""'),
]


def call(name: str, **args) -> str:
    return format_tool_call(name, args)


def make_tasks() -> list[dict]:
    tasks = []
    for repo, fn, old, new, f2p, _ in BUGS:
        source, tests = TINY_REPOS[repo]
        assert source.count(old) == 1
        ids = [f"tests/test_{repo}.py::{t}" for t in f2p]
        all_ids = [f"tests/test_{repo}.py::{line.split('(')[0][4:]}" for line in tests.splitlines()
                   if line.startswith("def test_")]
        tasks.append({"instance_id": f"{repo}.0000.{fn}", "repo": repo,
                      "patch": make_patch(f"{repo}/__init__.py", source, source.replace(old, new)),
                      "FAIL_TO_PASS": ids, "PASS_TO_PASS": [t for t in all_ids if t not in ids],
                      "problem_statement": f"`{repo}.{fn}` gives wrong results since the last change.",
                      "image_name": "x"})
    return tasks


def scripts(task: dict, bug: tuple) -> dict[str, list[str]]:
    """Four scripted policies: two that fix the bug, one that edits the wrong line, one that gives up."""
    repo, fn, old, new, _, doc = bug
    path = f"{repo}/__init__.py"
    fix = call("edit", path=path, old=new, new=old)
    wrong = call("edit", path=path, old=doc, new=doc[:-4] + ' (checked)."""')
    test = call("bash", command="python3 -m pytest -q " + " ".join(task["FAIL_TO_PASS"]))
    return {"solve": [fix, test, call("submit")],
            "solve_look": [call("bash", command=f"cat {path}"), fix, test, call("submit")],
            "wrong": [wrong, test, call("submit")],
            "give_up": [call("bash", command="ls"), call("submit")]}


def make_lm(tok):
    return tiny_lm(tok, hidden_size=48, intermediate=96, max_position_embeddings=4096)


@pytest.fixture(scope="module")
def data(tmp_path_factory, tok):
    """Episode records (JSONL) of the scripted policies and of the random tiny policy."""
    root = tmp_path_factory.mktemp("critic")
    repos = root / "repos"
    for name in ("alpha", "beta", "gamma"):
        write_repo(repos, name, *TINY_REPOS[name])
    envs = {n: RepoSnapshot.load(repos, n).env() for n in ("alpha", "beta", "gamma")}
    tasks = make_tasks()
    sb = ProcessSandbox()
    records = []
    for kind in ("solve", "solve_look", "wrong", "give_up"):
        engine = ScriptedEngine.replay(tok, {t["problem_statement"]: scripts(t, b)[kind] for t, b in zip(tasks, BUGS)})
        # the same script under a per-kind seed: every (task, seed) is one rollout pair
        seed = {"solve": 0, "solve_look": 1, "wrong": 2, "give_up": 3}[kind]
        records += rollout([(t, seed) for t in tasks], engine, sb, AGENT, envs=envs, tokenizer=tok,
                           policy="scripted", progress=False)
    lm = make_lm(tok)
    policy = root / "policy"
    tok.save_pretrained(policy)
    lm.save_pretrained(policy)
    random_eps = rollout([(tasks[0], 7), (tasks[2], 7)], HFEngine(lm, tok), sb,
                         config.merged(AGENT, {"max_steps": 1, "max_new_tokens": 24}), envs=envs, tokenizer=tok,
                         policy="random", progress=False)
    path = root / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records + random_eps))
    return {"root": root, "policy": policy, "episodes": path, "records": records, "random": random_eps,
            "tasks": tasks}


def test_scripted_episodes_have_the_outcomes_they_were_written_for(data):
    by_seed = {}
    for r in data["records"]:
        by_seed.setdefault(r["seed"], set()).add(r["outcome"])
    assert by_seed == {0: {"resolved"}, 1: {"resolved"}, 2: {"failed"}, 3: {"failed"}}
    assert all(r["alignment_valid"] and r["ppo_valid"] for r in data["records"])


def test_pure_parts():
    assert critic.split_tasks([f"t{i}" for i in range(10)] * 2, {"train": 0.6, "val": 0.2, "test": 0.2}, 3) == \
        critic.split_tasks([f"t{i}" for i in range(9, -1, -1)], {"train": 0.6, "val": 0.2, "test": 0.2}, 3)
    s = critic.split_tasks([f"t{i}" for i in range(10)], {"train": 0.6, "val": 0.2, "test": 0.2}, 3)
    assert [len(s[k]) for k in ("train", "val", "test")] == [6, 2, 2]
    assert not (set(s["train"]) & set(s["val"])) and not (set(s["val"]) & set(s["test"]))
    assert s != critic.split_tasks([f"t{i}" for i in range(10)], {"train": 0.6, "val": 0.2, "test": 0.2}, 4)
    b = critic.make_batches([100, 900, 300, 300, 50], 1000, 1, 1)
    assert sorted(i for x in b for i in x) == list(range(5))
    assert critic.make_batches([100, 900, 300, 300, 50], 1000, 1, 1, shuffle=False) == [[0], [1], [2, 3, 4]]
    with pytest.raises(config.ConfigError, match="unknown key 'epochz'"):
        config.merged(PARAMS.train.critic, {"epochz": 3})
    with pytest.raises(config.ConfigError, match="lora: unknown key 'rank'"):
        config.merged(PARAMS.train.critic, {"lora": {"rank": 3}})


def test_critic_stage_trains_beats_the_baseline_and_reloads(data, tmp_path):
    cfg = config.merged(PARAMS, {"seed": 5, "train": {"critic": {
        "epochs": 6, "lr": 3e-3, "warmup_steps": 2, "tokens_per_batch": 4096, "threads": 1,
        "heldout": "tasks", "split": {"train": 0.5, "val": 0.17, "test": 0.33}}}})
    out = tmp_path / "critic"
    critic.run(cfg, argparse.Namespace(policy=str(data["policy"]), episodes=[str(data["episodes"])],
                                       val_tasks=None, test_tasks=None, out=str(out), manifest=None))
    m = json.loads((out / "metrics.json").read_text())
    # the shape the report stage reads
    assert set(m) == {"epochs", "chosen_epoch", "val", "test", "data"}
    assert [e["epoch"] for e in m["epochs"]] == list(range(1, 7))
    assert all(set(e) == {"epoch", "train_mse", "train_ev", "val_mse", "val_ev"} for e in m["epochs"])
    assert set(m["val"]) == {"mse", "ev", "baseline_mse"}
    assert set(m["test"]) == {"mse", "ev", "baseline_mse", "episodes", "tasks"}
    assert m["chosen_epoch"] == min(m["epochs"], key=lambda e: e["val_mse"])["epoch"]
    # data: the random policy's episodes drift from the canonical ids -> dropped (alignment)
    n_bad = sum(not r["alignment_valid"] for r in data["random"])
    assert m["data"]["kept"] == len(data["records"]) + len(data["random"]) - n_bad
    assert m["data"]["dropped"]["alignment"] == n_bad and sum(m["data"]["dropped"].values()) == n_bad
    assert m["test"]["tasks"] == 2 and m["test"]["episodes"] == 8
    man = json.loads((out / "manifest.json").read_text())
    split = man["notes"]["split"]
    assert sorted(split["train"] + split["val"] + split["test"]) == sorted(t["instance_id"] for t in data["tasks"])
    # learned: better than predicting the mean train return on held-out tasks
    assert m["test"]["mse"] < m["test"]["baseline_mse"] and m["test"]["ev"] > 0
    chosen = m["epochs"][m["chosen_epoch"] - 1]
    assert chosen["train_mse"] < m["epochs"][0]["train_mse"] and chosen["val_mse"] < m["val"]["baseline_mse"]
    assert {p.name for p in out.iterdir()} >= {"model.safetensors", "config.json", "critic_config.json",
                                               "metrics.json", "learning_curve.png", "manifest.json"}
    # reload: the same values as the stage's own evaluation
    model = critic.load_value_model(out)
    kept, _ = critic.filter_records([r for r in data["records"] if r["instance_id"] in split["test"]], 4096)
    ex = [critic.critic_example(r, PARAMS.agent.reward, 1.0, 1.0) for r in kept]
    again = critic.score(critic.predict(model, ex, 0, 4096), ex)
    assert again["mse"] == pytest.approx(m["test"]["mse"], rel=1e-5)


def test_heldout_split_takes_val_and_test_from_the_split_files(data, tmp_path):
    """heldout: split (the pipeline's): the episodes of the tasks in --val-tasks / --test-tasks
    are val and test, every other episode trains; the config and the arguments must agree."""
    by_repo = {t["repo"]: [] for t in data["tasks"]}
    for t in data["tasks"]:
        by_repo[t["repo"]].append(t)
    files = {}
    for part, repo in (("val", "beta"), ("test", "gamma")):
        files[part] = tmp_path / f"{part}.jsonl"
        files[part].write_text("".join(json.dumps(t) + "\n" for t in by_repo[repo]))
    cfg = config.merged(PARAMS, {"seed": 5, "train": {"critic": {
        "epochs": 2, "lr": 3e-3, "warmup_steps": 2, "tokens_per_batch": 4096, "threads": 1, "heldout": "split"}}})
    out = tmp_path / "critic"
    args = argparse.Namespace(policy=str(data["policy"]), episodes=[str(data["episodes"])],
                              val_tasks=[str(files["val"])], test_tasks=[str(files["test"])],
                              out=str(out), manifest=None)
    critic.run(cfg, args)
    split = json.loads((out / "manifest.json").read_text())["notes"]["split"]
    assert split == {"val": sorted(t["instance_id"] for t in by_repo["beta"]),
                     "test": sorted(t["instance_id"] for t in by_repo["gamma"]),
                     "train": sorted(t["instance_id"] for t in by_repo["alpha"])}
    m = json.loads((out / "metrics.json").read_text())
    # the scripted episodes: 4 per task (one per script), all kept
    assert m["test"]["tasks"] == 2 and m["test"]["episodes"] == 8 and m["val"]["mse"] is not None
    with pytest.raises(SystemExit, match="pass --val-tasks and --test-tasks"):
        critic.run(cfg, argparse.Namespace(**{**vars(args), "val_tasks": None, "test_tasks": None}))
    with pytest.raises(ValueError, match="in both the val and the test tasks"):
        critic.heldout_tasks(["a", "b"], ["a"], ["a"])


def test_lora_value_model_trains_only_adapter_and_head_and_saves_merged(tok, tmp_path):
    lora = AdapterConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    model = critic.value_model(make_lm(tok).model, init_value=0.3, mode="lora", lora=lora, seed=1)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n or n.startswith("value_head.") for n in names)
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        assert torch.allclose(model(ids), torch.full((1, 5), 0.3))  # starts as the baseline
        for n, p in model.named_parameters():  # move the adapter and the head off their init
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
        before = model(ids)
    critic.save_value_model(model, tmp_path)
    again = critic.load_value_model(tmp_path)
    assert not any("lora_" in n for n, _ in again.named_parameters())  # merged into plain weights
    with torch.no_grad():
        assert torch.allclose(again(ids), before, atol=1e-5)


def test_batched_values_equal_each_episode_alone(tok):
    # a batch is right-padded and runs without an attention mask: a shorter episode's values
    # must not change beside a longer one
    torch.manual_seed(0)
    model = critic.value_model(make_lm(tok).model, init_value=0.0, seed=1)
    with torch.no_grad():
        model.value_head.weight.normal_()
    ex = [{"tokens": [5, 17, 42, 99, 7, 8, 9], "positions": [2, 5], "targets": [0.1, 0.2]},
          {"tokens": [11, 12, 13], "positions": [1, 2], "targets": [0.0, 1.0]}]
    batched = critic.predict(model, ex, 0, 4096)
    alone = [critic.predict(model, [e], 0, 4096)[0] for e in ex]
    assert batched[1] == pytest.approx(alone[1], abs=1e-5) and batched[0] == pytest.approx(alone[0], abs=1e-5)
    assert len({len(e["tokens"]) for e in ex}) == 2  # the second row really was padded
