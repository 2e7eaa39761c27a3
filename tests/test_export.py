"""export-dataset: the split as SWE-smith JSONL and a hub dataset folder that `datasets` loads,
with a card the hub parses, and one experiment digest over the split and its environments."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from forgeline import cli
from forgeline.provenance import sha256_file
from forgeline.publish.card import card_files
from forgeline.sandbox.grading import command_digest
from forgeline.tasks import export as ex
from forgeline.tasks.split import repo_disjoint_split, split_summary

ROOT = Path(__file__).resolve().parents[1]
PATCH = "diff --git a/{r}/m.py b/{r}/m.py\n--- a/{r}/m.py\n+++ b/{r}/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def task(repo: str, n: int, **over) -> dict:
    rec = {"instance_id": f"forgeline__{repo}.0a1b2c3d.op_swap__{n:08x}", "repo": repo,
           "patch": PATCH.format(r=repo), "FAIL_TO_PASS": [f"tests/test_{repo}.py::test_{n}"],
           "PASS_TO_PASS": [f"tests/test_{repo}.py::test_ok"], "problem_statement": f"{repo} bug {n}",
           "image_name": f"forgeline/{repo}:0a1b2c3d", "base_commit": "0a1b2c3d" + "0" * 32,
           "created_at": "2026-01-01T00:00:00", "bug_type": "op_swap",
           "mutation": f"line {n}", "validation": {"checks": ["nop", "oracle"], "gold_runs": 2}}
    rec.update(over)
    return rec


TASKS = [task(r, n) for r in ("alpha", "beta", "gamma", "delta") for n in range(1, 3 + len(r) % 3)]


def image(repo: str, image_id: str = "sha256:" + "1" * 64) -> dict:
    return {"repo": repo, "commit": "0a1b2c3d" + "0" * 32, "tag": f"forgeline/{repo}:0a1b2c3d",
            "image_id": image_id, "base_image": "forgeline/base:bookworm-00000000",
            "build_input_digest": "2" * 64}


def write_split(root: Path, tasks: list[dict] = TASKS) -> Path:
    split = repo_disjoint_split(tasks, {"train": 0.5, "val": 0.25, "test": 0.25}, seed=3)
    out = root / "split"
    out.mkdir(parents=True)
    for name, rows in split.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "split.json").write_text(json.dumps(split_summary(split, {"train": 0.5, "val": 0.25, "test": 0.25}, 3)))
    return out


def write_params(root: Path, backend: str = "docker") -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["sandbox"]["backend"] = backend
    data["tasks"]["export"] = {"license": "mit", "pretty_name": "tiny forgeline split",
                               "task_categories": ["text-generation"], "tags": ["swe-smith", "tiny"]}
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_export(root: Path, split_dir: Path, images: list[Path], out: Path, backend: str = "docker",
               funnel: Path | None = None) -> int:
    argv = ["export-dataset", "--config", str(write_params(root, backend)), "--split-dir", str(split_dir),
            "--images", *map(str, images), "--out-dir", str(out), "--manifest", str(out / "manifest.json")]
    return cli.main(argv + (["--funnel", str(funnel)] if funnel else []))


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    split_dir = write_split(tmp_path)
    images = []
    for repo in ("alpha", "beta", "gamma", "delta"):
        (tmp_path / "images").mkdir(exist_ok=True)
        images.append(tmp_path / "images" / f"{repo}.json")
        images[-1].write_text(json.dumps(image(repo)))
    funnel = tmp_path / "funnel.json"
    funnel.write_text(json.dumps({"totals": {"candidates": 50, "ingested": 40, "validated": 20, "pool": 15,
                                             "split": {}},
                                  "repos": {"alpha": {"candidates": 12, "ingested": 10, "ingest_rejected": 2,
                                                      "validated": 5, "validate_rejected": {"flaky": 2, "nop_passes": 1},
                                                      "role": "pool"}},
                                  "ingest_rejected_by_category": {"unsafe_id": 2, "wrong_type": 3},
                                  "validate_rejected_by_check": {"flaky": 4, "nop_passes": 1},
                                  "extra_sources": {"records": 9, "accepted": 7, "rejected": 2,
                                                    "rejected_by_category": {}, "unattributed": 1}}))
    out = tmp_path / "results" / "dataset"
    assert run_export(tmp_path, split_dir, images, out, funnel=funnel) == 0
    return out


def test_export_loads_with_datasets_and_its_card_parses(exported: Path, tmp_path: Path, monkeypatch):
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    split = {n: [json.loads(x) for x in (tmp_path / "split" / f"{n}.jsonl").read_text().splitlines()]
             for n in ("train", "val", "test")}
    ds = load_dataset(str(exported / "hf"), cache_dir=str(tmp_path / "cache"))
    assert sorted(ds) == ["test", "train", "val"]
    for name, rows in split.items():
        jsonl = [json.loads(x) for x in (exported / "swe-smith" / f"{name}.jsonl").read_text().splitlines()]
        assert jsonl == [{f: r.get(f) for f in ex.SWE_SMITH_FIELDS} for r in rows]  # upstream fields only
        loaded = ds[name].to_list()
        assert [{k: v for k, v in r.items() if k != "forgeline"} for r in loaded] == jsonl
        assert [json.loads(r["forgeline"]) for r in loaded] == \
            [{k: v for k, v in r.items() if k not in ex.SWE_SMITH_FIELDS} for r in rows]

    card = DatasetCard.load(exported / "hf" / "README.md")
    assert card.data.license == "mit" and card.data.pretty_name == "tiny forgeline split"
    assert card.data.tags == ["swe-smith", "tiny"] and card.data.task_categories == ["text-generation"]
    assert [c["split"] for c in card.data.configs[0]["data_files"]] == ["train", "val", "test"]
    info = json.loads((exported / "hf" / "experiment.json").read_text())
    summary = json.loads((tmp_path / "split" / "split.json").read_text())
    assert info["split"]["digest"] == summary["digest"]
    assert info["environment"]["grading_command"] == command_digest()
    for text in (info["experiment_digest"], info["split"]["digest"], info["environment"]["digest"],
                 "| train | ", "Rejected at ingest", "| unsafe_id | 2 |", "| flaky | 4 |", "load_dataset",
                 "Generated 50 candidates -> ingested 40 -> validated 20 -> in the pool repositories 15",
                 "| alpha | pool | 12 | 10 | 2 | 5 | 3 |"):
        assert text in card.text or text in card.content, text
    # every file of the folder, the card aside, with its bytes and sha256 (what `forgeline publish` checks)
    assert card_files(card.content) == {
        p.relative_to(exported / "hf").as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in (exported / "hf").rglob("*") if p.is_file() and p.name != "README.md"}
    assert card_files(card.content)[ex.data_file("train")]["sha256"] == info["files"][ex.data_file("train")]
    for name, repos in summary["repos"].items():
        assert f"| {name} | {summary['counts'][name]} | {', '.join(repos)} |" in card.text
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["stage"] == "export-dataset"
    assert manifest["notes"]["experiment_digest"] == info["experiment_digest"]
    # same inputs + params => byte-identical outputs (Parquet included)
    before = {p.relative_to(exported): p.read_bytes() for p in exported.rglob("*")
              if p.is_file() and p.name != "manifest.json"}
    images = sorted((tmp_path / "images").glob("*.json"))
    assert run_export(tmp_path, tmp_path / "split", images, exported, funnel=tmp_path / "funnel.json") == 0
    assert before == {p.relative_to(exported): p.read_bytes() for p in exported.rglob("*")
                      if p.is_file() and p.name != "manifest.json"}


def _digest(tasks: list[dict], images: dict[str, dict], grading: str = "g" * 64) -> str:
    split = repo_disjoint_split(tasks, {"train": 0.5, "val": 0.25, "test": 0.25}, seed=3)
    envs = ex.environments(split, images, "docker")
    return ex.export_info(split, envs, "docker", grading)["experiment_digest"]


def test_experiment_digest_covers_tasks_images_and_grading_only():
    images = {r: image(r) for r in ("alpha", "beta", "gamma", "delta")}
    base = _digest(TASKS, images)
    assert base == _digest(list(reversed(TASKS)), images)
    rebuilt = {**images, "beta": image("beta", image_id="sha256:" + "9" * 64)}
    assert _digest(TASKS, rebuilt) != base  # a rebuilt / drifted image
    drifted = {**images, "beta": {**image("beta"), "build_input_digest": "3" * 64}}
    assert _digest(TASKS, drifted) != base
    changed = [dict(t, problem_statement="other") if i == 0 else t for i, t in enumerate(TASKS)]
    assert _digest(changed, images) != base  # a task changed
    assert _digest(TASKS, images, grading="h" * 64) != base  # another grading command
    cosmetic = [dict(t, bug_type="x", mutation="y", validation={}, created_at="2030") for t in TASKS]
    assert _digest(cosmetic, images) == base  # fields outside DEFINING_FIELDS
    unused = {**images, "zeta": image("zeta", image_id="sha256:" + "8" * 64)}
    assert _digest(TASKS, unused) == base  # an image of no task of the split
    with pytest.raises(ex.ConfigError, match="no image record for beta"):
        _digest(TASKS, {r: v for r, v in images.items() if r != "beta"})


def test_process_backend_exports_without_images(tmp_path: Path):
    out = tmp_path / "dataset"
    assert run_export(tmp_path, write_split(tmp_path), [], out, backend="process") == 0
    info = json.loads((out / "hf" / "experiment.json").read_text())
    assert info["environment"]["backend"] == "process"
    assert set(info["environment"]["images"].values()) == {None}
    assert "graded on the host" in (out / "hf" / "README.md").read_text()


def test_hostile_id_in_a_split_file_is_refused_and_nothing_is_written(tmp_path: Path, capsys):
    split_dir = write_split(tmp_path)
    train = split_dir / "train.jsonl"
    train.write_text(train.read_text() + json.dumps(task("alpha", 99, instance_id="../x")) + "\n")
    out = tmp_path / "work" / "dataset"
    write_params(tmp_path, "process")
    before = sorted(p for p in tmp_path.rglob("*"))
    assert run_export(tmp_path, split_dir, [], out, backend="process") == 2
    err = capsys.readouterr().err
    assert f"{train}:{len(train.read_text().splitlines())}:" in err and "instance_id '../x'" in err, err
    after = sorted(p for p in tmp_path.rglob("*"))
    assert after == before  # nothing written, inside or outside OUT
    # a split name that is not a plain name never becomes a file name either
    summary = json.loads((split_dir / "split.json").read_text())
    summary["counts"] = {"../../evil": 1}
    (split_dir / "split.json").write_text(json.dumps(summary))
    assert run_export(tmp_path, split_dir, [], out, backend="process") == 2
    assert "not plain lowercase names" in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not (tmp_path.parent / "evil.jsonl").exists()
