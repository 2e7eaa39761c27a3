"""Export the frozen split as Harbor tasks: one self-contained task folder per instance.

Stage `forgeline harbor --split-dir results/split --out-dir results/harbor --manifest
results/harbor/manifest.json` writes, for every task of the split, `OUT/<split>/<instance_id>/`:

    instruction.md           the problem statement, and where the repository is (/testbed)
    task.toml                Harbor's task config (schema 1.4, as harbor 0.25.0's TaskConfig reads it)
    environment/Dockerfile   the repository snapshot at /testbed with the bug applied; builds
    environment/bug.patch    from public Debian packages, no forgeline image or registry needed
    environment/repo/...     the snapshot's files
    environment/wheels/...   its pinned test dependencies (forgeline-requirements.txt), if any:
                             the wheel files the image stage installs, and their requirements.txt
    solution/solve.sh        the oracle: `git apply -R` of the bug patch
    solution/bug.patch
    tests/test.sh            the verifier: removes any reward file first, runs tests/grade.py,
    tests/grade.py           writes /logs/verifier/reward.txt (1 or 0) itself, after the tests
    tests/forgeline_grading.py   forgeline.sandbox.grading, verbatim: the same parser and rules
    tests/config.json        FAIL_TO_PASS, PASS_TO_PASS, the files to restore, the time limit
    tests/original/...       the task's test and test-configuration files, put back before grading

and `OUT/index.json`: {split: {instance_id: task digest}}, the split's semantic digest and how
both are computed. A task digest is Harbor's own content hash (harbor.publisher.packager
`Packager.compute_content_hash`): sha256 over the lines `relpath\\0sha256(file)\\n`, sorted by
relpath as a string. Same inputs give a byte-identical tree; the tree is written into a temp
sibling of OUT and swapped in whole, so a killed job never leaves half a tree under OUT.

Why there is no `[environment] docker_image`: when it is set, Harbor runs that image and never
builds environment/Dockerfile (harbor.environments.definition.should_use_prebuilt_docker_image),
and forgeline's per-repository image is the PRISTINE snapshot (the sandbox applies the bug patch
at session start): the agent would get a repository without the bug. The per-repository image
is recorded as `[metadata] repo_image` instead.

A snapshot's pinned test dependencies travel as files: the wheels `forgeline image` would put
into its image (images.fetch_wheels from `--cache-dir`, each checked against the lock file's
sha256; fetched once where missing), under environment/wheels/, installed by the Dockerfile with
the image stage's own offline command (images.WHEEL_INSTALL). A snapshot without a lock file
gets neither, and its Dockerfile is what it was before dependencies existed.

A snapshot with a src/ layout (snapshot.src_layout) imports its packages from src/ as in
forgeline's image (envs/repo.Dockerfile's PYTHONPATH=/testbed/src): its Dockerfile sets that ENV
and its grade.py puts the testbed's src/ on the PYTHONPATH pytest runs with; src/ being an import
root, grade.py also tidies it by the root's rule (new top-level modules and packages the agent
added under src/, say a src/pytest.py that would shadow pytest, are removed). A snapshot without
src/ gets none of these lines: its files are what they were before.
"""
from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import inspect
import json
import logging
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from forgeline.config import ConfigError
from forgeline.provenance import Manifest, atomic_dir, atomic_path, canonical_json, sha256_bytes
from forgeline.sandbox import grading
from forgeline.sandbox.grading import is_test_path
from forgeline.params import SandboxConfig
from forgeline.sandbox import images
from forgeline.sandbox.base import SandboxError
from forgeline.sandbox.images import base_spec
from forgeline.sandbox.snapshot import SRC_DIR, snapshot_files, src_layout as has_src_layout
from forgeline.sandbox.verify import FORBIDDEN_NAMES, file_names, split_diff
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import repo_key
from forgeline.tasks.split import (DIGEST_SCHEME, SPLIT_JSON, frozen_split_digest,
                                   instance_content_digest, load_instances)

log = logging.getLogger(__name__)

INDEX_NAME = "index.json"
EXPORT_FORMAT = "forgeline.harbor.v1"
HARBOR_SCHEMA_VERSION = "1.4"      # harbor 0.25.0 TaskConfig.schema_version
TASK_ORG = "forgeline"             # [task] name = "<org>/<instance_id>" (Harbor wants org/name)
TESTBED = "/testbed"
SANDBOX_USER, SANDBOX_UID = "forgeline", 1000
AGENT_TIMEOUT_S = 1800.0           # default of --agent-timeout-sec
VERIFIER_MARGIN_S = 60.0           # verifier time limit = sandbox.test_timeout_s + this
NETWORK_MODE = "no-network"        # Harbor's NetworkMode values: no-network | public | allowlist
ENV_MARKER = "/etc/forgeline-harbor.json"
TASK_DIGEST_SCHEME = ("sha256 over the lines `relpath\\0sha256(file)\\n` of every file of the "
                      "task folder, sorted by relpath as a string (Harbor's "
                      "Packager.compute_content_hash)")
# Files Harbor leaves out of a published task (harbor.publisher.packager.DEFAULT_IGNORES) or
# treats specially (.harborignore): a snapshot holding one could not be exported faithfully.
_HARBOR_DROPPED_SUFFIXES = (".pyc", ".swp", ".swo", "~")
_HARBOR_DROPPED_NAMES = {".DS_Store", ".harborignore", "__pycache__"}
EXECUTABLE = 0o755
REGULAR = 0o644


# -- templates -----------------------------------------------------------------------------
# Package data in forgeline/tasks/harbor_files/ (pyproject.toml installs them): Dockerfile.in,
# solve.sh.in and test.sh.in are str.format templates ({instance_id}, ...; `{{`/`}}` stand for
# one brace); grade.py, the verifier program, is shipped as it is but for its __MARKER__ and
# its two __SRC_LAYOUT_...__ slot lines (removed, or replaced by GRADE_SRC_LAYOUT_SLOTS' lines for
# a src/ layout).
TEMPLATE_DIR = "harbor_files"
GRADE_SRC_LAYOUT_SLOT = "    # __SRC_LAYOUT_ENV__ (a line harbor.py puts here for a src/ layout, or removes)\n"
GRADE_SRC_LAYOUT_TIDY_SLOT = "    # __SRC_LAYOUT_TIDY__ (lines harbor.py adds for a src/ layout, or removes)\n"
# A src/ layout's packages import as in forgeline's image (envs/repo.Dockerfile): the Dockerfile
# sets its PYTHONPATH, and grade.py puts the testbed's src/ (/testbed/src under Harbor) on pytest's.
GRADE_SRC_LAYOUT_ENV = (f'    env["PYTHONPATH"] = os.path.join(os.path.abspath(testbed), {SRC_DIR!r})'
                        f'  # a src/ layout\n')
# ... so src/ is an import root as the testbed is: grade.py's tidy, run again on src/ against the
# snapshot's files under src/, removes what the agent added there as it does at the root (a new
# src/pytest.py or src/_pytest/ would shadow pytest); the root's pass already restored src/'s tests.
GRADE_SRC_LAYOUT_TIDY = (
    f'    # a src/ layout: {SRC_DIR}/ is an import root too, tidied by the same rule as the root\n'
    f'    src_files = [rel.split("/", 1)[1] for rel in cfg["baseline_files"]\n'
    f'                 if rel.startswith("{SRC_DIR}/")]\n'
    f'    src_removed, _ = tidy(os.path.join(args.testbed, "{SRC_DIR}"),\n'
    f'                          dict(cfg, baseline_files=src_files, restore=[]))\n'
    f'    removed = sorted(removed + ["{SRC_DIR}/" + rel for rel in src_removed])\n')
GRADE_SRC_LAYOUT_SLOTS = {GRADE_SRC_LAYOUT_SLOT: GRADE_SRC_LAYOUT_ENV,
                          GRADE_SRC_LAYOUT_TIDY_SLOT: GRADE_SRC_LAYOUT_TIDY}
DOCKERFILE_SRC_LAYOUT_ENV = (f"\n# a src/ layout: its packages import as installed, as in forgeline's "
                             f"image (envs/repo.Dockerfile)\nENV PYTHONPATH={TESTBED}/{SRC_DIR}\n")


@functools.cache
def template(name: str) -> str:
    """The text of forgeline/tasks/harbor_files/<name>."""
    return resources.files("forgeline.tasks").joinpath(TEMPLATE_DIR, name).read_bytes().decode("utf-8")


INSTRUCTION_NOTE = ("The repository is at `/testbed`: fix the problem described above by "
                    "editing its source code (the tests are not yours to change).")


# -- pure functions ------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportSettings:
    """What the task folders take from the config and the command line.

    cpus, memory_mb: the task container's limits (sandbox.docker); test_timeout_s: pytest's wall
    time limit in seconds (sandbox.test_timeout_s); agent_timeout_s: the agent's, in seconds;
    base_image: the Dockerfile's default FROM; packages: Debian packages installed when the base
    lacks python3/pytest/git.
    """

    cpus: int | float
    memory_mb: int
    test_timeout_s: float
    agent_timeout_s: float
    base_image: str
    packages: tuple[str, ...]

    @property
    def verifier_timeout_s(self) -> float:
        return float(self.test_timeout_s) + VERIFIER_MARGIN_S


def settings_from_config(sandbox: SandboxConfig, agent_timeout_s: float = AGENT_TIMEOUT_S) -> ExportSettings:
    """ExportSettings from the config's `sandbox`.

    The Dockerfile's default base: the pulled base image by digest (base_image.source: pull),
    else Debian's `<suite>-slim` image plus the same Debian packages the mmdebstrap base has.
    """
    spec = base_spec(sandbox.docker.base_image)
    base = spec["ref"] if spec["source"] == "pull" else f"debian:{spec['suite']}-slim"
    cpus = sandbox.docker.cpus
    if isinstance(cpus, float) and cpus.is_integer():
        cpus = int(cpus)  # Harbor normalises 1.0 to 1 too
    return ExportSettings(cpus=cpus, memory_mb=int(sandbox.docker.memory_mb),
                          test_timeout_s=float(sandbox.test_timeout_s),
                          agent_timeout_s=float(agent_timeout_s), base_image=base,
                          packages=tuple(spec["packages"]))


def task_name(instance_id: str, org: str = TASK_ORG) -> str:
    """Harbor's `[task] name`, `org/name` (harbor.constants.ORG_NAME_PATTERN); the instance id
    must already be a safe folder name (letters, digits, `._-`, no leading dot, no `..`)."""
    check_instance_id(instance_id)
    return f"{org}/{instance_id}"


def check_instance_id(instance_id: str) -> None:
    """ValueError unless the id can name a folder and a Harbor task as it is."""
    ok = (instance_id and not instance_id.startswith(".") and ".." not in instance_id
          and all(c.isascii() and (c.isalnum() or c in "._-") for c in instance_id))
    if not ok:
        raise ValueError(f"instance_id {instance_id!r} cannot name a task folder or a Harbor task "
                         f"(letters, digits and ._- only, no leading dot, no '..')")


def _toml_key(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return _toml_value(key)


def _toml_value(value: Any) -> str:
    """One TOML value: strings as basic strings (JSON's escapes are TOML's, plus DEL)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"TOML export: non-finite number {value}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"TOML export: unsupported value {value!r}")


def render_toml(root: dict[str, Any], tables: list[tuple[str, dict[str, Any]]]) -> str:
    """A TOML document: root keys, then each [table] in the given order; None values left out."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in root.items() if v is not None]
    for name, table in tables:
        lines += ["", f"[{name}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


def task_toml(instance: dict, split_name: str, split_digest: str, repo_image: str,
              settings: ExportSettings) -> str:
    """task.toml of one task, in the field names harbor 0.25.0's TaskConfig reads.

    The verifier runs in a SEPARATE container built from the same environment, with the agent's
    /testbed copied in as an artifact (so nothing the agent left running or wrote outside
    /testbed reaches grading) and as root; the agent runs as the unprivileged sandbox user.
    """
    metadata = {
        "instance_id": instance["instance_id"],
        "repo": instance["repo"],
        "base_commit": instance.get("base_commit"),
        "split": split_name,
        "bug_type": instance.get("bug_type"),
        "split_digest": split_digest,
        "split_digest_scheme": DIGEST_SCHEME,
        "content_digest": instance_content_digest(instance),
        "repo_image": repo_image,
        "fail_to_pass": len(instance["FAIL_TO_PASS"]),
        "pass_to_pass": len(instance["PASS_TO_PASS"]),
    }
    return render_toml(
        {"schema_version": HARBOR_SCHEMA_VERSION, "artifacts": [TESTBED]},
        [("task", {"name": task_name(instance["instance_id"])}),
         ("metadata", metadata),
         ("verifier", {"timeout_sec": settings.verifier_timeout_s,
                       "environment_mode": "separate", "user": "root"}),
         ("agent", {"timeout_sec": float(settings.agent_timeout_s), "user": SANDBOX_USER}),
         ("environment", {"cpus": settings.cpus, "memory_mb": settings.memory_mb,
                          "network_mode": NETWORK_MODE})])


def instruction_md(instance: dict) -> str:
    """The problem statement and one line saying where the repository is."""
    return instance["problem_statement"].strip("\n") + "\n\n" + INSTRUCTION_NOTE + "\n"


def patch_paths(patch: str) -> set[str]:
    """Every path a git-format patch touches; ValueError when a part is malformed."""
    paths: set[str] = set()
    for part in split_diff(patch):
        names, why = file_names(part)
        if why:
            raise ValueError(f"bug patch: {why}")
        paths |= names
    return paths


def restored_paths(files: Iterable[str]) -> list[str]:
    """Snapshot files the verifier puts back: tests and test configuration (grading.is_test_path),
    and files Python or pytest import by name (verify.FORBIDDEN_NAMES, *.pth)."""
    return sorted(f for f in files if is_test_path(f) or PurePosixPath(f).name in FORBIDDEN_NAMES
                  or f.endswith(".pth"))


def grading_module_source() -> str:
    """forgeline.sandbox.grading's source, shipped verbatim; it must import only the stdlib."""
    source = inspect.getsource(grading)
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n.split(".")[0] == "forgeline" or (isinstance(node, ast.ImportFrom) and node.level)
               for n in names):
            raise ValueError("forgeline.sandbox.grading imports forgeline code: it can no longer "
                             "be shipped alone in a task's tests/")
    return source


def environment_dockerfile(instance: dict, settings: ExportSettings, marker: str,
                           wheels: bool, src_layout: bool = False) -> str:
    """environment/Dockerfile of one task; `wheels`: the environment carries wheels/ to install
    (the base must then have pip too, and the image stage's command installs them offline);
    `src_layout`: the snapshot's packages are under src/ (PYTHONPATH=/testbed/src)."""
    probe = "command -v git && python3 -m pytest --version" + (" && python3 -m pip --version" if wheels else "")
    copy = (f"# the snapshot's pinned test dependencies ({images.LOCK_FILE}), installed offline below\n"
            f"COPY {images.WHEEL_DIR}/ {images.WHEEL_INSTALL_DIR}/\n") if wheels else ""
    install = (f"    {images.WHEEL_INSTALL}; \\\n    rm -rf {images.WHEEL_INSTALL_DIR}; \\\n"
               if wheels else "")
    return template("Dockerfile.in").format(
        instance_id=instance["instance_id"], repo=instance["repo"],
        commit=instance.get("base_commit") or "?", base_image=settings.base_image,
        packages=" ".join(settings.packages), probe=probe, wheels_copy=copy, wheels_install=install,
        src_layout_env=DOCKERFILE_SRC_LAYOUT_ENV if src_layout else "",
        user=SANDBOX_USER, uid=SANDBOX_UID, marker=marker, marker_path=ENV_MARKER)


def grade_program(src_layout: bool) -> str:
    """tests/grade.py: the verifier program, with the image marker's path and, for a src/ layout,
    the testbed's src/ on pytest's PYTHONPATH (GRADE_SRC_LAYOUT_ENV) and tidied as the root is
    (GRADE_SRC_LAYOUT_TIDY)."""
    text = template("grade.py")
    for slot, lines in GRADE_SRC_LAYOUT_SLOTS.items():
        if text.count(slot) != 1:
            raise ValueError(f"harbor_files/grade.py lost its {slot.split()[1]} line")
        text = text.replace(slot, lines if src_layout else "")
    return text.replace("__MARKER__", ENV_MARKER)


def task_files(instance: dict, split_name: str, split_digest: str,
               snapshot: dict[str, tuple[bytes, int]], repo_image: str,
               settings: ExportSettings, grading_source: str,
               wheels: Iterable[tuple[str, int, bytes]] = (),
               src_layout: bool = False) -> dict[str, tuple[bytes, int]]:
    """Every file of one task folder: {relpath: (bytes, mode)}.

    Inputs: the instance (normalised), its split's name and semantic digest, the repository
    snapshot as {relpath: (bytes, mode)}, the per-repository image tag (metadata only), the
    settings, the source of forgeline.sandbox.grading, and the snapshot's pinned wheels as
    build-context entries (images.wheel_entries: (path, mode, bytes) of wheels/requirements.txt
    and each wheel; none without a lock file), and whether the snapshot has a src/ layout
    (snapshot.src_layout of its folder). Raises ValueError when the task cannot be
    exported faithfully (unsafe id, a patch that touches test files, a snapshot file Harbor
    would drop).
    """
    wheels = list(wheels)
    iid = instance["instance_id"]
    check_instance_id(iid)
    for rel in snapshot:
        name = PurePosixPath(rel).name
        if name in _HARBOR_DROPPED_NAMES or name.endswith(_HARBOR_DROPPED_SUFFIXES) \
                or set(PurePosixPath(rel).parts) & _HARBOR_DROPPED_NAMES:
            raise ValueError(f"{iid}: snapshot file {rel} would be dropped by Harbor "
                             f"(its default ignores); remove it from the snapshot")
    patch = instance["patch"]
    touched = patch_paths(patch)
    restore = restored_paths(snapshot)
    if touched & set(restore):
        raise ValueError(f"{iid}: the bug patch changes test/config files the verifier restores: "
                         f"{', '.join(sorted(touched & set(restore)))}")
    baseline = sorted(set(snapshot) | {p for p in touched if p != "/dev/null"})
    patch_bytes = patch.encode("utf-8")
    marker = canonical_json({"user": SANDBOX_USER, "uid": SANDBOX_UID, "gid": SANDBOX_UID,
                             "home": f"/home/{SANDBOX_USER}"})
    config = {
        "instance_id": iid,
        "fail_to_pass": list(instance["FAIL_TO_PASS"]),
        "pass_to_pass": list(instance["PASS_TO_PASS"]),
        "test_timeout_s": settings.test_timeout_s,
        "restore": restore,
        "baseline_files": baseline,
        "forbidden_names": sorted(FORBIDDEN_NAMES),
    }
    files: dict[str, tuple[bytes, int]] = {
        "instruction.md": (instruction_md(instance).encode("utf-8"), REGULAR),
        "task.toml": (task_toml(instance, split_name, split_digest, repo_image,
                                settings).encode("utf-8"), REGULAR),
        "environment/Dockerfile": (environment_dockerfile(instance, settings, marker, bool(wheels),
                                                          src_layout).encode("utf-8"), REGULAR),
        "environment/bug.patch": (patch_bytes, REGULAR),
        "solution/solve.sh": (template("solve.sh.in").format(instance_id=iid).encode("utf-8"), EXECUTABLE),
        "solution/bug.patch": (patch_bytes, REGULAR),
        "tests/test.sh": (template("test.sh.in").format(instance_id=iid).encode("utf-8"), EXECUTABLE),
        "tests/grade.py": (grade_program(src_layout).encode("utf-8"), REGULAR),
        "tests/forgeline_grading.py": (grading_source.encode("utf-8"), REGULAR),
        "tests/config.json": ((json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False)
                               + "\n").encode("utf-8"), REGULAR),
    }
    for rel, (data, mode) in snapshot.items():
        files[f"environment/repo/{rel}"] = (data, mode)
    for rel, mode, data in wheels:
        files[f"environment/{rel}"] = (data, mode)
    for rel in restore:
        files[f"tests/original/{rel}"] = (snapshot[rel][0], REGULAR)
    return dict(sorted(files.items()))


def task_digest(files: dict[str, tuple[bytes, int]] | dict[str, bytes]) -> str:
    """Harbor's task content hash: sha256 over `relpath\\0sha256(file)\\n`, sorted by relpath
    (as a string, the way harbor's Packager sorts; modes do not count)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        data = files[rel]
        data = data[0] if isinstance(data, tuple) else data
        h.update(f"{rel}\0{sha256_bytes(data)}\n".encode())
    return h.hexdigest()


def index_record(digests: dict[str, dict[str, str]], split_digest: str) -> dict:
    """The content of index.json: {split: {instance_id: task digest}} and how they are made."""
    return {
        "format": EXPORT_FORMAT,
        "harbor_schema_version": HARBOR_SCHEMA_VERSION,
        "split_digest": split_digest,
        "split_digest_scheme": DIGEST_SCHEME,
        "task_digest_scheme": TASK_DIGEST_SCHEME,
        "counts": {name: len(rows) for name, rows in sorted(digests.items())},
        "tasks": {name: dict(sorted(rows.items())) for name, rows in sorted(digests.items())},
    }


# -- I/O -----------------------------------------------------------------------------------

def read_snapshot(snapshot: RepoSnapshot) -> dict[str, tuple[bytes, int]]:
    """{relpath: (bytes, mode)} of a snapshot; executables keep +x (as the image build does)."""
    return {p.relative_to(snapshot.path).as_posix():
            (p.read_bytes(), EXECUTABLE if os.access(p, os.X_OK) else REGULAR)
            for p in snapshot_files(snapshot.path)}


def read_split(split_dir: Path) -> tuple[dict[str, list[dict]], list[Path], str | None]:
    """({split name: instances}, files read, the digest split.json states or None).

    The split names are split.json's when it exists, else the *.jsonl files' stems."""
    summary_path = split_dir / SPLIT_JSON
    stated = None
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        names = sorted(summary["instances"])
        stated = summary.get("digest")
    else:
        names = sorted(p.stem for p in split_dir.glob("*.jsonl"))
    if not names:
        raise ConfigError(f"{split_dir}: no split found (expected split.json and <split>.jsonl "
                          f"files written by `forgeline split`)")
    paths = [split_dir / f"{name}.jsonl" for name in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(f"{split_dir}: split file(s) missing: {', '.join(missing)}")
    split = {name: sorted(load_instances([path]), key=lambda i: i["instance_id"])
             for name, path in zip(names, paths)}
    return split, paths + ([summary_path] if summary_path.is_file() else []), stated


def _write_files(root: Path, files: dict[str, tuple[bytes, int]]) -> None:
    for rel, (data, mode) in files.items():
        path = root / rel
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        os.chmod(path, mode)


def _check_out_dir(out_dir: Path, allowed: set[str], protected: Iterable[Path]) -> None:
    """Refuse to replace a folder that holds more than an export (a typo must not wipe results/)."""
    resolved = out_dir.resolve()
    for path in protected:
        p = Path(path).resolve()
        if p == resolved or resolved in p.parents:
            raise ConfigError(f"--out-dir {out_dir} contains {path}; the export replaces its "
                              f"out-dir whole, so it must be a folder of its own")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in allowed)
        if foreign:
            raise ConfigError(f"refusing to replace {out_dir}: it holds {', '.join(foreign[:5])}, "
                              f"which `forgeline harbor` did not write")
    elif out_dir.exists():
        raise ConfigError(f"--out-dir {out_dir} exists and is not a folder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split-dir", required=True, type=Path,
                        help="the split: <split>.jsonl files and split.json (`forgeline split`)")
    parser.add_argument("--out-dir", required=True, type=Path,
                        help="replaced whole: <split>/<instance_id>/ task folders and index.json")
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--agent-timeout-sec", type=float, default=AGENT_TIMEOUT_S,
                        help=f"the agent's time limit in task.toml (default {AGENT_TIMEOUT_S:g})")
    parser.add_argument("--cache-dir", type=Path, default=images.DEFAULT_CACHE_DIR,
                        help="where the pinned wheels are cached, as for `forgeline image` "
                             f"(default: {images.DEFAULT_CACHE_DIR})")


def run(cfg, args: argparse.Namespace) -> None:
    repos_root = Path(cfg.repos.root)
    settings = settings_from_config(cfg.sandbox, args.agent_timeout_sec)
    params = {"repos.root": str(repos_root), "sandbox.test_timeout_s": settings.test_timeout_s,
              "sandbox.docker": {"cpus": settings.cpus, "memory_mb": settings.memory_mb,
                                 "base_image": base_spec(cfg.sandbox.docker.base_image)},
              "agent_timeout_sec": settings.agent_timeout_s}
    manifest = Manifest(stage="harbor", params=params, code=__name__)
    out_dir = Path(args.out_dir)
    with manifest.timed("read"):
        split, inputs, stated = read_split(Path(args.split_dir))
        split_digest = frozen_split_digest(split)
        if stated is not None and stated != split_digest:
            raise ConfigError(f"{args.split_dir}/{SPLIT_JSON} states digest {stated}, but its "
                              f"<split>.jsonl files give {split_digest}: the split folder was "
                              f"edited or is half-written; rerun `forgeline split`")
        repos = sorted({repo_key(inst["repo"]) for rows in split.values() for inst in rows})
        snapshots = {r: RepoSnapshot.load(repos_root, r) for r in repos}
        contents = {r: read_snapshot(s) for r, s in snapshots.items()}
    try:  # the image stage's wheels: the same pins, target, cache and sha256 checks
        with manifest.timed("wheels"):
            pins = {r: images.snapshot_lock(s.path) for r, s in snapshots.items()}
            target = images.wheel_target(base_spec(cfg.sandbox.docker.base_image)) if any(pins.values()) else {}
            wheels = {r: images.fetch_wheels(p, target, args.cache_dir) for r, p in pins.items()}
    except SandboxError as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    wheel_files = {r: images.wheel_entries(ws) if ws else [] for r, ws in wheels.items()}
    manifest.inputs = [*map(str, inputs), *(str(s.path) for s in snapshots.values()),
                       *(str(w.path) for ws in wheels.values() for w in ws)]
    allowed = set(split) | {INDEX_NAME, ".snakemake_timestamp"}  # Snakemake marks directory()
    if args.manifest.parent.resolve() == out_dir.resolve():
        allowed.add(args.manifest.name)
    _check_out_dir(out_dir, allowed, [Path(args.split_dir), repos_root, Path.cwd()])

    for rows in split.values():  # before anything is written
        for inst in rows:
            snap = snapshots[repo_key(inst["repo"])]
            if inst.get("base_commit") and inst["base_commit"] != snap.commit:
                raise ConfigError(
                    f"{inst['instance_id']}: made from {inst['repo']} at {inst['base_commit']}, "
                    f"but {snap.path} is now at {snap.commit}: the exported environment would "
                    f"not be the one the task was validated in; restore the snapshot or "
                    f"regenerate the tasks")
    source = grading_module_source()
    digests: dict[str, dict[str, str]] = {}

    def build(root: Path) -> None:
        """Render and write one task at a time (memory: one task), then index.json."""
        for name, rows in sorted(split.items()):
            digests[name] = {}
            (root / name).mkdir()
            for inst in rows:
                snap = snapshots[repo_key(inst["repo"])]
                files = task_files(inst, name, split_digest, contents[snap.name], snap.image,
                                   settings, source, wheel_files[snap.name],
                                   has_src_layout(snap.path))
                _write_files(root / name / inst["instance_id"], files)
                digests[name][inst["instance_id"]] = task_digest(files)
        with atomic_path(root / INDEX_NAME) as tmp:
            tmp.write_text(json.dumps(index_record(digests, split_digest), indent=2,
                                      sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")

    # replaced whole (an earlier export holds index.json); a killed job leaves the old tree
    with manifest.timed("export"), atomic_dir(out_dir, owned=(INDEX_NAME,)) as tmp:
        build(tmp)
    index = index_record(digests, split_digest)
    manifest.notes = {"split_digest": split_digest, "counts": index["counts"],
                      "index_sha256": sha256_bytes(canonical_json(index).encode())}
    manifest.write(args.manifest, outputs=[*(out_dir / n for n in sorted(split)),
                                           out_dir / INDEX_NAME])
    log.info("harbor: %s task folders under %s (split digest %s)",
             ", ".join(f"{n} {c}" for n, c in index["counts"].items()), out_dir, split_digest)
