"""Config blocks in the docs say what params.yaml says.

Every ```yaml block of README.md and docs/*.md is read as a config fragment. Its keys must be keys
of the config, and each value it shares with params.yaml must be params.yaml's. A block whose
first line is `# overlay: configs/NAME.yaml` is checked against that overlay merged over
params.yaml instead; a block whose first line is `# example: WHY` illustrates other values on
purpose: only its keys are checked.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import yaml

from forgeline import config

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"^#\s*(overlay|example):\s*(\S.*)$")


def yaml_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(line of the opening fence, body) of each ```yaml block."""
    for m in BLOCK.finditer(text):
        yield text[:m.start()].count("\n") + 1, m.group(1)


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    else:
        yield path, node


def known_key(schema: dict, path: tuple) -> bool:
    """Whether `path` names a key of the config (any key of a free-form mapping counts)."""
    node = schema
    for key in path:
        if key in node.get("properties", {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
    return True


def block_problems(body: str, params: dict, schema: dict) -> list[str]:
    """What a docs block says that the config it claims to show does not."""
    first = body.splitlines()[0].strip() if body.strip() else ""
    marker = MARKER.match(first)
    block = yaml.safe_load(body) or {}
    if not isinstance(block, dict):
        return ["not a mapping of config sections"]
    expected = params
    if marker and marker.group(1) == "overlay":
        expected = config.deep_merge(params, config.read_file(ROOT / marker.group(2).split()[0]))
    out = []
    for path, value in leaves(block):
        dotted = ".".join(map(str, path))
        if not known_key(schema, path):
            out.append(f"{dotted}: not a key of the config")
            continue
        if marker and marker.group(1) == "example":
            continue
        node: Any = expected
        for key in path:
            node = node.get(key, KeyError) if isinstance(node, dict) else KeyError
        if node is not KeyError and node != value:
            where = f"params.yaml + {marker.group(2).split()[0]}" if marker else "params.yaml"
            out.append(f"{dotted}: {value!r} here, {node!r} in {where}")
    return out


def test_docs_config_blocks_agree_with_params():
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    schema = config.json_schema()
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found, checked = [], 0
    for path in files:
        for line, body in yaml_blocks(path.read_text(encoding="utf-8")):
            checked += 1
            found += [f"{path.relative_to(ROOT)}:{line}: {p}" for p in block_problems(body, params, schema)]
    assert checked >= 8, checked
    assert found == [], "docs disagree with the config:\n" + "\n".join(found)


def test_the_check_finds_a_wrong_value_an_unknown_key_and_honours_the_markers():
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    schema = config.json_schema()
    doc = ("text\n```yaml\ntrain:\n  ppo:\n    lam: 0.95   # a stale value\n    steps: 8\n```\n"
           "```yaml\nagent:\n  max_stepz: 3\n```\n"
           "```yaml\n# overlay: configs/klear-8b.yaml\nagent:\n  max_steps: 250\n```\n"
           "```yaml\n# example: the hub ingest turned on\ntasks:\n  ingest:\n    hub:\n"
           "      repo_id: SWE-bench/SWE-smith\n```\n")
    problems = [block_problems(body, params, schema) for _, body in yaml_blocks(doc)]
    assert [line for line, _ in yaml_blocks(doc)] == [2, 8, 12, 17]
    assert problems == [["train.ppo.lam: 0.95 here, 1.0 in params.yaml"],
                        ["agent.max_stepz: not a key of the config"], [], []]
    # the same overlay block without its marker is compared with params.yaml
    assert block_problems("agent:\n  max_steps: 250\n", params, schema) == \
        ["agent.max_steps: 250 here, 12 in params.yaml"]
