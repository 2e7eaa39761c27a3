"""The one config: typed sections, one place per default, merging overlays, schema errors that
name file, line and fix."""
import ast
import dataclasses
import inspect
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from forgeline import config, params

ROOT = Path(__file__).resolve().parents[1]


def test_default_params_are_valid():
    cfg = config.load([ROOT / "params.yaml"])
    assert cfg.section("tasks.split")["fractions"]["train"] == pytest.approx(0.7)


def test_sections_are_typed_dataclasses_and_data_stays_as_written():
    cfg = config.load([ROOT / "params.yaml"])
    assert isinstance(cfg.train.ppo, params.PPOConfig) and cfg.train.ppo.lam == 1.0
    assert cfg.seed == 1234 and cfg.evaluation.policies["ppo"].base == "results/policy/sft"
    assert cfg.evaluation.policies["base"].base is None  # left out: a whole model
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.ppo.lam = 0.5  # type: ignore[misc]
    # values keep the type they were written with (10, not 10.0): digests of a section are
    # those of the mapping the files wrote
    assert cfg.agent.command_timeout_s == 5 and isinstance(cfg.agent.command_timeout_s, int)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert cfg.data == raw
    for name in (f.name for f in dataclasses.fields(params.ParamsConfig)):
        assert config.as_dict(getattr(cfg, name)) == raw[name], name
    with pytest.raises(AttributeError, match="no section 'trian'"):
        cfg.trian  # noqa: B018


def _fields(cls, raw, path=()):
    """(key path, field, set in params.yaml) of every field of the section dataclasses;
    free-form mappings (evaluation.policies: named entries, not knobs) are not entered."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        here = isinstance(raw, dict) and f.name in raw
        yield path + (f.name,), f, here
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _fields(hints[f.name], raw.get(f.name) if here else None, path + (f.name,))


def default_places(cls, raw: dict) -> tuple[list[str], list[str]]:
    """(keys set in `raw` AND defaulted in the dataclasses, keys in neither)."""
    twice, nowhere = [], []
    for path, f, in_params in _fields(cls, raw):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if in_params and has_default:
            twice.append(".".join(path))
        if not in_params and not has_default:
            nowhere.append(".".join(path))
    return twice, nowhere


def test_each_default_lives_in_one_place():
    """A key params.yaml sets has no default in forgeline.params (it is required there); a key
    params.yaml leaves out has its default there. So params.yaml is the only place a value of
    the embedded run is written, and a stage never meets a key nobody set."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    twice, nowhere = default_places(params.ParamsConfig, raw)
    assert twice == [], f"set in params.yaml AND defaulted in forgeline/params.py: {twice}"
    assert nowhere == [], f"neither set in params.yaml nor defaulted: {nowhere}"
    # the rule as it bites: a default beside a params.yaml value, a required key nobody sets

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Knobs:
        lam: float = params.spec(0.95, ge=0, le=1)
        steps: int = params.spec(ge=1)
        extra: int = params.spec(3, ge=0)

    assert default_places(Knobs, {"lam": 1.0}) == (["lam"], ["steps"])


def test_no_module_keeps_defaults_of_its_own():
    """No DEFAULTS dicts beside the config: a stage reads its typed section."""
    found = []
    for path in sorted((ROOT / "src" / "forgeline").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
                  for m in re.finditer(r"^[A-Z_]*DEFAULTS\s*[:=]", text, re.M)]
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(r"cfg\.data\.get\(", text)]
    assert found == []


def _attribute_docs(cls) -> dict[str, str]:
    """{field: the string literal right after it} in the class body (attribute docstrings)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[stmt.target.id] = nxt.value.value
    return docs


def test_every_field_says_what_it_is_in_one_line():
    classes = [c for c in vars(params).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    assert len(classes) > 30
    missing = []
    for cls in classes:
        assert cls.__doc__ and "\n\n" not in cls.__doc__.strip(), cls
        docs, hints = _attribute_docs(cls), typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                continue  # a section: its class says what it is
            doc = docs.get(f.name, "")
            if not doc.strip() or "\n" in doc.strip():
                missing.append(f"{cls.__name__}.{f.name}")
    assert missing == []


def test_closed_choices_match_the_code_that_acts_on_them():
    from forgeline.agent.rewards import LABELS, OUTCOMES
    from forgeline.agent.tools import AGENT_TOOLS
    from forgeline.tasks.mutations import KINDS
    assert typing.get_args(params.Mutation) == tuple(KINDS)
    assert set(typing.get_args(params.Tool)) == set(AGENT_TOOLS)
    assert typing.get_args(params.Outcome) == tuple(OUTCOMES)
    assert tuple(f.name for f in dataclasses.fields(params.ProcessWeightsConfig)) == tuple(LABELS)


def test_rules_between_keys_name_file_and_line(tmp_path):
    overlay = tmp_path / "band.yaml"
    overlay.write_text("tasks:\n  difficulty:\n    band: [0.8, 0.2]\n"
                       "serving:\n  engine: openai\n")
    with pytest.raises(config.ConfigError) as err:
        config.load([ROOT / "params.yaml", overlay])
    msg = str(err.value)
    assert f"{overlay}:3: tasks.difficulty.band: [0.8, 0.2]: expected lo <= hi" in msg, msg
    assert f"{overlay}:5: serving.engine: openai needs serving.base_url and serving.served_model" in msg, msg


def test_merged_changes_a_section_as_an_overlay_would():
    ppo = config.load([ROOT / "params.yaml"]).train.ppo
    changed = config.merged(ppo, {"lam": 0.9, "lora": {"r": 4}})
    assert (changed.lam, changed.lora.r, changed.lora.alpha) == (0.9, 4, ppo.lora.alpha)
    assert ppo.lam == 1.0  # the original is untouched
    with pytest.raises(config.ConfigError, match="lora: unknown key 'dropuot' .did you mean 'dropout'"):
        config.merged(ppo, {"lora": {"dropuot": 0.1}})
    with pytest.raises(config.ConfigError, match="steps: -1 is less than the minimum of 1"):
        config.merged(ppo, {"steps": -1})


def test_config_get_prints_a_value_of_the_merged_config(tmp_path):
    overlay = tmp_path / "process.yaml"
    overlay.write_text("sandbox:\n  backend: process\n")
    run = lambda *files: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "forgeline.cli", "config-get", "sandbox.backend",
         *[a for f in files for a in ("--config", str(f))]], cwd=ROOT, capture_output=True, text=True)
    assert run(ROOT / "params.yaml").stdout.strip() == "docker"
    assert run(ROOT / "params.yaml", overlay).stdout.strip() == "process"
    proc = subprocess.run([sys.executable, "-m", "forgeline.cli", "config-get", "repos.pool"], cwd=ROOT,
                          capture_output=True, text=True)
    assert json.loads(proc.stdout) == yaml.safe_load((ROOT / "params.yaml").read_text())["repos"]["pool"]
    bad = subprocess.run([sys.executable, "-m", "forgeline.cli", "config-get", "sandbox.nope"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "sandbox.nope: no such key" in bad.stderr


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
    schema = config.json_schema()
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert set(schema["properties"]) == set(raw) == set(schema["required"])


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
    schema = config.json_schema()
    leaves = list(_schema_leaves(schema, (), schema.get("$defs", {})))
    numeric = [p for p, n in leaves if _numeric(n)]
    assert len(numeric) > 100, len(numeric)
    unbounded = [".".join(map(str, p)) for p, n in leaves
                 if _numeric(n) and "minimum" not in n and "exclusiveMinimum" not in n]
    assert unbounded == [], f"numeric keys without a lower bound: {unbounded}"


def test_every_out_of_range_value_is_refused_with_file_line_and_key(tmp_path):
    schema = config.json_schema()
    params_file = ROOT / "params.yaml"
    raw = yaml.safe_load(params_file.read_text())
    checked = 0
    for path, node in _schema_leaves(schema, (), schema.get("$defs", {})):
        if not (_numeric(node) or "enum" in node):
            continue
        for value in _out_of_range(node):
            overlay = tmp_path / f"bad{checked}.yaml"
            overlay.write_text(yaml.safe_dump(_overlay_for(path, value, raw)))
            data = config.deep_merge(raw, yaml.safe_load(overlay.read_text()))
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
