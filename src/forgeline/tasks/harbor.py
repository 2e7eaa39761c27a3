"""Export the frozen split as Harbor tasks: one self-contained task folder per instance.

Stage `forgeline harbor --split-dir results/split --out-dir results/harbor --manifest
results/harbor/manifest.json` writes, for every task of the split, `OUT/<split>/<instance_id>/`:

    instruction.md           the problem statement, and where the repository is (/testbed)
    task.toml                Harbor's task config (schema 1.4, as harbor 0.25.0's TaskConfig reads it)
    environment/Dockerfile   the repository snapshot at /testbed with the bug applied; builds
    environment/bug.patch    from public Debian packages, no forgeline image or registry needed
    environment/repo/...     the snapshot's files
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
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from forgeline.config import ConfigError
from forgeline.provenance import Manifest, atomic_path, canonical_json, sha256_bytes
from forgeline.sandbox import grading
from forgeline.sandbox.grading import is_test_path
from forgeline.sandbox.images import base_spec
from forgeline.sandbox.verify import FORBIDDEN_NAMES, file_names, split_diff
from forgeline.tasks.repos import RepoSnapshot, snapshot_files
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

DOCKERFILE = """\
# Environment of the forgeline task {instance_id} (written by `forgeline harbor`).
# The snapshot of {repo} (commit {commit}) under /testbed with the task's bug applied: a git
# repository with ONE baseline commit of the bugged tree, so `git diff` shows the agent's changes
# and the history does not show the bug. Mirrors envs/repo.Dockerfile. Needs python3 with
# pytest, git, bash: taken from BASE_IMAGE when it has them (no network needed), else installed
# from Debian ({packages}).
ARG BASE_IMAGE={base_image}
FROM ${{BASE_IMAGE}}

ENV PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \\
    PYTHONDONTWRITEBYTECODE=1 \\
    PYTHONHASHSEED=0 \\
    PYTHONUNBUFFERED=1 \\
    TZ=UTC \\
    LC_ALL=C.UTF-8

COPY repo/ /testbed/
COPY bug.patch /tmp/forgeline-bug.patch

RUN set -eu; \\
    if ! {{ command -v git && python3 -m pytest --version; }} >/dev/null 2>&1; then \\
        apt-get update; \\
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages}; \\
        rm -rf /var/lib/apt/lists/*; \\
    fi; \\
    if ! getent passwd {user} >/dev/null; then \\
        echo '{user}:x:{uid}:{uid}:forgeline sandbox user:/home/{user}:/bin/bash' >> /etc/passwd; \\
        echo '{user}:x:{uid}:' >> /etc/group; \\
    fi; \\
    mkdir -p /home/{user}; chown {uid}:{uid} /home/{user}; \\
    cd /testbed; \\
    git apply /tmp/forgeline-bug.patch; \\
    rm -f /tmp/forgeline-bug.patch; \\
    export GIT_AUTHOR_NAME=forgeline GIT_AUTHOR_EMAIL=forgeline@localhost \\
           GIT_COMMITTER_NAME=forgeline GIT_COMMITTER_EMAIL=forgeline@localhost \\
           GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z; \\
    git -c init.defaultBranch=main init -q; \\
    git add -A; \\
    git -c commit.gpgsign=false commit -q -m baseline --allow-empty; \\
    chown -R {uid}:{uid} /testbed; \\
    printf '%s\\n' '{marker}' > {marker_path}; \\
    python3 -m pytest --version >/dev/null 2>&1 || {{ echo 'the image lacks pytest' >&2; exit 1; }}

WORKDIR /testbed
"""

SOLVE_SH = """\
#!/bin/bash
# Oracle of the forgeline task {instance_id} (written by `forgeline harbor`): the fix is the
# bug patch reversed. TESTBED (default /testbed) is where the repository is.
set -euo pipefail
TESTBED="${{TESTBED:-/testbed}}"
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
cd "$TESTBED"
git -c safe.directory='*' apply -R "$here/bug.patch"
"""

TEST_SH = """\
#!/bin/bash
# Verifier of the forgeline task {instance_id} (written by `forgeline harbor`).
# Grades the repository at TESTBED (default /testbed) the SWE-bench way with grade.py and writes
# the reward, 1 or 0, to LOGS_DIR/verifier/reward.txt (LOGS_DIR default /logs). A reward file
# that exists before the tests ran is never trusted: it is removed first, and the reward is
# written here, after the tests, whatever happened to them (no verdict = 0).
# FORGELINE_PYTHON: the python with pytest (default python3).
set -u
TESTBED="${{TESTBED:-/testbed}}"
LOGS_DIR="${{LOGS_DIR:-/logs}}"
PYTHON="${{FORGELINE_PYTHON:-python3}}"
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
out="$LOGS_DIR/verifier"
mkdir -p "$out"
rm -f -- "$out/reward.txt" "$out/reward.json"
if "$PYTHON" "$here/grade.py" --testbed "$TESTBED" --config "$here/config.json" \\
        --report "$out/report.json"; then
    reward=1
else
    reward=0
fi
# Harbor reads reward.json before reward.txt: only this script's reward.txt may be there.
rm -f -- "$out/reward.json" "$out/reward.txt"
printf '%s\\n' "$reward" > "$out/reward.txt.$$"
mv -f -- "$out/reward.txt.$$" "$out/reward.txt"
echo "forgeline verifier: reward $reward"
exit 0
"""

GRADE_PY = '''\
"""Grade one forgeline task the SWE-bench way (written by `forgeline harbor`; run by test.sh).

1. Tidy the repository: put back the test and test-configuration files shipped in original/
   (what the agent did to them does not count), remove what the agent added that could change
   how pytest runs (new test files, conftest.py, pytest.ini/tox.ini/setup.cfg/pyproject.toml,
   sitecustomize.py, *.pth, new top-level modules or packages, dot-directories, symlinks,
   __pycache__).
2. Run the FAIL_TO_PASS and PASS_TO_PASS tests with pytest, with a clean environment and a time
   limit. Inside a forgeline task image, as root: as the unprivileged sandbox user, and every
   process of that user (the agent's leftovers, anything the tests started) is killed before
   and after, so nothing can write a reward after the verdict.
3. Grade with forgeline.sandbox.grading (shipped beside this file, verbatim): the verdicts come
   from pytest's own reports (its RUNNER plugin), and resolved iff every FAIL_TO_PASS and
   PASS_TO_PASS test PASSED or XFAILed.

Writes the report (JSON) to --report; exit status 0 iff resolved, 1 if not, 2 on an error.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import forgeline_grading as grading  # noqa: E402

MARKER = Path("__MARKER__")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sandbox_user():
    """(uid, gid, home) to run the tests as: only as root inside a forgeline task image."""
    if os.geteuid() != 0 or not MARKER.is_file():
        return None
    info = json.loads(MARKER.read_text())
    return int(info["uid"]), int(info["gid"]), info["home"]


def kill_user(user):
    """SIGKILL every process of the sandbox user (kill(-1) from a process of that uid)."""
    if user is None:
        return
    code = "import os, signal\\ntry:\\n    os.kill(-1, signal.SIGKILL)\\nexcept ProcessLookupError:\\n    pass\\n"
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code], user=user[0], group=user[1],
                       extra_groups=[], env={"PATH": PATH}, check=False)


def admissible_new(rel, tops, forbidden):
    """May a file the agent ADDED stay for the test run?"""
    parts = rel.split("/")
    return not (grading.is_test_path(rel) or parts[-1] in forbidden or rel.endswith(".pth")
                or parts[0] not in tops or any(p.startswith(".") for p in parts))


def tidy(testbed, cfg):
    """Restore original/ into testbed and remove inadmissible additions; returns what changed."""
    baseline = set(cfg["baseline_files"])
    restore = set(cfg["restore"])
    forbidden = set(cfg["forbidden_names"])
    tops = {rel.split("/")[0] for rel in baseline}
    base_dirs = {"/".join(rel.split("/")[:i]) for rel in baseline for i in range(1, rel.count("/") + 1)}
    removed = []
    for dirpath, dirnames, filenames in os.walk(testbed):
        rel_dir = os.path.relpath(dirpath, testbed).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for name in sorted(dirnames):
            rel, full = rel_dir + name, os.path.join(dirpath, name)
            if rel == ".git" and not os.path.islink(full):
                continue  # git metadata: pytest never reads it
            if os.path.islink(full):
                os.unlink(full)
            elif name == "__pycache__" or (rel not in base_dirs and (
                    name.startswith(".") or not rel_dir and name not in tops)):
                shutil.rmtree(full)
            else:
                keep.append(name)
                continue
            removed.append(rel + "/")
        dirnames[:] = keep
        for name in sorted(filenames):
            rel, full = rel_dir + name, os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                os.unlink(full)
                removed.append(rel)
            elif rel not in baseline and not admissible_new(rel, tops, forbidden):
                os.unlink(full)
                removed.append(rel)
    restored = []
    for rel in sorted(restore):
        target = Path(testbed, rel)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "original" / rel, target)
        restored.append(rel)
    return sorted(removed), restored


def run_tests(testbed, tests, timeout_s, user):
    """(pytest output, per-test results, exit code, timed out) of the given tests, in a clean
    environment."""
    env = {"PATH": os.environ.get("PATH", PATH), "HOME": user[2] if user else os.environ.get("HOME", "/tmp"),
           "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    extra = dict(user=user[0], group=user[1], extra_groups=[]) if user else {}
    scratch = tempfile.mkdtemp(prefix="forgeline-grade-")
    os.chmod(scratch, 0o777)  # the sandbox user writes the results there
    results = os.path.join(scratch, "results.jsonl")
    cmd = grading.pytest_command(tests, results, python=sys.executable)
    proc = subprocess.Popen(cmd, cwd=testbed, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, **extra)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    try:
        found = grading.parse_results(Path(results).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        found = grading.Results()
    shutil.rmtree(scratch, ignore_errors=True)
    return out.decode("utf-8", "replace"), found, proc.returncode, timed_out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testbed", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text(encoding="utf-8"))
    user = sandbox_user()
    kill_user(user)
    t0 = time.monotonic()
    removed, restored = tidy(args.testbed, cfg)
    f2p, p2p = cfg["fail_to_pass"], cfg["pass_to_pass"]
    tests = sorted(set(f2p) | set(p2p))
    log, found, code, timed_out = run_tests(args.testbed, tests, cfg["test_timeout_s"], user)
    kill_user(user)
    print(log)
    result = grading.grade(found.statuses, f2p, p2p)
    if timed_out:
        result["resolved"] = False
    report = {"instance_id": cfg["instance_id"], **result, "timed_out": timed_out,
              "pytest_exit_code": code, "removed": removed, "restored": restored,
              "sandbox_user": user is not None, "seconds": round(time.monotonic() - t0, 3)}
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True) + "\\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("resolved", "fail_to_pass", "pass_to_pass", "failing")},
                     sort_keys=True))
    return 0 if report["resolved"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # no verdict: test.sh writes 0
        print(f"forgeline grade.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
'''

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


def settings_from_config(sandbox: dict, agent_timeout_s: float = AGENT_TIMEOUT_S) -> ExportSettings:
    """ExportSettings from the `sandbox` section of the config.

    The Dockerfile's default base: the pulled base image by digest (base_image.source: pull),
    else Debian's `<suite>-slim` image plus the same Debian packages the mmdebstrap base has.
    """
    docker = (sandbox or {}).get("docker") or {}
    spec = base_spec(docker.get("base_image"))
    base = spec["ref"] if spec["source"] == "pull" else f"debian:{spec['suite']}-slim"
    cpus = docker.get("cpus", 1.0)
    if isinstance(cpus, float) and cpus.is_integer():
        cpus = int(cpus)  # Harbor normalises 1.0 to 1 too
    return ExportSettings(cpus=cpus, memory_mb=int(docker.get("memory_mb", 1024)),
                          test_timeout_s=float(sandbox.get("test_timeout_s", 120)),
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


def task_files(instance: dict, split_name: str, split_digest: str,
               snapshot: dict[str, tuple[bytes, int]], repo_image: str,
               settings: ExportSettings, grading_source: str) -> dict[str, tuple[bytes, int]]:
    """Every file of one task folder: {relpath: (bytes, mode)}.

    Inputs: the instance (normalised), its split's name and semantic digest, the repository
    snapshot as {relpath: (bytes, mode)}, the per-repository image tag (metadata only), the
    settings, and the source of forgeline.sandbox.grading. Raises ValueError when the task
    cannot be exported faithfully (unsafe id, a patch that touches test files, a snapshot file
    Harbor would drop).
    """
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
        "environment/Dockerfile": (DOCKERFILE.format(
            instance_id=iid, repo=instance["repo"], commit=instance.get("base_commit") or "?",
            base_image=settings.base_image, packages=" ".join(settings.packages),
            user=SANDBOX_USER, uid=SANDBOX_UID, marker=marker,
            marker_path=ENV_MARKER).encode("utf-8"), REGULAR),
        "environment/bug.patch": (patch_bytes, REGULAR),
        "solution/solve.sh": (SOLVE_SH.format(instance_id=iid).encode("utf-8"), EXECUTABLE),
        "solution/bug.patch": (patch_bytes, REGULAR),
        "tests/test.sh": (TEST_SH.format(instance_id=iid).encode("utf-8"), EXECUTABLE),
        "tests/grade.py": (GRADE_PY.replace("__MARKER__", ENV_MARKER).encode("utf-8"), REGULAR),
        "tests/forgeline_grading.py": (grading_source.encode("utf-8"), REGULAR),
        "tests/config.json": ((json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False)
                               + "\n").encode("utf-8"), REGULAR),
    }
    for rel, (data, mode) in snapshot.items():
        files[f"environment/repo/{rel}"] = (data, mode)
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


def replace_dir(out_dir: Path, build) -> None:
    """Build a tree with build(tmp) in a temp sibling of out_dir, then swap it in whole.

    A killed job leaves the old tree (or, between the two renames, no tree and a
    `.<name>.old-*` sibling), never a half-written one; leftovers of killed runs are removed."""
    parent, name = out_dir.parent, out_dir.name
    parent.mkdir(parents=True, exist_ok=True)
    for stale in sorted(parent.glob(f".{name}.tmp-*")) + sorted(parent.glob(f".{name}.old-*")):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent))
    old = None
    try:
        os.chmod(tmp, 0o755)
        build(tmp)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent))
            os.rmdir(old)
            os.rename(out_dir, old)
        os.rename(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split-dir", required=True, type=Path,
                        help="the split: <split>.jsonl files and split.json (`forgeline split`)")
    parser.add_argument("--out-dir", required=True, type=Path,
                        help="replaced whole: <split>/<instance_id>/ task folders and index.json")
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--agent-timeout-sec", type=float, default=AGENT_TIMEOUT_S,
                        help=f"the agent's time limit in task.toml (default {AGENT_TIMEOUT_S:g})")


def run(cfg, args: argparse.Namespace) -> None:
    repos_root = Path(cfg.section("repos.root"))
    sandbox = cfg.section("sandbox")
    settings = settings_from_config(sandbox, args.agent_timeout_sec)
    params = {"repos.root": str(repos_root), "sandbox.test_timeout_s": settings.test_timeout_s,
              "sandbox.docker": {"cpus": settings.cpus, "memory_mb": settings.memory_mb,
                                 "base_image": base_spec(((sandbox or {}).get("docker") or {})
                                                         .get("base_image"))},
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
    manifest.inputs = [*map(str, inputs), *(str(s.path) for s in snapshots.values())]
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
                                   settings, source)
                _write_files(root / name / inst["instance_id"], files)
                digests[name][inst["instance_id"]] = task_digest(files)
        with atomic_path(root / INDEX_NAME) as tmp:
            tmp.write_text(json.dumps(index_record(digests, split_digest), indent=2,
                                      sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")

    with manifest.timed("export"):
        replace_dir(out_dir, build)
    index = index_record(digests, split_digest)
    manifest.notes = {"split_digest": split_digest, "counts": index["counts"],
                      "index_sha256": sha256_bytes(canonical_json(index).encode())}
    manifest.write(args.manifest, outputs=[*(out_dir / n for n in sorted(split)),
                                           out_dir / INDEX_NAME])
    log.info("harbor: %s task folders under %s (split digest %s)",
             ", ".join(f"{n} {c}" for n, c in index["counts"].items()), out_dir, split_digest)
