"""A stage's code is what it can run: edits nobody runs change no digest, edits it runs do."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forgeline import codedeps
from forgeline.cli import STAGES

PACKAGE = Path(codedeps.__file__).resolve().parent


@pytest.fixture
def package(tmp_path) -> Path:
    """A copy of the real package, to edit."""
    root = tmp_path / "forgeline"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def digests(root: Path, stages=None) -> dict[str, str]:
    index = codedeps.Index(root)
    out = {}
    for stage in stages or [m for m, _ in STAGES.values()]:
        h = codedeps.stage_code(stage, root=root, index=index)["digest"]
        out[stage] = h
    return out


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def changed(before: dict, after: dict) -> set[str]:
    return {s for s in before if before[s] != after[s]}


def test_comments_docstrings_and_layout_change_no_stage(package):
    before = digests(package)
    ppo = package / "train/ppo.py"
    text = ppo.read_text()
    # a docstring of every definition that has one, a comment, a blank line, a re-wrapped call
    text = text.replace('"""', '"""Edited. ', 1)  # the module docstring
    text = text.replace("\ndef ", "\n# a comment\n\n\ndef ")
    ppo.write_text(text)
    edit(package / "config.py", '    """Overlay wins; mappings merge', '    """Overlay wins (edited); mappings merge')
    assert changed(before, digests(package)) == set()


def test_a_function_edit_changes_exactly_the_stages_that_reach_it(package):
    before = digests(package)
    # the McNemar test: only the tables (and what reads them) compute it
    edit(package / "evaluation/stats.py", "def mcnemar_exact_p(", "def mcnemar_exact_p(*_unused, ")
    after = digests(package)
    reach = {s for s in before if "forgeline.evaluation.stats:mcnemar_exact_p"
             in codedeps.stage_code(s, root=package)["units"]}
    assert changed(before, after) == reach
    assert "forgeline.evaluation.tables" in reach and "forgeline.tasks.split" not in reach


def test_an_edit_of_code_every_stage_runs_changes_every_stage(package):
    before = digests(package)
    edit(package / "config.py", "def deep_merge(base: dict, overlay: dict) -> dict:",
         "def deep_merge(base: dict, overlay: dict) -> dict:\n    base = dict(base)")
    assert changed(before, digests(package)) == set(before)


def test_methods_count_when_their_name_is_used(package):
    index = codedeps.Index(package)
    units = set(codedeps.stage_code("forgeline.train.critic", root=package, index=index)["units"])
    # dunder methods of reached classes always count; a reached framework subclass counts whole
    assert any(u.endswith(".__init__") for u in units)
    split = set(codedeps.stage_code("forgeline.tasks.split", root=package, index=index)["units"])
    assert not any(u.startswith("forgeline.train.") for u in split)
    assert not any(u.startswith("forgeline.sandbox.images:") for u in split | units)


def test_a_data_file_counts_when_the_code_names_it(package):
    before = digests(package)
    template = package / "tasks/harbor_files/test.sh.in"  # harbor.py names its folder
    template.write_text(template.read_text() + "\n# x\n")
    assert changed(before, digests(package)) == {"forgeline.tasks.harbor"}
    (package / "unrelated.txt").write_text("nobody reads me\n")
    assert changed(before, digests(package)) == {"forgeline.tasks.harbor"}


def test_normalization_ignores_positions_and_empty_fields():
    import ast
    a = ast.parse("def f(x):\n    '''doc'''\n    return x + 1\n")
    b = ast.parse("def f(x):   return (x\n   + 1)  # c\n")
    assert codedeps.normalized(a) == codedeps.normalized(b)
    assert codedeps.normalized(a) != codedeps.normalized(ast.parse("def f(x):\n    return x + 2\n"))


def test_stamp_is_written_only_when_the_code_changes(package, tmp_path, monkeypatch):
    monkeypatch.setattr(codedeps, "PACKAGE_ROOT", package)
    codedeps._index.cache_clear()
    stamps = tmp_path / "stamps"
    stage = "forgeline.tasks.split"
    path = codedeps.write_stamp(stage, stamps, root=package)
    # first write: old, so outputs already there (a pulled tag) are not made stale by it
    assert path.stat().st_mtime == codedeps.OLD
    os.utime(path, (1_000_000_000, 1_000_000_000))
    codedeps._index.cache_clear()
    edit(package / "tasks/split.py", '"""', '"""Edited. ')
    codedeps.write_stamp(stage, stamps, root=package)
    assert path.stat().st_mtime == 1_000_000_000  # a docstring: untouched
    codedeps._index.cache_clear()
    edit(package / "tasks/split.py", "def run(cfg, args: argparse.Namespace", "def run(cfg, args: argparse.Namespace, _unused=None")
    codedeps.write_stamp(stage, stamps, root=package)
    assert path.stat().st_mtime > 1_000_000_000
    codedeps._index.cache_clear()


def test_a_parse_with_no_code_changed_reads_the_stamps_from_the_cache(package, tmp_path, monkeypatch):
    """The Snakefile asks for every stage's stamp at each parse: for the same package bytes the
    cache answers, with exactly what the walk gives; any byte changed is a new key."""
    cache = tmp_path / "code-cache.json"
    stage = "forgeline.tasks.split"
    monkeypatch.setattr(codedeps, "_CACHED", {})
    first = codedeps.cached_stage_code(stage, cache=cache)
    assert first == codedeps.stage_code(stage)
    assert json.loads(cache.read_text())["stamps"][stage] == first
    walked = []
    monkeypatch.setattr(codedeps, "stage_code", lambda *a, **k: walked.append(a) or {})
    monkeypatch.setattr(codedeps, "_CACHED", {})  # a new process: from the file
    assert codedeps.cached_stage_code(stage, cache=cache) == first and not walked
    key = codedeps.tree_key(package)
    assert key == codedeps.tree_key(PACKAGE)  # the same bytes
    edit(package / "tasks/split.py", '"""', '"""Edited. ')
    assert codedeps.tree_key(package) != key


def test_a_manifest_reads_the_digest_from_the_cache_and_never_writes_it(tmp_path, monkeypatch):
    """Every job's manifest names its code digest: where the Snakefile's parse left the stamp it
    is read; elsewhere (a job in another folder) it is walked, and nothing is written there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(codedeps, "_CACHED", {})
    stage = "forgeline.tasks.split"
    walked = codedeps.stage_code(stage)["digest"]
    assert codedeps.stage_digest(stage) == walked
    assert not (tmp_path / codedeps.CODE_CACHE).exists()
    codedeps.cached_stage_code(stage)  # the parse
    monkeypatch.setattr(codedeps, "_CACHED", {})  # a job: a new process
    monkeypatch.setattr(codedeps, "stage_code", lambda *a, **k: pytest.fail("walked"))
    assert codedeps.stage_digest(stage) == walked


def test_unknown_stage_is_named():
    with pytest.raises(ValueError, match="forgeline.nope"):
        codedeps.stage_code("forgeline.nope")


def test_a_template_folder_is_data_of_the_stage_that_reads_it(package):
    """harbor_files/ holds grade.py, a program the export copies into each task folder: its
    bytes are the output, so a comment there reruns the export, and only it."""
    before = digests(package)
    grade = package / "tasks/harbor_files/grade.py"
    grade.write_text(grade.read_text() + "\n# a comment in a template\n")
    assert changed(before, digests(package)) == {"forgeline.tasks.harbor"}


def test_a_config_field_doc_is_not_code(package):
    """params.py documents each field with a string under it: help text, not code."""
    before = digests(package)
    params = package / "params.py"
    text = params.read_text()
    assert '    """PPO steps"""' in text
    params.write_text(text.replace('    """PPO steps"""', '    """PPO steps (optimizer updates of the actor)"""', 1))
    assert changed(before, digests(package)) == set()


def test_a_decorated_definition_counts_only_where_it_is_used(package):
    """@contextlib.contextmanager wraps a function on import; its body runs only when used."""
    index = codedeps.Index(package)
    units = lambda stage: set(codedeps.stage_code(stage, root=package, index=index)["units"])
    assert "forgeline.provenance:gc_paused" in units("forgeline.tasks.split")
    assert "forgeline.provenance:gc_paused" not in units("forgeline.evaluation.tables")
