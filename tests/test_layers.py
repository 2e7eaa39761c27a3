"""The package's layers: every import points down, and no module imports itself back.

Top to bottom: the CLI and the workflow tools; the phases of the experiment in DAG order (tasks,
agent, train, evaluation, publish); the infrastructure they share (sandbox, policy); the ground floor
(config and its typed sections, provenance, seeds, plots, code digests).
A module may import its own layer or a lower one, never a higher one: editing a phase then never
changes the code of the infrastructure beneath it, and a stage's code is only what it runs.
Imports inside functions count the same as those at the top (the code digests follow both).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "src" / "forgeline"

# The first name under forgeline -> its layer; higher numbers sit higher.
GROUND, INFRASTRUCTURE, TASKS, AGENT, TRAIN, EVALUATION, PUBLISH, TOP = range(8)
LAYER = {
    "": GROUND, "config": GROUND, "params": GROUND, "provenance": GROUND, "seeds": GROUND,
    "plots": GROUND, "codedeps": GROUND,
    "sandbox": INFRASTRUCTURE, "policy": INFRASTRUCTURE,
    "tasks": TASKS, "agent": AGENT, "train": TRAIN, "evaluation": EVALUATION, "publish": PUBLISH,
    "cli": TOP, "workflow": TOP,
}
LAYER_NAMES = ["ground floor", "infrastructure", "tasks", "agent", "train", "evaluation", "publish",
               "cli/workflow"]


def module_name(path: Path) -> str:
    parts = ("forgeline",) + path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


def imported_modules(name: str) -> set[str]:
    """The forgeline modules `name` imports anywhere in its file (a `from pkg import sub` of a
    submodule is that submodule; relative imports resolved)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module
                       for a in node.names]
        else:
            continue
        out |= {t for t in targets if t == "forgeline" or t.startswith("forgeline.")}
    return out - {name}


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    assert top in LAYER, f"{module}: not in a layer; add {top!r} to tests/test_layers.py LAYER"
    return LAYER[top]


def test_every_module_is_in_a_layer():
    assert len(MODULES) > 40
    for name in MODULES:
        layer(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name):
    mine = layer(name)
    up = sorted(f"{m} ({LAYER_NAMES[layer(m)]})" for m in imported_modules(name) if layer(m) > mine)
    assert not up, f"{name} ({LAYER_NAMES[mine]}) imports a higher layer: {', '.join(up)}"


def test_the_import_graph_has_no_cycle():
    graph = {name: imported_modules(name) & MODULES.keys() for name in MODULES}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycle = path[path.index(node):] + [node]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, path + [node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])


def test_the_checks_catch_a_back_edge(tmp_path):
    """The rule itself: an infrastructure module importing a phase, or a ground module importing
    anything above it, is what the tests above reject."""
    assert layer("forgeline.sandbox.images") < layer("forgeline.tasks.repos")
    assert layer("forgeline.provenance") < layer("forgeline.sandbox.base")
    assert layer("forgeline.train.ppo") < layer("forgeline.evaluation.report")
    # the one back-edge this package had: tasks.repos <-> sandbox (snapshot files and commit)
    assert "forgeline.tasks.repos" not in imported_modules("forgeline.sandbox.verify")
    assert "forgeline.sandbox.snapshot" in imported_modules("forgeline.tasks.repos")
    # the image stage is the only importer of sandbox.images inside the sandbox (the docker
    # backend connects through sandbox.engine, so editing images.py reruns no container stage)
    assert "forgeline.sandbox.images" not in imported_modules("forgeline.sandbox.docker")
