"""The one config: params.yaml, optionally overlaid by more YAML files, checked and typed.

Snakemake reads the same files (`configfile:` + `--configfile`), DVC reads them as params, and
every `forgeline` command gets them with `--config`. `load` merges them (later files win, key by
key), validates the result against the JSON schema generated from the dataclasses of
`forgeline.params` and returns a `Config`: its sections are those dataclasses
(`cfg.train.ppo.lam`), `cfg.data` is the merged mapping as the files wrote it (what Snakemake
params, DVC params and manifests record) and `cfg.files` the files. A wrong key fails at once,
naming the file, the line and the allowed keys.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

import jsonschema
import yaml

from forgeline.params import ParamsConfig

DEFAULT_CONFIG = "params.yaml"
Section = TypeVar("Section")


class ConfigError(ValueError):
    """A config file that cannot be used; the message says where and how to fix it."""


# -- the schema, from the dataclasses ----------------------------------------------------------

_SCALARS = {int: "integer", float: "number", bool: "boolean", str: "string"}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_schema(tp: Any, bounds: Mapping[str, Any], items: Mapping[str, Any],
                 nullable: bool = False, null_allowed: bool = True) -> dict:
    """JSON Schema of type hint `tp`: bounds go to the scalar (a list's items, a mapping's
    values), `items` keywords to a list; `X | None` also takes null unless `null_allowed` is
    false (None then means "left out")."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        [inner] = [a for a in args if a is not type(None)]
        return _type_schema(inner, bounds, items, null_allowed and type(None) in args)
    if dataclasses.is_dataclass(tp):
        out = copy.deepcopy(section_schema(tp))
    elif origin is typing.Literal:
        out = {"enum": list(args)}
    elif origin is list:
        out = {"type": "array", "items": _type_schema(args[0], bounds, {}), **items}
    elif origin is dict:
        out = {"type": "object", "additionalProperties": _type_schema(args[1], bounds, {})}
    else:
        out = {"type": _SCALARS[tp], **bounds}
    if nullable:
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        else:
            out["type"] = [out["type"], "null"]
    return out


@functools.cache
def section_schema(cls: type) -> dict:
    """JSON Schema (draft 2020-12) of one section dataclass: its fields, each typed and bounded;
    unknown keys are errors; a field without a default is required."""
    hints = _hints(cls)
    props = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata or {}
        props[f.name] = _type_schema(hints[f.name], meta.get("bounds", {}), meta.get("items", {}),
                                     null_allowed=not meta.get("absent_if_none", False))
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return {"type": "object", "additionalProperties": False, "required": required, "properties": props}


def json_schema(cls: type = ParamsConfig) -> dict:
    """The schema the config is validated with (a fresh copy), generated from `cls`."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **copy.deepcopy(section_schema(cls))}



# -- typed sections ----------------------------------------------------------------------------

def build(cls: type[Section], data: Mapping[str, Any], where: str = "") -> Section:
    """The dataclass `cls` from a mapping the schema accepted (values as written: an integer
    stays one where a float is allowed, so digests of the config do not move); keys the mapping
    leaves out take the field's default."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where or '<top level>'}: missing key '{f.name}'")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}".lstrip("."))
    return cls(**values)


def _value(tp: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
        return {k: build(typing.get_args(tp)[1], v, f"{where}.{k}") for k, v in value.items()}
    if typing.get_origin(tp) is list and dataclasses.is_dataclass(typing.get_args(tp)[0]):
        return [build(typing.get_args(tp)[0], v, f"{where}.{i}") for i, v in enumerate(value)]
    return copy.deepcopy(value)


def as_dict(section: Any) -> Any:
    """A section as plain data (what a manifest records and a digest hashes); a field whose None
    means "left out" is left out."""
    if dataclasses.is_dataclass(section):
        return {f.name: as_dict(getattr(section, f.name)) for f in dataclasses.fields(section)
                if not ((f.metadata or {}).get("absent_if_none") and getattr(section, f.name) is None)}
    if isinstance(section, dict):
        return {k: as_dict(v) for k, v in section.items()}
    if isinstance(section, (list, tuple)):
        return [as_dict(v) for v in section]
    return section


def _problems(section: Any, path: tuple) -> list[tuple[tuple, str]]:
    """(key path, message) of every rule between keys broken anywhere in `section`."""
    out = []
    if not dataclasses.is_dataclass(section):
        return out
    check = getattr(section, "problems", None)
    if check is not None:
        out += [(path + (key,), message) for key, message in check()]
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        children = value.items() if isinstance(value, dict) else [(None, value)]
        for key, child in children:
            out += _problems(child, path + (f.name,) + ((key,) if key is not None else ()))
    return out


SECTIONS = tuple(f.name for f in dataclasses.fields(ParamsConfig))


class Config:
    """The merged config: `data` (the mapping, as the files wrote it), `files` (in order; later
    files win) and each top-level section as its typed dataclass of forgeline.params, built
    on first use: `cfg.train.ppo.lam`, `cfg.seed`."""

    def __init__(self, data: dict, files: Iterable[str | Path] = ()):
        self.data = data
        self.files = [Path(f) for f in files]
        self._sections: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Config(files={[str(f) for f in self.files]})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in SECTIONS:
            raise AttributeError(f"config has no section {name!r} (sections: {', '.join(SECTIONS)})")
        if name not in self._sections:
            if name not in self.data:
                raise ConfigError(f"<top level>: missing key '{name}'")
            self._sections[name] = _value(_hints(ParamsConfig)[name], self.data[name], name)
        return self._sections[name]

    def section(self, dotted: str) -> Any:
        """The raw mapping (or value) under a dotted key, as the files wrote it."""
        node: Any = self.data
        for part in dotted.split("."):
            node = node[part]
        return node

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def merged(base: Section, changes: Mapping[str, Any]) -> Section:
    """`base` (a Config, or one of its sections) with `changes` merged over it key by key, as
    one more overlay file would be; validated like a file (ConfigError)."""
    if isinstance(base, Config):
        data = deep_merge(base.data, changes)
        validate(data)
        return Config(data, base.files)
    cls = type(base)
    data = deep_merge(as_dict(base), changes)
    validate(data, schema=json_schema(cls), root=cls)
    return build(cls, data)


# -- files -------------------------------------------------------------------------------------

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
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _describe(error: jsonschema.ValidationError) -> str:
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


def _location(path: tuple, files: list[Path], key_maps: dict) -> str:
    """file:line of the last file that sets `path` (or its nearest parent); a key no file sets
    (a missing required key): the base file, where it belongs."""
    for f in reversed(files):
        probe = path
        while probe and probe not in key_maps[f]:
            probe = probe[:-1]
        if probe:
            return f"{f}:{key_maps[f][probe]}"
    return str(files[0]) if files else "config"


def validate(data: dict, files: Iterable[Path] = (), schema: dict | None = None,
             root: type = ParamsConfig) -> None:
    """Raise ConfigError naming the file and line that holds each offending key: the schema's
    errors first; when there are none, the rules between keys (the sections' `problems()`)."""
    schema = schema or json_schema(root)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data),
                    key=lambda e: [str(p) for p in e.absolute_path])
    found: list[tuple[tuple, str]] = []
    for err in errors:
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            if extra:  # point at the unknown key itself, not at its parent
                path = path + (extra[0],)
        found.append((path, _describe(err)))
    if not errors:
        found = [(path, f"{'.'.join(map(str, path))}: {message}")
                 for path, message in _problems(build(root, data), ())]
    if not found:
        return
    files = [Path(f) for f in files]
    key_maps = {f: _key_lines(f, f.read_text(encoding="utf-8")) for f in files}
    raise ConfigError("invalid config:\n  " + "\n  ".join(
        f"{_location(path, files, key_maps)}: {message}" for path, message in found))


def load(files: Iterable[str | Path] | None = None) -> Config:
    """Read params.yaml (or the given files, merged in order), validate the result, type it."""
    paths = [Path(f) for f in (files or [DEFAULT_CONFIG])]
    merged_data: dict = {}
    for path in paths:
        merged_data = deep_merge(merged_data, read_file(path))
    validate(merged_data, paths)
    return Config(merged_data, paths)


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


# -- `forgeline config-get KEY`: one value of the merged config, for scripts (the Makefile) -----

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", help="a dotted key, e.g. sandbox.backend")


def run(cfg: Config, args: argparse.Namespace) -> None:
    try:
        value = cfg.section(args.key)
    except (KeyError, TypeError):
        raise ConfigError(f"{args.key}: no such key in {', '.join(map(str, cfg.files))}") from None
    print(value if isinstance(value, str) else json.dumps(value, sort_keys=True))

