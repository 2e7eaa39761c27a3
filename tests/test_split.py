"""The repository-disjoint split, its frozen semantic digest, and the frozen-split check."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import yaml

from forgeline import cli
from forgeline.config import Config
from forgeline.tasks import split as sp

ROOT = Path(__file__).resolve().parents[1]
FRACTIONS = {"train": 0.7, "val": 0.15, "test": 0.15}


def inst(repo: str, k: int, **over) -> dict:
    iid = f"{repo}.0000000{k % 10}.op_swap__{k:08x}"
    rec = {"instance_id": iid, "repo": repo, "patch": f"--- a\n+++ b\n@@ {k} @@\n",
           "FAIL_TO_PASS": [f"tests/test_{repo}.py::test_{k}"],
           "PASS_TO_PASS": [f"tests/test_{repo}.py::test_ok_{k}"],
           "problem_statement": f"{repo} bug {k}", "image_name": f"forgeline/{repo}:0",
           "base_commit": "a" * 40, "bug_type": "op_swap"}
    rec.update(over)
    return rec


def pool(sizes: dict[str, int]) -> list[dict]:
    return [inst(repo, k) for repo, n in sizes.items() for k in range(n)]


def ids(split: dict[str, list[dict]]) -> dict[str, list[str]]:
    return {name: [i["instance_id"] for i in rows] for name, rows in split.items()}


SIZES = {f"repo{r:02d}": 1 + (r * 7) % 13 for r in range(40)}


def test_every_repo_in_exactly_one_split_and_all_tasks_kept():
    tasks = pool(SIZES)
    split = sp.repo_disjoint_split(tasks, FRACTIONS, seed=7)
    assert set(split) == {"train", "val", "test"}
    repo_sets = [{i["repo"] for i in rows} for rows in split.values()]
    assert all(a.isdisjoint(b) for k, a in enumerate(repo_sets) for b in repo_sets[k + 1:])
    assert set().union(*repo_sets) == set(SIZES)
    assert sorted(i for rows in ids(split).values() for i in rows) == \
        sorted(t["instance_id"] for t in tasks)
    assert all(rows == sorted(rows) for rows in ids(split).values())


def test_deterministic_and_independent_of_input_order():
    tasks = pool(SIZES)
    first = ids(sp.repo_disjoint_split(tasks, FRACTIONS, seed=7))
    shuffled = tasks[:]
    random.Random(0).shuffle(shuffled)
    assert ids(sp.repo_disjoint_split(shuffled, FRACTIONS, seed=7)) == first
    assert ids(sp.repo_disjoint_split(list(reversed(tasks)), FRACTIONS, seed=7)) == first
    # the seed matters
    others = [ids(sp.repo_disjoint_split(tasks, FRACTIONS, seed=s)) for s in range(1, 6)]
    assert any(o != first for o in others)


@pytest.mark.parametrize("seed", [0, 7, 1234])
def test_task_shares_close_to_fractions(seed):
    tasks = pool(SIZES)
    split = sp.repo_disjoint_split(tasks, FRACTIONS, seed=seed)
    for name, frac in FRACTIONS.items():
        assert abs(len(split[name]) / len(tasks) - frac) < 0.02, (name, len(split[name]))


def test_each_positive_split_gets_a_repo_and_too_few_repos_fail():
    for seed in range(4):
        split = sp.repo_disjoint_split(pool({"a": 50, "b": 1, "c": 1}), FRACTIONS, seed=seed)
        assert all(len({i["repo"] for i in rows}) == 1 for rows in split.values())
        assert {i["repo"] for i in split["train"]} == {"a"}  # the big repo where most tasks go
    with pytest.raises(ValueError, match="cannot split 2 repositories into 3"):
        sp.repo_disjoint_split(pool({"a": 5, "b": 5}), FRACTIONS, seed=3)
    # a zero fraction is an empty split, so two repositories suffice
    two = sp.repo_disjoint_split(pool({"a": 5, "b": 5}), {"train": 0.5, "val": 0.5, "test": 0.0}, 3)
    assert two["test"] == [] and two["train"] and two["val"]


def test_bad_fractions_and_duplicates_are_clear_errors():
    with pytest.raises(ValueError, match="sum to 0.9"):
        sp.repo_disjoint_split(pool(SIZES), {"train": 0.7, "val": 0.1, "test": 0.1}, 1)
    with pytest.raises(ValueError, match="duplicate instance_id"):
        sp.repo_disjoint_split(pool(SIZES) + [inst("repo00", 0)], FRACTIONS, 1)


def test_digest_matches_the_documented_serialization():
    split = sp.repo_disjoint_split(pool(SIZES), FRACTIONS, seed=7)
    fields = ("instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS",
              "problem_statement", "image_name")

    def cj(obj):
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    lines = sorted(
        (name, i["instance_id"],
         hashlib.sha256(cj({f: i.get(f) for f in fields}).encode()).hexdigest())
        for name, rows in split.items() for i in rows)
    by_hand = hashlib.sha256("".join(cj(list(r)) + "\n" for r in lines).encode()).hexdigest()
    assert sp.frozen_split_digest(split) == by_hand
    summary = sp.split_summary(split, FRACTIONS, 7)
    assert summary["digest"] == by_hand == sp.digest_of_split_json(summary)


def test_digest_independent_of_key_order_whitespace_file_order(tmp_path: Path):
    tasks = pool(SIZES)
    digest = sp.frozen_split_digest(sp.repo_disjoint_split(tasks, FRACTIONS, 7))
    # files: compact vs indented-with-reversed-keys, split in two files given in either order
    half = len(tasks) // 2
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(t) + "\n" for t in tasks[:half]))
    b.write_text("\n".join(json.dumps(dict(reversed(list(t.items()))), separators=(" , ", " : "))
                           for t in reversed(tasks[half:])) + "\n\n")
    for order in ([a, b], [b, a]):
        loaded = sp.load_instances(order)
        assert sp.frozen_split_digest(sp.repo_disjoint_split(loaded, FRACTIONS, 7)) == digest
    # JSON-encoded test lists and fields outside the defining ones do not count either
    variant = [dict(t, FAIL_TO_PASS=json.dumps(t["FAIL_TO_PASS"]), bug_type="other", note=1)
               for t in tasks]
    assert sp.frozen_split_digest(sp.repo_disjoint_split(variant, FRACTIONS, 7)) == digest


def test_digest_changes_with_one_patch_or_one_move():
    tasks = pool(SIZES)
    split = sp.repo_disjoint_split(tasks, FRACTIONS, 7)
    digest = sp.frozen_split_digest(split)
    changed = {n: [dict(i) for i in rows] for n, rows in split.items()}
    changed["val"][0]["patch"] += "+one more line\n"
    assert sp.frozen_split_digest(changed) != digest
    moved = {n: list(rows) for n, rows in split.items()}
    moved["test"].append(moved["train"].pop())
    assert sp.frozen_split_digest(moved) != digest


def test_split_moves_and_mismatch_message_name_the_tasks():
    tasks = pool(SIZES)
    old_split = sp.repo_disjoint_split(tasks, FRACTIONS, 7)
    old = sp.split_summary(old_split, FRACTIONS, 7)
    new_split = {n: [dict(i) for i in rows] for n, rows in old_split.items()}
    gone = new_split["train"].pop(0)
    new_split["val"][0]["problem_statement"] = "reworded"
    edited = new_split["val"][0]["instance_id"]
    hopper = new_split["test"].pop(0)
    new_split["train"].append(hopper)
    fresh = inst("newrepo", 1)
    new_split["test"].append(fresh)
    new = sp.split_summary(new_split, FRACTIONS, 7)
    moves = sp.split_moves(old, new)
    assert moves == {
        "added": [{"instance_id": fresh["instance_id"], "split": "test"}],
        "removed": [{"instance_id": gone["instance_id"], "split": "train"}],
        "changed_split": [{"instance_id": hopper["instance_id"], "from": "test", "to": "train"}],
        "changed_content": [{"instance_id": edited, "split": "val"}],
    }
    msg = sp.frozen_mismatch_message(new, old["digest"], old, "frozen/split.json")
    for iid in (fresh["instance_id"], gone["instance_id"], hopper["instance_id"], edited):
        assert iid in msg
    assert "test -> train" in msg and old["digest"] in msg and new["digest"] in msg
    assert f"frozen_digest: {new['digest']}" in msg
    bare = sp.frozen_mismatch_message(new, old["digest"])
    assert old["digest"] in bare and new["digest"] in bare and "frozen_manifest" in bare


# -- the stage -----------------------------------------------------------------------------

def _params(tmp_path: Path, **split) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["tasks"]["split"].update(split)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _write_tasks(tmp_path: Path, tasks: list[dict]) -> list[str]:
    a, b = tmp_path / "A.jsonl", tmp_path / "B.jsonl"
    a.write_text("".join(json.dumps(t) + "\n" for t in tasks[::2]))
    b.write_text("".join(json.dumps(t) + "\n" for t in tasks[1::2]))
    return [str(a), str(b)]


def _argv(params: Path, files: list[str], out: Path) -> list[str]:
    return ["split", "--config", str(params), "--tasks", *files, "--out-dir", str(out),
            "--manifest", str(out / "manifest.json")]


def test_cli_end_to_end_and_frozen_digest(tmp_path: Path, capsys):
    tasks = pool(SIZES)
    files = _write_tasks(tmp_path, tasks)
    out = tmp_path / "split"
    assert cli.main(_argv(_params(tmp_path, seed=7), files, out)) == 0
    summary = json.loads((out / "split.json").read_text())
    expected = sp.repo_disjoint_split(tasks, FRACTIONS, 7)
    assert summary["digest"] == sp.frozen_split_digest(expected)
    for name in FRACTIONS:
        rows = [json.loads(x) for x in (out / f"{name}.jsonl").read_text().splitlines()]
        assert [r["instance_id"] for r in rows] == [i["instance_id"] for i in expected[name]]
        assert summary["counts"][name] == len(rows)
        assert [iid for iid, _ in summary["instances"][name]] == [r["instance_id"] for r in rows]
    assert summary["seed"] == 7 and summary["fractions"] == dict(sorted(FRACTIONS.items()))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seeds"] == {"split": 7} and manifest["notes"]["digest"] == summary["digest"]
    assert "digest " + summary["digest"] in capsys.readouterr().err

    # pinned and unchanged: passes
    pinned = _params(tmp_path, seed=7, frozen_digest=summary["digest"])
    assert cli.main(_argv(pinned, files, tmp_path / "again")) == 0
    assert (tmp_path / "again" / "split.json").read_bytes() == (out / "split.json").read_bytes()

    # pinned and one patch changed: fails, names both digests and the fix, writes nothing
    tasks[5]["patch"] += "+changed\n"
    files = _write_tasks(tmp_path, tasks)
    capsys.readouterr()
    assert cli.main(_argv(pinned, files, tmp_path / "moved")) == 2
    err = capsys.readouterr().err
    assert summary["digest"] in err and "tasks.split.frozen_digest" in err and "Fix:" in err
    assert not (tmp_path / "moved").exists()


def test_frozen_manifest_names_moved_tasks(tmp_path: Path):
    """tasks.split.frozen_manifest (a copy of the frozen split.json) lets the failure say what
    moved. Runs split.run with a Config built here, as the schema does not know the key yet."""
    tasks = pool(SIZES)
    out = tmp_path / "split"
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    base["tasks"]["split"]["seed"] = 7

    def run(split_section: dict, files: list[str], out_dir: Path) -> None:
        data = json.loads(json.dumps(base))
        data["tasks"]["split"].update(split_section)
        args = cli.build_parser("split").parse_args(_argv(tmp_path / "unused.yaml", files, out_dir))
        sp.run(Config(data), args)

    run({}, _write_tasks(tmp_path, tasks), out)
    frozen = tmp_path / "frozen-split.json"
    frozen.write_bytes((out / "split.json").read_bytes())
    digest = json.loads(frozen.read_text())["digest"]
    tasks[3]["patch"] += "+changed\n"
    with pytest.raises(sp.FrozenSplitError) as exc:
        run({"frozen_digest": digest, "frozen_manifest": str(frozen)},
            _write_tasks(tmp_path, tasks), tmp_path / "moved")
    msg = str(exc.value)
    assert tasks[3]["instance_id"] in msg and "changed content (1)" in msg and str(frozen) in msg
