"""A copy of the forgeline workflow over tiny repositories, for tests that run the real DAG."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Three tiny repositories: enough for a repository-disjoint train/val/test split.
TINY_REPOS = {
    "alpha": ("def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n\n\n"
              "def clamp(x, lo, hi):\n    \"\"\"Clamp x into [lo, hi].\"\"\"\n    if x < lo:\n        return lo\n"
              "    if x > hi:\n        return hi\n    return x\n",
              "from alpha import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
              "def test_add_zero():\n    assert add(0, 4) == 4\n\n\ndef test_clamp_low():\n    assert clamp(-1, 0, 9) == 0\n\n\n"
              "def test_clamp_high():\n    assert clamp(12, 0, 9) == 9\n\n\ndef test_clamp_edge():\n    assert clamp(9, 0, 9) == 9\n"),
    "beta": ("def scale(xs, k):\n    \"\"\"Multiply each item by k.\"\"\"\n    return [x * k for x in xs]\n\n\n"
             "def count_above(xs, t):\n    \"\"\"How many items exceed t.\"\"\"\n    n = 0\n    for x in xs:\n        if x > t:\n"
             "            n += 1\n    return n\n",
             "from beta import count_above, scale\n\n\ndef test_scale():\n    assert scale([1, 2], 3) == [3, 6]\n\n\n"
             "def test_count_above():\n    assert count_above([1, 5, 7], 4) == 2\n\n\n"
             "def test_count_above_edge():\n    assert count_above([4, 4], 4) == 0\n"),
    "gamma": ("def is_even(n):\n    \"\"\"True for even n.\"\"\"\n    return n % 2 == 0\n\n\n"
              "def span(xs):\n    \"\"\"max - min of a non-empty list.\"\"\"\n    return max(xs) - min(xs)\n",
              "from gamma import is_even, span\n\n\ndef test_even():\n    assert is_even(4) is True\n\n\n"
              "def test_odd():\n    assert is_even(3) is False\n\n\ndef test_span():\n    assert span([3, 9, 4]) == 6\n"),
}

# The workflow's other roles: an SFT repository (oracle trajectories) and a held-out panel.
ROLE_REPOS = {
    "delta": ("def head(xs, n):\n    \"\"\"The first n items.\"\"\"\n    return xs[:n]\n\n\n"
              "def total(xs):\n    \"\"\"Sum of the items.\"\"\"\n    s = 0\n    for x in xs:\n        s = s + x\n    return s\n",
              "from delta import head, total\n\n\ndef test_head():\n    assert head([1, 2, 3], 2) == [1, 2]\n\n\n"
              "def test_total():\n    assert total([1, 2, 3]) == 6\n\n\ndef test_total_empty():\n    assert total([]) == 0\n"),
    "epsilon": ("def sign(x):\n    \"\"\"-1, 0 or 1.\"\"\"\n    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n"
                "    return 0\n",
                "from epsilon import sign\n\n\ndef test_pos():\n    assert sign(5) == 1\n\n\n"
                "def test_neg():\n    assert sign(-2) == -1\n\n\ndef test_zero():\n    assert sign(0) == 0\n"),
}


def write_repo(root: Path, name: str, source: str, tests: str) -> Path:
    repo = root / name
    (repo / name).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / name / "__init__.py").write_text(source)
    (repo / "tests" / f"test_{name}.py").write_text(tests)
    return repo


def make_project(dest: Path) -> Path:
    """The workflow (Snakefile, rules, src) over TINY_REPOS with small params, at `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in ("Snakefile", "rules", "src", "profiles"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy2)(
            src, dest / item, **({"ignore": shutil.ignore_patterns("__pycache__", "*.egg-info")}
                                 if src.is_dir() else {}))
    for name, (source, tests) in (TINY_REPOS | ROLE_REPOS).items():
        write_repo(dest / "data" / "repos", name, source, tests)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["repos"] = {"root": "data/repos", "pool": sorted(TINY_REPOS), "sft": ["delta"], "panel": ["epsilon"]}
    params["sandbox"]["backend"] = "process"
    params["tasks"]["generate"].update(max_per_repo=3, max_tries_per_repo=6)
    params["tasks"]["validate"]["gold_runs"] = 1
    params["tasks"]["split"]["fractions"] = {"train": 0.34, "val": 0.33, "test": 0.33}
    # the policy and RL phases at toy size: a random-ish policy, so every evaluated task is kept
    params["tasks"]["difficulty"].update(k=1, screen=0, band=[0.0, 1.0], max_tasks_per_repo=2, threads=1)
    params["policy"]["init"]["tokenizer"].update(vocab_size=600, stdlib_max_bytes=150_000)
    params["policy"]["init"]["model"].update(hidden_size=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                                             intermediate=64, max_position_embeddings=1024)
    params["policy"]["init"]["copy"]["repeat"].update(steps=3, batch=4)
    params["policy"]["init"]["copy"]["recall"].update(steps=2, batch=2, length=64)
    params["policy"]["init"]["copy"]["match"].update(steps=2, batch=2, length=64)
    params["agent"].update(max_steps=2, max_new_tokens=12, context_limit=1024, wall_time_s=120,
                           alignment="text")  # random tokens rarely re-tokenize to the same ids
    params["agent"]["rollout"]["concurrency"] = 2
    params["agent"]["oracle"]["max_guesses"] = 12
    params["train"]["sft"].update(max_steps=2, max_seq_len=512, tokens_per_batch=1024, threads=1,
                                  warmup_steps=1)
    params["train"]["sft"]["synthetic"].update(examples=4, max_file_bytes=4000)
    params["train"]["rollouts"]["samples_per_task"] = 2
    params["train"]["critic"].update(epochs=1, threads=1, max_seq_len=1024)
    # two PPO steps with a checkpoint each: its step-1 checkpoint is evaluated and warm-started
    params["train"]["ppo"].update(steps=2, tasks_per_step=1, threads=1, checkpoint_every=1)
    params["train"]["grpo"].update(steps=1, tasks_per_step=1, group_size=2, threads=1)
    params["train"]["warm_start"] = {"ppo-more": {"parent": "ppo", "step": 1, "steps": 1}}
    params["evaluation"].update(panels={"test": ["results/split/test.jsonl"],
                                        "heldout": ["results/validated/epsilon.jsonl"]}, threads=2)
    params["evaluation"]["policies"].pop("ppo-parent")
    params["evaluation"]["policies"]["grpo"].pop("panels", None)  # the tiny panels have no train: all of them
    params["evaluation"]["policies"].update({
        "ppo-1": {"path": "results/adapter", "step": 1, "base": "results/policy/sft", "panels": ["test"]},
        "ppo-more": {"path": "results/warm/ppo-more", "base": "results/policy/sft", "panels": ["test"]}})
    params["evaluation"]["pairs"] = [{"policy": "grpo", "against": "ppo"}, {"policy": "ppo", "against": "ppo-1"},
                                     {"policy": "ppo-more", "against": "ppo-1"}]
    # (an evaluation holds both cores, so it cannot start beside a job on the way to the adapter:
    # test_workflow checks that those run first; the engine generates on one thread anyway)
    params["evaluation"]["gate"]["panel"] = "test"  # the tiny project has no train panel
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return dest


def env(project: Path) -> dict[str, str]:
    """Run the copy's own code: the CLI imports forgeline from the project's src/."""
    return {**os.environ, "PYTHONPATH": str(project / "src"), "PATH": f"{BIN}:{os.environ['PATH']}",
            "PYTHONHASHSEED": "0", "TZ": "UTC", "DVC_NO_ANALYTICS": "1"}


def run(project: Path, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=project, env=env(project), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def artifact_digests(project: Path) -> dict[str, str]:
    """sha256 of every artifact under results/, manifests aside (they hold timings)."""
    from forgeline.provenance import sha256_file
    return {p.relative_to(project).as_posix(): sha256_file(p)
            for p in sorted((project / "results").rglob("*"))
            if p.is_file() and not p.name.endswith("manifest.json")
            and p.name not in (".gitignore", ".snakemake_timestamp")}


# Fields that hold wall-clock time (episode timings, PPO step times, evaluation runtimes), and
# artifacts made from them: two honest runs differ there and nowhere else. The published adapter's
# card lists the sha256 of its checkpoint-summary.json (wall-clock) and adapter_config.json (the
# checkout, below).
WALL_CLOCK_KEYS = {"timing", "time", "wall_s", "mean_wall_s", "wall_s_ratio"}
WALL_CLOCK_FILES = ("results/eval/tables/tables.md", "results/eval/tables/tables.csv",
                    "results/report/report.html", "results/adapter/checkpoint-summary.json",
                    "results/adapter-grpo/checkpoint-summary.json", "results/warm/*/checkpoint-summary.json",
                    "results/publish/adapter/checkpoint-summary.json", "results/publish/adapter/README.md",
                    # the sha256 of their adapter_config.json, which names the checkout (below)
                    "results/*/checkpoints/step-*/checkpoint-summary.json")


# Fields that name the checkout a stage ran in: the adapter's base, by absolute path so that
# PEFT's Auto classes load it from any working directory (train/ppo_checkpoints.py base_reference;
# in results/publish/adapter, the path of its base/: publish/adapter.py).
CHECKOUT_KEYS = {"base_model_name_or_path"}


def _without_wall_clock(value):
    if isinstance(value, dict):
        return {k: _without_wall_clock(v) for k, v in value.items()
                if k not in WALL_CLOCK_KEYS and k not in CHECKOUT_KEYS}
    if isinstance(value, list):
        return [_without_wall_clock(v) for v in value]
    return value


def reproducible_digests(project: Path) -> dict[str, str]:
    """`artifact_digests` with wall-clock time taken out: JSON/JSONL artifacts are hashed
    without WALL_CLOCK_KEYS, WALL_CLOCK_FILES are not compared. What two runs of the same inputs must agree on, byte for byte."""
    import fnmatch
    import hashlib
    import json

    out = {}
    for name, digest in artifact_digests(project).items():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in WALL_CLOCK_FILES):
            continue
        path = project / name
        if name.endswith((".json", ".jsonl")) and "results/harbor/" not in name:
            lines = path.read_text().splitlines() if name.endswith(".jsonl") else [path.read_text()]
            text = "\n".join(json.dumps(_without_wall_clock(json.loads(l)), sort_keys=True)
                             for l in lines if l.strip())
            digest = hashlib.sha256(text.encode()).hexdigest()
        out[name] = digest
    return out


_JOB = re.compile(r"^(?:local)?rule (?P<rule>\w+):$")
_WILDCARDS = re.compile(r"^\s+wildcards: (?P<wc>.+)$")


def planned_jobs(project: Path, sep: str = "[{}]") -> set[str]:
    """What `snakemake -n` would run: "rule", or "rule" + sep.format(wildcards) per job."""
    out = run(project, "snakemake", "-n", "--cores", "2").stdout
    jobs, current = set(), None
    for line in out.splitlines():
        if m := _JOB.match(line):
            current = m["rule"]
            jobs.add(current)
        elif current and (m := _WILDCARDS.match(line)):
            jobs.discard(current)
            jobs.add(current + sep.format(m["wc"]))
            current = None
    return jobs


# -- code edits, for the tests and the bench of code dependencies --------------------------------

def function_nodes(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level functions and methods of top-level classes, by (qualified) name."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    return out


def body_lines(node) -> set[int]:
    """The lines of a function that run when it is called (not the `def`, which runs on import)."""
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return set(range(body[0].lineno, node.end_lineno + 1))


def edited(text: str, what: str, target: str) -> str:
    """`text` (a module) with one edit: "body" adds a statement at the top of function `target`
    ("Class.method" for a method), "docstring" changes its docstring ("" = the module's),
    "comment" adds a comment line above it."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    if what == "docstring":
        node = tree if not target else function_nodes(tree)[target]
        doc = node.body[0]
        assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), target
        line = doc.lineno - 1
        lines[line] = lines[line].replace('"""', '"""Edited: ', 1)
    elif what == "comment":
        line = function_nodes(tree)[target].lineno - 1
        lines.insert(line, "# an edited comment\n")
    else:
        node = function_nodes(tree)[target]
        first = min(body_lines(node)) - 1
        indent = re.match(r"\s*", lines[first]).group(0)
        lines.insert(first, f"{indent}_edited = None\n")
    return "".join(lines)
