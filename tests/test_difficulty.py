"""The difficulty filter: pass@k, the band, the per-repository cap, the report, and the stage end
to end (a tiny random Qwen3 through HFEngine on two tiny repositories, process sandbox)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from forgeline import config
from forgeline.agent import difficulty as df

from embedded import PARAMS
from tiny_models import direct_python, tiny_lm, tiny_tokenizer

__all__ = ["direct_python"]  # a fixture from tiny_models: pytest finds it by this name

ROOT = Path(__file__).resolve().parents[1]


def test_pass_at_k_known_values():
    assert df.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert df.pass_at_k(4, 2, 4) == 1.0
    assert df.pass_at_k(4, 0, 1) == 0.0 and df.pass_at_k(4, 0, 4) == 0.0
    assert df.pass_at_k(4, 4, 1) == 1.0
    assert df.pass_at_k(4, 1, 2) == pytest.approx(0.5)       # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert df.pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    for bad in ((4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)):
        with pytest.raises(ValueError):
            df.pass_at_k(*bad)


def test_band_is_inclusive_and_exact():
    band = [0.25, 0.75]
    assert [df.in_band(4, c, band) for c in range(5)] == [False, True, True, True, False]
    assert [df.in_band(3, c, band) for c in range(4)] == [False, True, True, False]
    assert df.in_band(4, 0, [0.0, 0.0]) and not df.in_band(0, 0, band)
    # the config refuses a band upside down, seeds that are not k, unknown keys (at load time)
    with pytest.raises(config.ConfigError, match=r"band: \[0.8, 0.2\]: expected lo <= hi"):
        config.merged(PARAMS.tasks.difficulty, {"band": [0.8, 0.2]})
    with pytest.raises(config.ConfigError, match="seeds: 3 seeds for k=2"):
        config.merged(PARAMS.tasks.difficulty, {"k": 2, "seeds": [1, 2, 3]})
    with pytest.raises(config.ConfigError, match="unknown key 'bogus'"):
        config.merged(PARAMS.tasks.difficulty, {"bogus": 1})
    # a screen needs seeds left after it, and a band that leaves out the tasks it stops
    with pytest.raises(config.ConfigError, match="screen: 4: expected fewer episodes than k=4"):
        config.merged(PARAMS.tasks.difficulty, {"k": 4, "screen": 4})
    with pytest.raises(config.ConfigError, match="screen: 2: the screen drops unsolved tasks"):
        config.merged(PARAMS.tasks.difficulty, {"k": 4, "screen": 2, "band": [0.0, 0.5]})
    assert config.merged(PARAMS.tasks.difficulty, {"k": 1, "screen": 0, "band": [0.0, 1.0]}).screen == 0


def test_cap_per_repo_is_deterministic_and_stable():
    tasks = [{"instance_id": f"{r}.{i}", "repo": r} for r in ("a", "b") for i in range(6)]
    got = df.cap_per_repo(tasks, 2, seed=1)
    assert len(got) == 4 and sum(t["repo"] == "a" for t in got) == 2
    assert got == df.cap_per_repo(list(reversed(tasks)), 2, seed=1)
    assert got == sorted(got, key=lambda t: t["instance_id"])
    # adding other tasks never changes which of the old ones are chosen (hash ranks)
    more = tasks + [{"instance_id": "c.0", "repo": "c"}]
    assert [t for t in df.cap_per_repo(more, 2, seed=1) if t["repo"] != "c"] == got
    assert len(df.cap_per_repo(tasks, 0, seed=1)) == 12


def _ep(iid, repo, outcome, well=(True,)):
    status = {"resolved": "submitted", "failed": "submitted", "invalid": "invalid_calls",
              "step_limit": "step_limit"}[outcome]
    return {"instance_id": iid, "repo": repo, "outcome": outcome, "exit_status": status,
            "stats": {"steps": len(well)}, "timing": {"wall_s": 2.0, "generate_s": 1.5},
            "turns": [{"labels": {"well_formed_call": w, "command_ran": w, "no_error": None,
                                  "tests_improved": None}} for w in well]}


def test_report_histogram_band_and_rates():
    eps = ([_ep("a.1", "a", "resolved")] + [_ep("a.1", "a", "failed")] * 3            # c=1: kept
           + [_ep("a.2", "a", "resolved")] * 4                                        # c=4: too easy
           + [_ep("b.1", "b", "invalid", (False, False, False))] * 2
           + [_ep("b.1", "b", "step_limit", (True, False))] * 2)                      # c=0: too hard
    rep = df.report(eps, 4, [0.25, 0.75], PARAMS.agent.reward, {"s.1": "stale"})
    assert rep["kept"] == ["a.1"] and rep["dropped"] == ["a.2", "b.1"]
    assert rep["c_histogram"] == {"0": 1, "1": 1, "2": 0, "3": 0, "4": 1}
    assert rep["repos"]["a"] == {"evaluated": 2, "kept": 1, "resolved_episodes": 5, "episodes": 8}
    assert rep["tasks"]["a.1"]["pass@1"] == pytest.approx(0.25) and rep["tasks"]["a.1"]["pass@4"] == 1.0
    assert rep["tasks"]["b.1"]["pass@4"] == 0.0
    assert rep["episodes"]["outcomes"]["invalid"] == 2 and rep["exit_status"]["step_limit"] == 2
    assert rep["turns"] == 8 + 6 + 4 and rep["well_formed_call_rate"] == pytest.approx((8 + 2) / 18)
    assert rep["skipped"] == {"s.1": "stale"} and rep["mean_episode_wall_s"] == 2.0
    assert rep["screened_out"] == [] and rep["mean_pass@4"] == pytest.approx((1 + 1 + 0) / 3)


def test_report_keeps_the_tasks_the_screen_stopped_out_of_the_histogram():
    # c.1 got only the screen's 2 episodes (none solved): out of the band, no pass@4, not a "0 of 4"
    eps = ([_ep("a.1", "a", "resolved")] + [_ep("a.1", "a", "failed")] * 3
           + [_ep("c.1", "c", "failed")] * 2)
    rep = df.report(eps, 4, [0.25, 0.75], PARAMS.agent.reward)
    assert rep["screened_out"] == ["c.1"] and rep["kept"] == ["a.1"] and rep["dropped"] == ["c.1"]
    assert rep["c_histogram"] == {"0": 0, "1": 1, "2": 0, "3": 0, "4": 0}
    assert rep["tasks"]["c.1"]["pass@4"] is None and rep["tasks"]["c.1"]["pass@1"] == 0.0
    assert rep["mean_pass@4"] == 1.0 and rep["mean_pass@1"] == pytest.approx((0.25 + 0) / 2)
    # merged with another repository's report: pass@4 weighted by the histogram's tasks only
    from forgeline.evaluation.report import merge_difficulty
    other = df.report([_ep("b.1", "b", "failed")] * 4, 4, [0.25, 0.75], PARAMS.agent.reward)
    merged = merge_difficulty([rep, other])
    assert merged["screened_out"] == ["c.1"] and merged["c_histogram"]["0"] == 1
    assert merged["mean_pass@4"] == pytest.approx(0.5) and merged["mean_pass@1"] == pytest.approx(0.125 * 2 / 3)


# -- the stage, end to end ------------------------------------------------------------------

def test_stage_end_to_end_with_a_tiny_random_policy(tmp_path):
    import torch
    from forgeline.tasks.generate import make_patch
    from forgeline.tasks.repos import RepoSnapshot

    from tiny_project import TINY_REPOS, write_repo

    torch.set_num_threads(1)
    root = tmp_path / "repos"
    for name in ("alpha", "beta"):
        write_repo(root, name, *TINY_REPOS[name])
    commit = {n: RepoSnapshot.load(root, n).commit for n in ("alpha", "beta")}

    def task(name, iid, old, new, f2p, base=None):
        src = TINY_REPOS[name][0]
        return {"instance_id": iid, "repo": name, "base_commit": base or commit[name],
                "patch": make_patch(f"{name}/__init__.py", src, src.replace(old, new)),
                "FAIL_TO_PASS": f2p, "PASS_TO_PASS": [], "problem_statement": f"`{name}` is broken.",
                "image_name": "x"}

    tasks = [task("alpha", "alpha.1", "return a + b", "return a - b", ["tests/test_alpha.py::test_add"]),
             task("beta", "beta.1", "if x > t:", "if x >= t:", ["tests/test_beta.py::test_count_above_edge"]),
             task("beta", "beta.stale", "if x > t:", "if x >= t:", ["tests/test_beta.py::test_count_above_edge"],
                  base="0" * 40)]
    tasks_file = tmp_path / "validated.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    tok = tiny_tokenizer([root / "alpha", root / "beta"], vocab_size=300)
    policy = tmp_path / "policy"
    tok.save_pretrained(policy)
    tiny_lm(tok, seed=3, layers=1, heads=2, kv_heads=1, max_position_embeddings=4096).save_pretrained(policy)

    def cfg(band):
        return config.merged(PARAMS, {
            "seed": 5, "repos": {"root": str(root), "pool": ["alpha", "beta"], "sft": [], "panel": []},
            "sandbox": {"backend": "process", "test_timeout_s": 60},
            "agent": {"max_steps": 2, "max_new_tokens": 8, "rollout": {"concurrency": 4, "seeding": "episode"}},
            "tasks": {"difficulty": {"k": 2, "screen": 0, "band": band, "max_tasks_per_repo": 0, "threads": 1}}})

    def run(band, out, partial=None):
        args = argparse.Namespace(tasks=[str(tasks_file)], policy=str(policy), out=str(out),
                                  report=str(out.with_suffix(".report.json")), episodes=None, partial=partial,
                                  manifest=None)
        df.run(cfg(band), args)
        return json.loads(out.with_suffix(".report.json").read_text())

    rep = run([0.25, 0.75], tmp_path / "a" / "pool.jsonl")
    assert rep["skipped"] == {"beta.stale": "stale: base_commit 000000000000 != snapshot " + commit["beta"][:12]}
    assert sorted(rep["tasks"]) == ["alpha.1", "beta.1"] and rep["episodes"]["episodes"] == 4
    assert rep["c_histogram"] == {"0": 2, "1": 0, "2": 0}  # a random model solves nothing
    assert rep["kept"] == [] and (tmp_path / "a" / "pool.jsonl").read_text() == ""
    assert not (tmp_path / "a" / "pool.jsonl.partial").exists()
    man = json.loads((tmp_path / "a" / "pool.manifest.json").read_text())
    assert man["notes"]["kept"] == 0 and len(man["seeds"]["episodes"]) == 2
    assert man["notes"]["mean_episode_wall_s"] > 0 and "mean_episode_wall_s" not in rep
    # a band that includes c = 0 keeps both. Resuming from a record that holds every episode
    # (here: the first run's) runs nothing and gives the same episodes, byte for byte
    partial = tmp_path / "b" / "resume.partial"
    partial.parent.mkdir()
    partial.write_bytes((tmp_path / "a" / "pool.episodes.jsonl").read_bytes())
    rep2 = run([0.0, 0.5], tmp_path / "b" / "pool.jsonl", str(partial))
    assert json.loads((tmp_path / "b" / "pool.manifest.json").read_text())["timings"]["rollout"] < 5
    assert rep2["kept"] == ["alpha.1", "beta.1"]
    kept = [json.loads(line)["instance_id"] for line in (tmp_path / "b" / "pool.jsonl").read_text().splitlines()]
    assert kept == ["alpha.1", "beta.1"]
    assert (tmp_path / "a" / "pool.episodes.jsonl").read_bytes() == (tmp_path / "b" / "pool.episodes.jsonl").read_bytes()
    # a task of a repository outside the pool is refused
    bad = config.merged(cfg([0.25, 0.75]), {"repos": {"pool": ["alpha"]}})
    with pytest.raises(ValueError, match="non-pool"):
        df.run(bad, argparse.Namespace(tasks=[str(tasks_file)], policy=str(policy), out=str(tmp_path / "c.jsonl"),
                                       report=str(tmp_path / "c.json"), episodes=None, partial=None, manifest=None))


def test_the_screen_gives_the_rest_of_the_seeds_only_to_the_tasks_it_saw_solved(tmp_path):
    """k = 3, screen = 1, the tiny random policy on two tasks: `alpha.bug` (a real bug it never
    fixes) and `alpha.free` (its "bug" only rewords a docstring, so any diff that leaves the code
    alone passes: resolved, with credit_unsubmitted). Only alpha.free gets seeds 2 and 3."""
    import torch
    from forgeline.tasks.generate import make_patch
    from forgeline.tasks.repos import RepoSnapshot

    from tiny_project import TINY_REPOS, write_repo

    torch.set_num_threads(1)
    root = tmp_path / "repos"
    write_repo(root, "alpha", *TINY_REPOS["alpha"])
    src = TINY_REPOS["alpha"][0]
    commit = RepoSnapshot.load(root, "alpha").commit

    def task(iid, old, new):
        return {"instance_id": iid, "repo": "alpha", "base_commit": commit,
                "patch": make_patch("alpha/__init__.py", src, src.replace(old, new)),
                "FAIL_TO_PASS": ["tests/test_alpha.py::test_add"], "PASS_TO_PASS": [],
                "problem_statement": "`add` is broken.", "image_name": "x"}

    tasks_file = tmp_path / "validated.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in (
        task("alpha.bug", "return a + b", "return a - b"), task("alpha.free", '"""Sum."""', '"""Add."""'))))
    tok = tiny_tokenizer([root / "alpha"], vocab_size=300)
    policy = tmp_path / "policy"
    tok.save_pretrained(policy)
    tiny_lm(tok, seed=3, layers=1, heads=2, kv_heads=1, max_position_embeddings=4096).save_pretrained(policy)
    cfg = config.merged(PARAMS, {
        "seed": 5, "repos": {"root": str(root), "pool": ["alpha"], "sft": [], "panel": []},
        "sandbox": {"backend": "process", "test_timeout_s": 60},
        "agent": {"max_steps": 1, "max_new_tokens": 4, "credit_unsubmitted": True,
                  "rollout": {"concurrency": 2, "seeding": "episode"}},
        "tasks": {"difficulty": {"k": 3, "screen": 1, "band": [0.25, 0.75], "max_tasks_per_repo": 0,
                                 "threads": 1}}})
    out = tmp_path / "pool.jsonl"
    df.run(cfg, argparse.Namespace(tasks=[str(tasks_file)], policy=str(policy), out=str(out),
                                   report=str(tmp_path / "report.json"), episodes=None, partial=None, manifest=None))
    rep = json.loads((tmp_path / "report.json").read_text())
    episodes = [json.loads(line) for line in (tmp_path / "pool.episodes.jsonl").read_text().splitlines()]
    seeds = json.loads((tmp_path / "pool.manifest.json").read_text())["seeds"]["episodes"]
    by_task = {i: sorted(e["seed"] for e in episodes if e["instance_id"] == i) for i in ("alpha.bug", "alpha.free")}
    assert by_task == {"alpha.bug": [seeds[0]], "alpha.free": sorted(seeds)}
    assert [e["outcome"] for e in episodes if e["instance_id"] == "alpha.free"] == ["resolved"] * 3
    assert rep["screened_out"] == ["alpha.bug"] and rep["c_histogram"] == {"0": 0, "1": 0, "2": 0, "3": 1}
    assert rep["kept"] == [] and rep["tasks"]["alpha.free"]["pass@3"] == 1.0  # 3 of 3: too easy
