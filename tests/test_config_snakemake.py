"""Config errors at Snakemake's parse time: one message naming the file and line, no stack frames.

Each test is one `snakemake -n` over a copy of the workflow (about 2 s each): the Snakefile's
own checks (forgeline.workflow.dag.checked_yaml / checked_config), as a user meets them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tiny_project as tp
from forgeline.workflow import dag


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return tp.make_project(tmp_path_factory.mktemp("parse"))


def dry_run(project: Path, *overlays: Path) -> tuple[int, str]:
    args = ["snakemake", "-n", "--cores", "1"]
    for overlay in overlays:
        args += ["--configfile", str(overlay)]
    proc = tp.run(project, *args, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_out_of_range_value_is_one_line_without_stack_frames(project, tmp_path):
    overlay = tmp_path / "neg.yaml"
    overlay.write_text("train:\n  critic:\n    epochs: -2\n")
    rc, out = dry_run(project, overlay)
    assert rc != 0
    assert f"{overlay}:3: train.critic.epochs: -2 is less than the minimum of 1" in out, out
    assert "Traceback" not in out and 'File "' not in out and "ConfigError in" not in out, out


def test_yaml_error_in_params_names_file_and_line(project):
    params = project / "params.yaml"
    good = params.read_text()
    try:
        params.write_text(good.replace("seed:", "seed: [1\nx:", 1))
        rc, out = dry_run(project)
    finally:
        params.write_text(good)
    assert rc != 0
    line = next(i for i, text in enumerate(good.splitlines(), 1) if text.startswith("seed:"))
    assert f"forgeline: params.yaml:{line + 1}: not valid YAML" in out, out
    assert 'File "' not in out, out


def test_missing_required_key_names_the_file(project):
    params = project / "params.yaml"
    good = params.read_text()
    try:
        params.write_text("".join(line for line in good.splitlines(keepends=True)
                                  if not line.startswith("seed:")))
        rc, out = dry_run(project)
    finally:
        params.write_text(good)
    assert rc != 0
    assert "params.yaml: <top level>: 'seed' is a required property" in out, out
    assert "config: " not in out, out


def test_missing_extra_source_fails_at_parse_time_naming_it(project, tmp_path):
    (project / "data" / "extra.jsonl").write_text("")
    overlay = tmp_path / "extra.yaml"
    overlay.write_text("tasks:\n  ingest:\n    extra_sources:\n    - data/extra.jsonl\n"
                       "    - data/nope.jsonl\n")
    rc, out = dry_run(project, overlay)
    assert rc != 0
    assert f"{overlay}:5: data/nope.jsonl: no such file" in out, out
    assert "fix the path, or remove it from the list" in out and "data/extra.jsonl" not in out, out
    # the same check without Snakemake (an overlay's YAML error is Snakemake's to report first)
    proc = tp.run(project, "forgeline", "check-config", "--config", "params.yaml", "--config",
                  str(overlay), check=False)
    assert proc.returncode != 0 and f"{overlay}:5: data/nope.jsonl" in proc.stderr, proc.stderr


def test_checked_config_refuses_a_missing_extra_source(tmp_path, monkeypatch):
    """The parse-time check itself: on a finished tree Snakemake never plans ingest_extra, so
    nothing else would notice the missing file."""
    from forgeline import config
    monkeypatch.chdir(tmp_path)
    overlay = tmp_path / "extra.yaml"
    overlay.write_text("tasks:\n  ingest:\n    extra_sources: [gone.jsonl]\n")
    cfg = config.load([tp.ROOT / "params.yaml", overlay])
    with pytest.raises(SystemExit) as err:
        dag.checked_config(cfg.data, cfg.files)
    assert f"{overlay}:3: gone.jsonl: no such file (relative to {tmp_path})" in str(err.value)
    (tmp_path / "gone.jsonl").write_text("")
    dag.checked_config(cfg.data, cfg.files)  # present: fine
