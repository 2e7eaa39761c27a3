"""The verifier: grade an agent's change the way SWE-bench does, so nothing the agent writes
besides the package's own source code can change the verdict.

The agent's diff is split per file and only regular source files of the package survive
(`admissible`): edits to tests, conftest.py, pytest/tox/setup configuration, reward or log
files, sitecustomize/usercustomize, .pth files, new top-level modules or packages (a `pytest.py` in
/testbed would shadow pytest; in a src/ layout src/ is an import root too, so a new src/pytest.py
or src/newpkg/ as well), symlinks, binary patches and anything under a dot-directory are stripped.
A new module inside an existing package, `pkg/` or `src/pkg/`, stays.
The tests then run in a FRESH environment from the image: the bug patch, then the filtered diff.

What this does not stop: code in the package itself runs inside the pytest process, so a
deliberately adversarial fix could tamper with pytest from within (SWE-bench shares this limit).
Works with any Sandbox backend.

`Verdicts` keeps the verdicts of one job by what was graded: once validation has dropped the
flaky tests (tasks.validate.gold_runs), a verdict is a function of the environment, the bug
patch, the filtered diff and the tests, so an episode that submits a filtered diff another one
of the job already submitted (most often the empty one: an episode that changed nothing) gets
that verdict without a second test run, marked `cached`. Timed-out runs are never reused.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path, PurePosixPath
from typing import Sequence

from forgeline.sandbox.base import PatchError, Sandbox, TaskEnv
from forgeline.sandbox.grading import grade, is_test_path
from forgeline.sandbox.snapshot import import_parts, snapshot_files

# Modules Python or pytest import by name from sys.path: never accepted from an agent.
FORBIDDEN_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py",
                             "__main__.py"})
_HEADER = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")
_HUNK = re.compile(r"^@@ -\d+(?:,(?P<old>\d+))? \+\d+(?:,(?P<new>\d+))? @@")
_HEADER_LINES = ("index ", "new file mode ", "deleted file mode ", "old mode ", "new mode ",
                 "similarity index ", "dissimilarity index ", "rename from ", "rename to ",
                 "copy from ", "copy to ", "--- ", "+++ ", "GIT binary patch", "Binary files ")


def split_diff(diff: str) -> list[list[str]]:
    """A git diff cut into the lines of each file's part (each starts with `diff --git`); any
    text before the first header is returned as a part of its own (and will be rejected)."""
    parts: list[list[str]] = []
    # split on "\n" only: str.splitlines() would also cut at \r, \f, ... inside a line
    pieces = diff.split("\n")
    lines = [p + "\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    for line in lines:
        if line.startswith("diff --git ") or not parts:
            parts.append([line])
        else:
            parts[-1].append(line)
    return parts


def file_names(lines: list[str]) -> tuple[set[str], str | None]:
    """(every path one file's part of a diff touches, None) or (set(), why it is malformed).

    Strict on purpose: `git apply` treats a `--- a/x` / `+++ b/x` pair after a complete hunk as
    the start of another file, so a part must be exactly a header and well-counted hunks."""
    m = _HEADER.match(lines[0].rstrip("\n"))
    if not m:
        return set(), "unreadable diff header"
    names = {m.group("a"), m.group("b")}
    i, n = 1, len(lines)
    while i < n and not lines[i].startswith("@@"):
        line = lines[i].rstrip("\n")
        if not line.startswith(_HEADER_LINES):
            return set(), "unexpected line in a diff header"
        if line.startswith(("--- ", "+++ ")):
            name = line[4:]
            if name != "/dev/null":
                names.add(name[2:] if name.startswith(("a/", "b/")) else name)
        elif line.startswith(("rename ", "copy ")):
            names.add(line.split(" ", 2)[2])
        i += 1
    while i < n:
        h = _HUNK.match(lines[i])
        if not h:
            return set(), "unexpected line after a hunk"
        old, new = int(h.group("old") or 1), int(h.group("new") or 1)
        i += 1
        while old > 0 or new > 0:
            if i >= n:
                return set(), "truncated hunk"
            c = lines[i][:1]
            if c in (" ", "\n"):
                old, new = old - 1, new - 1
            elif c == "-":
                old -= 1
            elif c == "+":
                new -= 1
            elif c != "\\":
                return set(), "malformed hunk"
            if old < 0 or new < 0:
                return set(), "malformed hunk"
            i += 1
        while i < n and lines[i].startswith("\\"):  # "\ No newline at end of file"
            i += 1
    return names, None


def top_level_name(parts: Sequence[str]) -> tuple[str, bool]:
    """(the snapshot path of the top-level name a path imports under, whether the path lies inside
    it), a path given by its parts: 'pkg/m.py' -> ('pkg', True), 'src/pkg/m.py' -> ('src/pkg', True),
    'src/pytest.py' -> ('src/pytest.py', False). The import root, the snapshot's root or its src/,
    is snapshot.import_parts' rule; a path under src/ can name a package only where the snapshot
    has a src/ folder (snapshot.src_layout), so a flat layout's packages are what they always were."""
    depth = len(parts) - len(import_parts(parts)) + 1  # 1 at the root, 2 under src/
    return "/".join(parts[:depth]), len(parts) > depth


def package_layout(source: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(top-level package directories, every file path) of a snapshot, as posix strings: a package
    is a folder with an __init__.py at an import root (snapshot.import_parts, as `top_level_name`):
    `pkg` at the root, `src/pkg` in a src/ layout."""
    files = [p.relative_to(source).as_posix() for p in snapshot_files(source)]
    packages = {f.rsplit("/", 1)[0] for f in files if import_parts(f.split("/"))[1:] == ("__init__.py",)}
    return frozenset(packages), frozenset(files)


def admissible(path: str, packages: frozenset[str], files: frozenset[str]) -> str | None:
    """None if `path` is a regular source file of the package; else why it is stripped."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return "path leaves the repository"
    if any(part.startswith(".") for part in p.parts):
        return "hidden file or directory"
    if p.suffix != ".py":
        return "not a Python source file"
    if is_test_path(path):
        return "test or test configuration"
    if p.name in FORBIDDEN_NAMES:
        return f"{p.name} is imported by the interpreter or pytest"
    top, inside = top_level_name(p.parts)
    if path in files or inside and top in packages:
        return None
    return "new module outside the package (could shadow an import)"


def filter_agent_diff(diff: str, source: Path) -> tuple[str, list[dict]]:
    """(the diff with only admissible files, [{path, reason}] of what was stripped)."""
    packages, files = package_layout(Path(source))
    kept, stripped = [], []
    for lines in split_diff(diff):
        text = "".join(lines)
        names, bad = file_names(lines)
        reasons = [bad] if bad else []
        for name in sorted(names):
            why = admissible(name, packages, files)
            if why:
                reasons.append(why)
        if re.search(r"^(new file mode|new mode|deleted file mode|old mode) 120000", text, re.M):
            reasons.append("symbolic link")
        if re.search(r"^GIT binary patch$|^Binary files ", text, re.M):
            reasons.append("binary patch")
        if reasons:
            label = " -> ".join(sorted(names)) if names else lines[0].rstrip("\n")[:200]
            stripped.append({"path": label, "reason": "; ".join(dict.fromkeys(reasons))})
        else:
            kept.append(text)
    return "".join(kept), stripped


def gold_fix(bug_patch: str) -> str:
    """The gold fix of a task: its bug patch reversed, as a diff the verifier grades like any
    agent's (the bug patch is applied first). Each file's names, modes and hunks are swapped."""
    swap_prefix = {"--- ": "+++ ", "+++ ": "--- ", "new file mode ": "deleted file mode ",
                   "deleted file mode ": "new file mode ", "rename from ": "rename to ",
                   "rename to ": "rename from ", "old mode ": "new mode ", "new mode ": "old mode "}
    out: list[str] = []
    for lines in split_diff(bug_patch):
        header, hunks, files = [], [], {}
        m = _HEADER.match(lines[0].rstrip("\n"))
        if m:
            header.append(f"diff --git a/{m.group('b')} b/{m.group('a')}\n")
        rest = lines[1:] if m else lines
        in_hunk = False
        for line in rest:
            h = re.match(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$", line.rstrip("\n"))
            if h:
                in_hunk = True
                hunks.append(f"@@ -{h.group(2)} +{h.group(1)} @@{h.group(3)}\n")
            elif in_hunk:
                mark = line[:1]
                hunks.append({"-": "+", "+": "-"}.get(mark, mark) + line[1:])
            elif line.startswith("index "):
                continue  # blob ids are optional for a text patch
            else:
                prefix = next((k for k in swap_prefix if line.startswith(k)), None)
                if prefix in ("--- ", "+++ "):
                    name = line[4:].rstrip("\n")
                    files[swap_prefix[prefix]] = ("a/" + name[2:] if name.startswith("b/") else
                                                  "b/" + name[2:] if name.startswith("a/") else name)
                elif prefix:
                    header.append(swap_prefix[prefix] + line[len(prefix):])
                else:
                    header.append(line)
        header += [f"{k}{files[k]}\n" for k in ("--- ", "+++ ") if k in files]
        out.append("".join(header + hunks))
    return "".join(out)


class Verdicts:
    """The test-run part of verdicts, by sha256 of (image, snapshot, bug patch, filtered diff,
    FAIL_TO_PASS, PASS_TO_PASS, time limit); thread-safe: episodes that end together wait for the one run of theirs."""

    def __init__(self) -> None:
        self._runs: dict[str, dict] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(env: TaskEnv, bug_patch: str, kept: str, fail_to_pass: Sequence[str],
            pass_to_pass: Sequence[str], timeout_s: float) -> str:
        what = [env.repo, env.commit, env.image, bug_patch, kept, sorted(fail_to_pass), sorted(pass_to_pass),
                float(timeout_s)]
        return hashlib.sha256(json.dumps(what).encode("utf-8", "surrogateescape")).hexdigest()

    def lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: str) -> dict | None:
        run = self._runs.get(key)
        return None if run is None else {**run, "duration_s": 0.0, "cached": True}

    def put(self, key: str, run: dict) -> None:
        if not run.get("timed_out"):
            self._runs[key] = dict(run)


def verify(sandbox: Sandbox, env: TaskEnv, bug_patch: str, agent_diff: str,
           fail_to_pass: Sequence[str], pass_to_pass: Sequence[str], timeout_s: float = 120.0,
           verdicts: Verdicts | None = None) -> dict:
    """Grade `agent_diff` for the task (env + bug_patch) in a fresh environment.

    Returns grading.grade(...) plus: stripped ([{path, reason}]), applied (bool: the filtered
    diff applied), timed_out, exit_code, duration_s, and cached (True) where `verdicts` already
    held the run. A filtered diff that does not apply is unresolved (not an error); a bug patch
    that does not apply raises PatchError."""
    kept, stripped = filter_agent_diff(agent_diff, env.source)
    tests = sorted(set(fail_to_pass) | set(pass_to_pass))
    if verdicts is None:
        return {**_graded_run(sandbox, env, bug_patch, kept, fail_to_pass, pass_to_pass, tests, timeout_s),
                "stripped": stripped}
    key = Verdicts.key(env, bug_patch, kept, fail_to_pass, pass_to_pass, timeout_s)
    with verdicts.lock(key):
        run = verdicts.get(key)
        if run is None:
            run = _graded_run(sandbox, env, bug_patch, kept, fail_to_pass, pass_to_pass, tests, timeout_s)
            verdicts.put(key, run)
    return {**run, "stripped": stripped}


def _graded_run(sandbox: Sandbox, env: TaskEnv, bug_patch: str, kept: str, fail_to_pass: Sequence[str],
                pass_to_pass: Sequence[str], tests: Sequence[str], timeout_s: float) -> dict:
    try:
        run = sandbox.run_tests(env, [bug_patch, kept], tests=tests, timeout_s=timeout_s)
    except PatchError as exc:
        if exc.index == 0:
            raise
        result = grade({}, fail_to_pass, pass_to_pass)
        result.update(applied=False, timed_out=False, exit_code=None, duration_s=0.0, error=str(exc))
        return result
    result = grade(run.statuses, fail_to_pass, pass_to_pass)
    result.update(applied=True, timed_out=run.timed_out, exit_code=run.exit_code, duration_s=run.duration_s)
    return result
