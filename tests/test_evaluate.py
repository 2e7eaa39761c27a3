"""Stages `evaluate` and `tables` for real: a tiny random Qwen3 and a LoRA adapter of it (made
here with peft) through the real agent, the process sandbox and the verifier on a tiny panel;
resuming from an interrupted record; paired tables from the results files, and the pure table
logic on hand-made results with known counts."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline.agent.rollout import sample_seeds
from forgeline import config
from forgeline.config import Config
from forgeline.evaluation import attribution as at, evaluate as ev, tables as tb
from forgeline.policy import engine as engine_mod

from embedded import PARAMS
from tiny_models import direct_python, tiny_lm, tiny_tokenizer

__all__ = ["direct_python"]  # a fixture from tiny_models: pytest finds it by this name

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two tiny repositories, a 3-task panel, a tiny random policy folder and a LoRA adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from forgeline.tasks.generate import make_patch
    from forgeline.tasks.repos import RepoSnapshot

    from tiny_project import TINY_REPOS, write_repo

    tmp = tmp_path_factory.mktemp("eval")
    root = tmp / "repos"
    for name in ("alpha", "beta"):
        write_repo(root, name, *TINY_REPOS[name])

    def task(name, iid, old, new, f2p):
        src = TINY_REPOS[name][0]
        return {"instance_id": iid, "repo": name, "base_commit": RepoSnapshot.load(root, name).commit,
                "patch": make_patch(f"{name}/__init__.py", src, src.replace(old, new)),
                "FAIL_TO_PASS": f2p, "PASS_TO_PASS": [], "problem_statement": f"`{name}` is broken.",
                "image_name": "x"}

    tasks = [task("alpha", "alpha.1", "return a + b", "return a - b", ["tests/test_alpha.py::test_add"]),
             task("alpha", "alpha.2", "if x > hi:", "if x >= hi:", ["tests/test_alpha.py::test_clamp_edge"]),
             task("beta", "beta.1", "if x > t:", "if x >= t:", ["tests/test_beta.py::test_count_above_edge"])]
    panel = tmp / "panel.jsonl"
    panel.write_text("".join(json.dumps(t) + "\n" for t in reversed(tasks)))
    tok = tiny_tokenizer([root / "alpha", root / "beta"], vocab_size=300)
    policy = tmp / "base"
    tok.save_pretrained(policy)
    tiny_lm(tok, seed=3, layers=1, heads=2, kv_heads=1, max_position_embeddings=4096).save_pretrained(policy)
    # A LoRA adapter with random (not zero) B, so the adapted policy really differs from the base.
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapter = tmp / "ppo"
    get_peft_model(AutoModelForCausalLM.from_pretrained(policy), lora).save_pretrained(adapter)
    return {"root": root, "panel": panel, "policy": policy, "adapter": adapter, "tmp": tmp}


def cfg(world) -> Config:
    return config.merged(PARAMS, {
        "seed": 5, "repos": {"root": str(world["root"]), "pool": ["alpha", "beta"], "sft": [], "panel": []},
        "sandbox": {"backend": "process", "test_timeout_s": 60},
        "agent": {"max_steps": 2, "max_new_tokens": 8, "rollout": {"concurrency": 3, "seeding": "episode"}},
        "evaluation": {"k": 1, "threads": 1, "panels": {"panel": [str(world["panel"])]},
                       "gate": {"policy": "ppo", "against": "base", "panel": "panel"}}})


def evaluate(world, policy, out, name=None, base=None, partial=None) -> list[dict]:
    args = argparse.Namespace(tasks=[str(world["panel"])], panel="panel", policy=str(policy), base=base, name=name,
                              engine=None, base_url=None, model=None, tokenizer=None, out=str(out),
                              episodes=None, partial=partial, manifest=None)
    ev.run(cfg(world), args)
    return [json.loads(line) for line in Path(out).read_text().splitlines()]


def no_wall(rows):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def no_timing(path: Path):
    return [{k: v for k, v in json.loads(line).items() if k != "timing"} for line in path.read_text().splitlines()]


def without_logprobs(record: dict) -> dict:
    return {**{k: v for k, v in record.items() if k != "logprobs"},
            "turns": [{k: v for k, v in t.items() if k != "logprobs"} for t in record["turns"]]}


@pytest.fixture(scope="module")
def evaluated(world):
    out = world["tmp"] / "results"
    base = evaluate(world, world["policy"], out / "base.jsonl")
    ppo = evaluate(world, world["adapter"], out / "ppo.jsonl")
    return {"base": base, "ppo": ppo, "dir": out}


def test_evaluate_base_policy_results(world, evaluated):
    rows = evaluated["base"]
    seed = sample_seeds(5, 1)[0]
    assert [(r["instance_id"], r["seed"]) for r in rows] == [("alpha.1", seed), ("alpha.2", seed), ("beta.1", seed)]
    for r in rows:
        assert set(r) == set(ev.RESULT_FIELDS)
        assert r["policy"] == "base" and r["panel"] == "panel" and r["repo"] in ("alpha", "beta")
        assert r["resolved"] is False  # a random model fixes nothing
        assert 1 <= r["steps"] <= 2 and r["input_tokens"] > 0 and r["output_tokens"] > 0 and r["wall_s"] > 0
        assert r["termination"] in ("step_limit", "invalid_calls", "submitted", "context_exceeded")
    d = evaluated["dir"]
    episodes = [json.loads(line) for line in (d / "base.episodes.jsonl").read_text().splitlines()]
    assert [e["instance_id"] for e in episodes] == ["alpha.1", "alpha.2", "beta.1"]
    assert all(e["policy"] == "base" and "turns" in e and "timing" in e for e in episodes)
    assert {r["config_digest"] for r in rows} == {episodes[0]["config_digest"]}
    man = json.loads((d / "base.manifest.json").read_text())
    assert man["stage"] == "evaluation.evaluate" and man["seeds"]["episodes"] == [seed]
    assert man["notes"]["loaded"]["kind"] == "model" and man["notes"]["episodes"] == 3
    assert not (d / "base.jsonl.partial").exists()


def test_evaluate_peft_adapter_is_active(world, evaluated):
    rows = evaluated["ppo"]
    assert [(r["instance_id"], r["seed"]) for r in rows] == [(r["instance_id"], r["seed"]) for r in evaluated["base"]]
    assert all(r["policy"] == "ppo" for r in rows)
    man = json.loads((evaluated["dir"] / "ppo.manifest.json").read_text())
    assert man["notes"]["loaded"] == {"kind": "adapter", "path": str(world["adapter"]),
                                      "base": str(world["policy"]), "tokenizer": str(world["policy"])}
    assert {Path(i["path"]).name for i in man["inputs"]} == {"panel.jsonl", "ppo", "base"}
    # same seeds, same prompts: only the adapter's weights can change the sampling distribution
    # (the tokens themselves often coincide: a random tiny model's distribution is near-uniform)
    base_eps = no_timing(evaluated["dir"] / "base.episodes.jsonl")
    ppo_eps = no_timing(evaluated["dir"] / "ppo.episodes.jsonl")
    assert base_eps[0]["messages"][:2] == ppo_eps[0]["messages"][:2]
    b0, p0 = base_eps[0]["turns"][0], ppo_eps[0]["turns"][0]
    assert b0["token_ids"][0] == p0["token_ids"][0]  # same first prompt, same seed
    assert abs(b0["logprobs"][0] - p0["logprobs"][0]) > 1e-4  # ... from another distribution
    # --base given explicitly for an HF folder that is not an adapter is a mistake
    with pytest.raises(ValueError, match="not a PEFT adapter"):
        engine_mod.load_hf_policy(world["policy"], base=str(world["policy"]))


def test_evaluate_resumes_an_interrupted_record(world, evaluated):
    d = evaluated["dir"]
    lines = (d / "ppo.episodes.jsonl").read_text().splitlines()
    partial = world["tmp"] / "resume" / "ppo.partial"
    partial.parent.mkdir()
    # "killed" after the first episode, mid-way through writing the second
    partial.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    again = evaluate(world, world["adapter"], world["tmp"] / "resume" / "ppo.jsonl", base=str(world["policy"]),
                     partial=str(partial))
    assert no_wall(again) == no_wall(evaluated["ppo"])
    assert again[0] == evaluated["ppo"][0]  # the survivor is taken as recorded, wall time included
    resumed, whole = no_timing(world["tmp"] / "resume" / "ppo.episodes.jsonl"), no_timing(d / "ppo.episodes.jsonl")
    # the same tokens, turns and verdicts; log-probs to float noise: the resumed run decodes
    # its episodes in a smaller batch, and on some CPUs a batch's shape moves the last bits
    assert [without_logprobs(r) for r in resumed] == [without_logprobs(r) for r in whole]
    for r, w in zip(resumed, whole):
        assert r["logprobs"] == pytest.approx(w["logprobs"], rel=1e-5, abs=1e-6)
    assert not partial.exists()


def test_tables_from_two_results_files(world, evaluated):
    d = evaluated["dir"]
    out = world["tmp"] / "tables"
    tb.run(cfg(world), argparse.Namespace(results=[str(d / "ppo.jsonl"), str(d / "base.jsonl")],
                                          episodes=[str(d / "base.episodes.jsonl"), str(d / "ppo.episodes.jsonl")],
                                          base=None, out_dir=str(out), manifest=None))
    m = json.loads((out / "metrics.json").read_text())
    assert set(m) == {"panel"} and set(m["panel"]) == {"base", "ppo", "ppo_vs_base", "mde", "gate"}
    assert m["panel"]["base"]["n"] == 3 and m["panel"]["base"]["resolved"] == 0
    assert m["panel"]["base"]["success_rate"] == 0.0 and m["panel"]["base"]["ci_low"] == 0.0
    c = m["panel"]["ppo_vs_base"]
    assert (c["wins"], c["ties"], c["losses"], c["mcnemar_p"], c["significant"]) == (0, 3, 0, 1.0, False)
    base_in = sum(r["input_tokens"] for r in evaluated["base"]) / 3
    ppo_in = sum(r["input_tokens"] for r in evaluated["ppo"]) / 3
    assert m["panel"]["ppo"]["input_tokens_ratio"] == pytest.approx(ppo_in / base_in)
    assert m["panel"]["base"]["input_tokens_ratio"] == 1.0
    md = (out / "tables.md").read_text()
    assert "**Verdict:** ppo vs base: no significant difference (p=1.00; 0 wins, 3 ties, 0 losses)." in md
    assert "| base | 0/3 | 0.0 |" in md and "Per task" not in md  # one seed per task: the rows are the tasks
    assert "**Detectable effect:** 3 pairs, 80% power, alpha 0.05: no gain is detectable" in md
    assert md.startswith("# Paired evaluation\n\n**Decision: stop.** stop: ppo is not significantly better than base")
    # the classes from the real episode records: each episode ended one way, as its record says
    episodes = {p: [json.loads(x) for x in (d / f"{p}.episodes.jsonl").read_text().splitlines()] for p in ("base", "ppo")}
    for policy in ("base", "ppo"):
        expected = {c: 0 for c in at.OUTCOME_CLASSES}
        for e in episodes[policy]:
            expected[at.outcome_class(e)] += 1
        assert m["panel"][policy]["outcomes"] == expected and sum(expected.values()) == 3
    csv_lines = (out / "tables.csv").read_text().splitlines()
    assert csv_lines[0].startswith("panel,policy,base,n,resolved") and len(csv_lines) == 3
    full = json.loads((out / "tables.json").read_text())
    assert full["panel"]["verdict"].startswith("ppo vs base: no significant difference")
    man = json.loads((out / "manifest.json").read_text())
    assert man["stage"] == "evaluation.tables" and len(man["outputs"]) == 4


def test_tables_refuse_unpaired_results_and_name_the_file(world, evaluated):
    d = evaluated["dir"]
    rows = [json.loads(line) for line in (d / "ppo.jsonl").read_text().splitlines()]
    short = world["tmp"] / "ppo_missing_task.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    args = argparse.Namespace(results=[str(d / "base.jsonl"), str(short)], base=None,
                              episodes=[], out_dir=str(world["tmp"] / "bad"), manifest=None)
    with pytest.raises(tb.PairingError, match=r"ppo_missing_task\.jsonl.*not evaluated on the same tasks and seeds"):
        tb.run(cfg(world), args)
    reseeded = world["tmp"] / "ppo_other_seed.jsonl"
    reseeded.write_text("".join(json.dumps({**r, "seed": r["seed"] + 1}) + "\n" for r in rows))
    with pytest.raises(tb.PairingError, match="ppo_other_seed"):
        tb.run(cfg(world), argparse.Namespace(results=[str(d / "base.jsonl"), str(reseeded)], base=None,
                                              episodes=[], out_dir=str(world["tmp"] / "bad"), manifest=None))
    other_cfg = world["tmp"] / "ppo_other_config.jsonl"
    other_cfg.write_text("".join(json.dumps({**r, "config_digest": "0" * 16}) + "\n" for r in rows))
    with pytest.raises(tb.PairingError, match="different agent configs"):
        tb.run(cfg(world), argparse.Namespace(results=[str(d / "base.jsonl"), str(other_cfg)], base=None,
                                              episodes=[], out_dir=str(world["tmp"] / "bad"), manifest=None))
    with pytest.raises(tb.PairingError, match="no results of the base policy 'sft'"):
        tb.run(cfg(world), argparse.Namespace(results=[str(d / "base.jsonl")], base="sft",
                                              episodes=[], out_dir=str(world["tmp"] / "bad"), manifest=None))
    assert not (world["tmp"] / "bad").exists()  # nothing written on an error


# -- the table logic on hand-made results ---------------------------------------------------

def rows_for(policy, panel, outcomes, steps=3, tokens=1000):
    return [{"policy": policy, "panel": panel, "instance_id": f"t{i:03d}", "seed": 7, "resolved": bool(r),
             "outcome": "resolved" if r else "failed", "steps": steps, "input_tokens": tokens, "output_tokens": 10, "wall_s": 2.0, "config_digest": "c"}
            for i, r in enumerate(outcomes)]


def test_panel_table_known_counts():
    # the original experiment's test panel: 3 wins / 32 ties / 3 losses (5 ties solved by both)
    base = [0] * 3 + [1] * 3 + [1] * 5 + [0] * 27
    ppo = [1] * 3 + [0] * 3 + [1] * 5 + [0] * 27
    # the second panel: 2 / 23 / 2, and a third where the adapter wins 10 / 0
    files = {"a.jsonl": rows_for("base", "test", base) + rows_for("base", "panel", [0, 0, 1, 1] + [0] * 23)
             + rows_for("base", "wide", [0] * 10 + [1] * 5),
             "b.jsonl": rows_for("ppo", "test", ppo, steps=6, tokens=850)
             + rows_for("ppo", "panel", [1, 1, 0, 0] + [0] * 23) + rows_for("ppo", "wide", [1] * 15)}
    grouped, sources = tb.group_results(files)
    tables = tb.paired_tables(grouped, "base", sources)
    t = tables["test"]
    assert t["policies"]["base"]["resolved"] == 8 and t["policies"]["ppo"]["resolved"] == 8
    assert t["policies"]["ppo"]["steps_ratio"] == 2.0 and t["policies"]["ppo"]["input_tokens_ratio"] == 0.85
    c = t["comparisons"]["ppo_vs_base"]
    assert (c["wins"], c["ties"], c["losses"], c["mcnemar_p"]) == (3, 32, 3, 1.0)
    assert t["verdict"] == "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)"
    c = tables["panel"]["comparisons"]["ppo_vs_base"]
    assert (c["wins"], c["ties"], c["losses"], c["mcnemar_p"]) == (2, 23, 2, 1.0)
    c = tables["wide"]["comparisons"]["ppo_vs_base"]
    assert (c["wins"], c["losses"], c["mcnemar_p"], c["significant"]) == (10, 0, pytest.approx(0.001953125), True)
    assert tables["wide"]["verdict"] == "ppo vs base: ppo better, p=0.002 (10 wins, 5 ties, 0 losses)"
    m = tb.metrics(tables)
    assert m["wide"]["ppo_vs_base"]["mcnemar_p"] == pytest.approx(0.001953125)
    assert all(not isinstance(v, str) for panel in m.values() for d in panel.values() for v in d.values())
    with pytest.raises(tb.PairingError, match="twice"):
        tb.group_results({"a.jsonl": rows_for("base", "x", [1]) * 2})


def test_panel_with_several_seeds_is_judged_on_its_tasks_and_over_tasks():
    # 3 tasks x 8 seeds: the adapter resolves every pair, the base none. On these tasks, 24
    # discordant pairs (McNemar p ~ 1e-7) are significant; as a sample of tasks, 3 tasks carry at
    # most 2/2**3 = 0.25: no significant difference.
    def rows(policy, resolved):
        return [{**r, "seed": s, "instance_id": f"t{i}"} for i in range(3) for s in range(8)
                for r in rows_for(policy, "train", [resolved])]
    grouped, sources = tb.group_results({"a.jsonl": rows("base", 0), "b.jsonl": rows("ppo", 1)})
    t = tb.paired_tables(grouped, "base", sources)["train"]
    c = t["comparisons"]["ppo_vs_base"]
    assert (c["wins"], c["losses"], c["task_up"], c["task_p"]) == (24, 0, 3, 0.25)
    assert c["mcnemar_p"] < 1e-6 and c["significant"] is True and c["task_significant"] is False
    assert t["verdict"].startswith("ppo vs base on these 3 tasks (McNemar over 24 pairs): ppo better, p<0.001")
    assert t["verdict"].endswith("over tasks as a sample (task-level sign flip): no significant difference "
                                 "(p=0.25; 3 up, 0 same, 0 down)")
    md = tb.markdown({"train": t})
    assert "| ppo vs base | 24 / 0 / 0 | 1.2e-07 | 1.2e-07 | 3 / 0 / 0 | 0.2500 | 0.2500 |" in md
    # where the wins come from: every task, 8 of 8 seeds
    assert [(r["instance_id"], r["seeds"], r["base"], r["ppo"]) for r in t["per_task"]] == \
        [("t0", 8, 0, 8), ("t1", 8, 0, 8), ("t2", 8, 0, 8)]
    assert "Per task (resolved of 8 seeds):" in md and "| t1 | 0/8 | 8/8 |" in md
    assert tb.metrics({"train": t})["train"]["ppo_vs_base"]["task_p"] == 0.25
