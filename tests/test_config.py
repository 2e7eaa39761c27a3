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


# -- bounds: every numeric and enum key of the schema refuses an out-of-range value -----------

def _schema_leaves(node: dict, path: tuple, defs: dict):
    """(key path, schema) of every leaf of the schema; array items get index 0, free-form
    mappings (evaluation.k_per_panel) a probe key."""
    if "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    if "properties" in node:
        for key, sub in node["properties"].items():
            yield from _schema_leaves(sub, path + (key,), defs)
        return
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _schema_leaves(extra, path + ("probe",), defs)
        return
    if isinstance(node.get("items"), dict):
        yield from _schema_leaves(node["items"], path + (0,), defs)
        return
    yield path, node


def _numeric(node: dict) -> bool:
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    return "enum" not in node and bool({"integer", "number"} & set(types))


def _out_of_range(node: dict) -> list:
    """Values just outside each bound of a numeric or enum schema node."""
    if "enum" in node:
        return [3 if all(isinstance(v, int) for v in node["enum"]) else "not-a-choice"]
    step = 1 if node.get("type") == "integer" or "integer" in node.get("type", []) else 0.5
    bad = []
    if "minimum" in node:
        bad.append(node["minimum"] - step)
    if "exclusiveMinimum" in node:
        bad.append(node["exclusiveMinimum"])
    if "maximum" in node:
        bad.append(node["maximum"] + step)
    if "exclusiveMaximum" in node:
        bad.append(node["exclusiveMaximum"])
    return bad


def _overlay_for(path: tuple, value, params: dict) -> dict:
    """The smallest overlay that sets `path` to `value` (a list element: the default list with
    that element replaced)."""
    if isinstance(path[-1], int):
        node = params
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        items = list(node) if isinstance(node, list) and node else [None]
        items[0] = value
        path, value = path[:-1], items
    out: dict = {}
    cur = out
    for part in path[:-1]:
        cur = cur.setdefault(part, {})
    cur[path[-1]] = value
    return out


def test_every_numeric_key_has_a_lower_bound_and_enums_are_closed():
    schema = config.load_schema()
    leaves = list(_schema_leaves(schema, (), schema["$defs"]))
    numeric = [p for p, n in leaves if _numeric(n)]
    assert len(numeric) > 100, len(numeric)
    unbounded = [".".join(map(str, p)) for p, n in leaves
                 if _numeric(n) and "minimum" not in n and "exclusiveMinimum" not in n]
    assert unbounded == [], f"numeric keys without a lower bound: {unbounded}"


def test_every_out_of_range_value_is_refused_with_file_line_and_key(tmp_path):
    schema = config.load_schema()
    params_file = ROOT / "params.yaml"
    params = yaml.safe_load(params_file.read_text())
    checked = 0
    for path, node in _schema_leaves(schema, (), schema["$defs"]):
        if not (_numeric(node) or "enum" in node):
            continue
        for value in _out_of_range(node):
            overlay = tmp_path / f"bad{checked}.yaml"
            overlay.write_text(yaml.safe_dump(_overlay_for(path, value, params)))
            data = config.deep_merge(params, yaml.safe_load(overlay.read_text()))
            with pytest.raises(config.ConfigError) as err:
                config.validate(data, [params_file, overlay], schema)
            line = config._key_lines(overlay, overlay.read_text())[path]
            dotted = ".".join(map(str, path))
            assert f"{overlay}:{line}: {dotted}:" in str(err.value), (dotted, value, str(err.value))
            checked += 1
    assert checked > 150, checked


def test_negative_epochs_and_steps_fail_at_parse_time(tmp_path):
    overlay = tmp_path / "neg.yaml"
    overlay.write_text("train:\n  critic:\n    epochs: -2\n  ppo:\n    steps: -5\n")
    with pytest.raises(config.ConfigError) as err:
        config.load([ROOT / "params.yaml", overlay])
    msg = str(err.value)
    assert f"{overlay}:3: train.critic.epochs: -2 is less than the minimum of 1" in msg, msg
    assert f"{overlay}:5: train.ppo.steps: -5 is less than the minimum of 1" in msg, msg
