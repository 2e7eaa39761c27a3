"""The one config: params.yaml, optionally overlaid by more YAML files, checked against a schema.

Snakemake reads the same files (`configfile:` + `--configfile`), DVC reads them as params, and
every `forgeline` command gets them with `--config`. A wrong key fails at once, naming the file,
the line and the allowed keys.
"""
from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
DEFAULT_CONFIG = "params.yaml"


class ConfigError(ValueError):
    """A config file that cannot be used; the message says where and how to fix it."""


def _key_lines(path: Path, text: str) -> dict[tuple, int]:
    """Map each key path (('tasks', 'split', 'seed')) to its 1-based line in the file."""
    lines: dict[tuple, int] = {}

    def walk(node: yaml.Node, prefix: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                kp = prefix + (key.value,)
                lines[kp] = key.start_mark.line + 1
                walk(value, kp)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[prefix + (i,)] = item.start_mark.line + 1
                walk(item, prefix + (i,))

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


def deep_merge(base: dict, overlay: dict) -> dict:
    """Overlay wins; mappings merge key by key, everything else is replaced whole."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


@dataclass
class Config:
    """The merged config and the files it came from (in order; later files win)."""

    data: dict
    files: list[Path] = field(default_factory=list)

    def section(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            node = node[part]
        return node

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def _describe(error: jsonschema.ValidationError, schema: dict) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        hints = []
        for key in extra:
            close = difflib.get_close_matches(key, allowed, n=1)
            hints.append(f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        return f"{where}: {'; '.join(hints)}; allowed keys: {', '.join(allowed)}"
    return f"{where}: {error.message}"


def validate(data: dict, files: Iterable[Path] = (), schema: dict | None = None) -> None:
    """Raise ConfigError naming the first file and line that holds each offending key."""
    schema = schema or load_schema()
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    files = list(files)
    key_maps = {f: _key_lines(f, f.read_text(encoding="utf-8")) for f in files}
    messages = []
    for err in errors:
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            if extra:  # point at the unknown key itself, not at its parent
                path = path + (extra[0],)
        # a key no file sets (a missing required key): the base file, where it belongs
        location = str(files[0]) if files else "config"
        for f in reversed(files):  # the last file that sets a key is the one that counts
            probe = path
            while probe and probe not in key_maps[f]:
                probe = probe[:-1]
            if probe:
                location = f"{f}:{key_maps[f][probe]}"
                break
        messages.append(f"{location}: {_describe(err, schema)}")
    raise ConfigError("invalid config:\n  " + "\n  ".join(messages))


def load(files: Iterable[str | Path] | None = None) -> Config:
    """Read params.yaml (or the given files, merged in order) and validate the result."""
    paths = [Path(f) for f in (files or [DEFAULT_CONFIG])]
    merged: dict = {}
    for path in paths:
        merged = deep_merge(merged, read_file(path))
    validate(merged, paths)
    return Config(merged, paths)


def read_file(path: str | Path) -> dict:
    """One config file as a mapping; ConfigError naming the file (and the line of a YAML error)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found (run from the project root, or "
                          f"pass --config PATH)")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}:1: a config file must be a mapping of sections")
    return loaded


def flatten(section: Any, prefix: str) -> list[str]:
    """Dotted leaf keys under `prefix` (what a DVC stage lists as its params)."""
    if isinstance(section, dict) and section:
        out: list[str] = []
        for key in sorted(section):
            out.extend(flatten(section[key], f"{prefix}.{key}"))
        return out
    return [prefix]


def with_defaults(base: Mapping[str, Any], over: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """A stage's DEFAULTS `base` overlaid by its config section `over`, recursively (copies,
    never aliases); a key that `base` lacks is an error naming `where` and the known keys."""
    out = copy.deepcopy(dict(base))
    for key, value in (over or {}).items():
        if key not in base:
            raise ValueError(f"{where}: unknown key {key} (known: {', '.join(sorted(base))})")
        if isinstance(base[key], Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"{where}.{key} must be a mapping")
            out[key] = with_defaults(base[key], value, f"{where}.{key}")
        else:
            out[key] = copy.deepcopy(value)
    return out
