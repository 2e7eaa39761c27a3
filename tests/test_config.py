"""The one config: merging overlays, schema errors that name file, line and fix."""
from pathlib import Path

import pytest
import yaml

from forgeline import config

ROOT = Path(__file__).resolve().parents[1]


def test_default_params_are_valid():
    cfg = config.load([ROOT / "params.yaml"])
    assert cfg.section("tasks.split")["fractions"]["train"] == pytest.approx(0.7)


def test_overlay_wins_key_by_key(tmp_path):
    overlay = tmp_path / "over.yaml"
    overlay.write_text("tasks:\n  split:\n    seed: 99\n")
    cfg = config.load([ROOT / "params.yaml", overlay])
    assert cfg.section("tasks.split")["seed"] == 99
    # keys the overlay does not set keep their params.yaml values
    assert cfg.section("tasks.split")["fractions"]["val"] == pytest.approx(0.15)


def test_unknown_key_names_file_line_and_suggestion(tmp_path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text("seed: 1\ntasks:\n  split:\n    sed: 3\n")
    with pytest.raises(config.ConfigError) as err:
        config.load([ROOT / "params.yaml", overlay])
    msg = str(err.value)
    assert f"{overlay}:4" in msg
    assert "unknown key 'sed'" in msg and "did you mean 'seed'" in msg


def test_wrong_type_names_the_key(tmp_path):
    overlay = tmp_path / "bad.yaml"
    overlay.write_text("sandbox:\n  backend: podman\n")
    with pytest.raises(config.ConfigError) as err:
        config.load([ROOT / "params.yaml", overlay])
    assert f"{overlay}:2" in str(err.value) and "sandbox.backend" in str(err.value)


def test_broken_yaml_and_missing_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("tasks: [\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load([broken])
    with pytest.raises(config.ConfigError, match="not found"):
        config.load([tmp_path / "nope.yaml"])


def test_flatten_lists_leaf_keys():
    assert config.flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}, "x") == ["x.a.b", "x.a.c", "x.d"]


def test_every_schema_section_is_documented_in_params():
    """params.yaml sets every top-level section the schema knows (it is the documentation)."""
    schema = yaml.safe_load((ROOT / "src/forgeline/config.schema.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert set(schema["properties"]) == set(params)


def test_real_scale_overlay_is_valid_and_changes_only_what_it_names():
    base = config.load([ROOT / "params.yaml"])
    real = config.load([ROOT / "params.yaml", ROOT / "configs/klear-8b.yaml"])
    assert real.section("agent")["context_limit"] == 65536
    assert real.section("sandbox.docker")["memory_mb"] == 8192
    assert real.section("tasks.generate") == base.section("tasks.generate")
