"""`forgeline verify` on a handmade tree of three stages (no Snakemake, no DVC run): a stage
deleted whole, a stage half there, an edited manifest, a partial pull, and that a failed check
touches nothing. tests/test_versioning.py does the same through real `dvc pull`s."""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from forgeline.provenance import Manifest, atomic_dir
from forgeline.workflow import verify
from forgeline.workflow.verify import check, check_tree, dag_outputs, dvc_dir_md5, lock_records

DVC_YAML = {"stages": {
    # a directory output that keeps its manifest inside (like sft, critic, ppo)
    "train": {"cmd": "train", "deps": ["data.txt"], "outs": ["results/model"]},
    # files + manifest, built from the model (like evaluate)
    "score": {"cmd": "score", "deps": ["results/model"],
              "outs": ["results/score.manifest.json"], "metrics": ["results/score.json"]},
    # a leaf nothing reads (like harbor)
    "export": {"cmd": "export", "deps": ["data.txt"],
               "outs": ["results/export/a.txt", "results/export/manifest.json"]},
}}


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def tree(tmp_path, monkeypatch) -> Path:
    """The three stages built, with dvc.yaml, a dvc.lock and DVC's cache listing of the model."""
    monkeypatch.chdir(tmp_path)
    Path("data.txt").write_text("data\n")
    model = Path("results/model")
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"\x00\x01\x02")
    (model / "config.json").write_text("{}\n")
    Manifest(stage="train", inputs=["data.txt"]).write(model / "manifest.json",
                                                       outputs=[model / "weights.bin", model / "config.json"])
    Path("results/score.json").write_text('{"score": 1}\n')
    Manifest(stage="score", inputs=["results/model"]).write("results/score.manifest.json",
                                                            outputs=["results/score.json"])
    Path("results/export").mkdir()
    Path("results/export/a.txt").write_text("a\n")
    Manifest(stage="export", inputs=["data.txt"]).write("results/export/manifest.json",
                                                        outputs=["results/export/a.txt"])
    (model / ".snakemake_timestamp").touch()  # Snakemake's marker: no part of the artifact
    Path("dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    listing = {p.relative_to(model).as_posix(): _md5(p) for p in model.iterdir()
               if p.name != ".snakemake_timestamp"}
    dir_md5 = dvc_dir_md5(listing)
    cache = Path(".dvc/cache/files/md5") / dir_md5[:2] / dir_md5[2:]
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps([{"md5": m, "relpath": r} for r, m in sorted(listing.items())]))
    lock = {"schema": "2.0", "stages": {name: {"cmd": st["cmd"], "outs": [
        {"path": o, "hash": "md5", "md5": dir_md5 if o == "results/model" else _md5(Path(o))}
        for o in st.get("outs", []) + st.get("metrics", [])]} for name, st in DVC_YAML["stages"].items()}}
    Path("dvc.lock").write_text(yaml.safe_dump(lock))
    return tmp_path


def findings(root: Path, partial: bool = False):
    stages = dag_outputs(root / "dvc.yaml")
    return check_tree(root, Path("results"), stages=stages,
                      locked=lock_records(root / "dvc.lock", stages), partial=partial)


def test_a_complete_tree_verifies(tree):
    found = findings(tree)
    assert (found.problems, len(found.manifests), found.verified, found.not_pulled) == ([], 3, 4, [])


def test_a_deleted_directory_stage_is_named(tree):
    shutil.rmtree(tree / "results/model")
    # the manifests alone cannot see it: the model's manifest went with it (the old blind spot)
    assert check(tree, Path("results"))[0] == [
        verify.Problem("results/model", "missing: an input of artifacts that are present",
                       ("results/score.manifest.json",))]
    for partial in (False, True):
        problems = findings(tree, partial).problems
        assert [p.path for p in problems] == ["results/model"], problems


def test_a_leaf_stage_deleted_whole_fails_unless_partial(tree):
    shutil.rmtree(tree / "results/export")
    problems = findings(tree).problems
    assert [p.path for p in problems] == ["results/export/a.txt", "results/export/manifest.json"]
    assert "stage export is not in the tree" in problems[0].what and "--partial" in problems[0].what
    found = findings(tree, partial=True)
    assert (found.problems, found.not_pulled) == ([], ["export"])


def test_a_stage_half_there_is_incomplete_even_when_partial(tree):
    (tree / "results/export/manifest.json").unlink()
    problems = findings(tree, partial=True).problems
    assert [(p.path, p.what.split(":")[0]) for p in problems] == [
        ("results/export/a.txt", "not listed in any manifest (its manifest is missing?)"),
        ("results/export/manifest.json", "missing")], problems


def _edit(manifest: Path) -> None:
    record = json.loads(manifest.read_text())
    record["params"] = {"lr": 1.0}  # its outputs still match: the manifests cannot tell
    manifest.write_text(json.dumps(record))


def test_an_edited_manifest_is_named_without_dvc_lock(tree):
    """Each stage indexed its manifest's sha256 outside results/ when it wrote it."""
    _edit(tree / "results/score.manifest.json")
    _edit(tree / "results/model/manifest.json")
    problems = {p.path: p.what for p in check(tree, Path("results"))[0]}
    for manifest in ("results/model/manifest.json", "results/score.manifest.json"):
        assert problems[manifest].startswith("manifest edited since its stage wrote it"), problems
        assert "rerun the stage" in problems[manifest]
    # a directory output's manifest is indexed under its final name, after atomic_dir's swap
    with atomic_dir(tree / "results/other") as tmp:
        Manifest(stage="other").write(tmp / "manifest.json", outputs=[])
    assert (tree / ".forgeline/manifests/results/other/manifest.json.sha256").is_file()
    assert not [p for p in (tree / ".forgeline/manifests/results").iterdir() if p.name.endswith(".tmp")]


def test_an_edited_manifest_is_named_through_dvc_lock(tree):
    shutil.rmtree(tree / ".forgeline/manifests")  # a pulled tree: no index, dvc.lock tells
    _edit(tree / "results/score.manifest.json")
    assert check(tree, Path("results"))[0] == []
    problems = findings(tree).problems
    assert [(p.path, p.manifests) for p in problems] == [("results/score.manifest.json",
                                                          ("dvc.lock",))], problems
    assert problems[0].what.startswith("md5 differs (dvc.lock ")
    # inside a directory output: named by file from DVC's cache listing of the directory
    _edit(tree / "results/model/manifest.json")
    problems = {p.path: p.what for p in findings(tree).problems}
    assert problems["results/model/manifest.json"] == (
        "md5 differs (dvc.lock's results/model) (dvc.lock; edited since the run, or rebuilt "
        "without `dvc commit`?)")
    # without that listing, the directory itself is named
    shutil.rmtree(tree / ".dvc")
    assert "results/model" in {p.path for p in findings(tree).problems}


def test_a_failed_check_touches_nothing_and_a_passing_one_touches(tree, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(verify, "touch_command", lambda *a: calls.append(a[2]) or ["true"])
    cfg = argparse.Namespace(files=[Path("params.yaml")])
    args = argparse.Namespace(root=tree, results=Path("results"), no_inputs=False, no_touch=False,
                              partial=False, snakefile=Path("Snakefile"))
    shutil.rmtree(tree / "results/model")
    with pytest.raises(SystemExit, match="results/model"):
        verify.run(cfg, args)
    assert calls == []
    assert "MISMATCH results/model: missing" in capsys.readouterr().out
    shutil.copytree(tree / "results/export", tree / "export")
    shutil.rmtree(tree / "results")  # a partial pull of the export stage only
    shutil.copytree(tree / "export", tree / "results/export")
    with pytest.raises(SystemExit):
        verify.run(cfg, args)  # not --partial: train and score are missing
    assert calls == []
    args.partial = True
    verify.run(cfg, args)
    assert calls == [["results/export/manifest.json"]]


# -- leftovers of killed writes ------------------------------------------------------------------

def _killed_write(tree: Path, target: str) -> Path:
    """A process that dies (SIGKILL) inside `atomic_path(target)`: its temp stays beside it."""
    import subprocess
    import sys
    code = (f"from forgeline import provenance as p\nwith p.atomic_path({target!r}) as t:\n"
            "    t.write_text('half')\n    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", code], cwd=tree).returncode == -9
    [temp] = [p for p in Path(tree, target).parent.iterdir() if p.name.startswith(f".{Path(target).name}~")]
    return temp


def test_a_killed_writes_temp_is_named_with_the_command_that_clears_it(tree, capsys):
    temp = _killed_write(tree, "results/export/a.txt")
    (tree / "results/.old.json.x1y2.tmp").mkdir()  # an unowned temp (before owner tags)
    problems = {p.path: p for p in findings(tree).problems}
    rel = temp.relative_to(tree).as_posix()
    assert set(problems) == {rel, "results/.old.json.x1y2.tmp"}
    assert problems[rel].kind == "LEFTOVER" and "has exited" in problems[rel].what
    assert "forgeline verify --sweep" in problems[rel].what
    assert "rm -rf 'results/.old.json.x1y2.tmp'" in problems["results/.old.json.x1y2.tmp"].what
    cfg = argparse.Namespace(files=[Path("params.yaml")])
    args = argparse.Namespace(root=tree, results=Path("results"), no_inputs=False, no_touch=True,
                              partial=False, snakefile=Path("Snakefile"), sweep=False)
    with pytest.raises(SystemExit, match="2 leftover temp"):
        verify.run(cfg, args)
    assert f"LEFTOVER {rel}: temp of a write killed" in capsys.readouterr().out
    assert temp.exists()  # a plain verify removes nothing
    args.sweep = True
    with pytest.raises(SystemExit, match="1 leftover temp"):  # the unowned one is not its to remove
        verify.run(cfg, args)
    assert not temp.exists() and (tree / "results/.old.json.x1y2.tmp").exists()
    (tree / "results/.old.json.x1y2.tmp").rmdir()
    verify.run(cfg, args)


def test_a_running_or_foreign_writers_temp_is_never_swept(tree):
    from forgeline.provenance import owner_tag
    mine = tree / f"results/export/.a.txt{owner_tag()}abc.tmp"
    foreign = tree / "results/export/.a.txt~node17.cluster~4242~99~abc.tmp"
    for temp in (mine, foreign):
        temp.write_text("in progress")
    assert verify.sweep(tree / "results") == []
    problems = {Path(p.path).name: p.what for p in findings(tree).problems}
    assert "is running" in problems[mine.name]
    assert "node17.cluster:4242, on another machine" in problems[foreign.name]
    assert mine.exists() and foreign.exists()
