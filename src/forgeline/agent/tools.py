"""The agent's tools as the policy sees them, and what their outputs look like to it.

Tools (short schemas: every prompt pays for them):

- `bash(command)`: one command in the task's session (per-command time limit);
- `edit(path, old, new[, line])`: replace the single occurrence of `old` in `path` (or, with
  `line`, its occurrence in the nearest line that holds it once), done inside the sandbox by a
  small `python3 -c` script (`EDIT_SCRIPT`) that reads its arguments, base64-encoded, from a
  heredoc (no shell quoting of model text anywhere); `apply_edit` is its pure twin;
- `submit()`: end the episode; the repository as it is now is the answer.

Also here: the system and user prompts, the message for a turn without a tool call, and the
reading of tool outputs (`truncate`, `normalize_pytest`, `looks_like_error`, `f2p_passing`).
Plain data in, plain data out: the episode runner (`forgeline.agent.episode`) executes the
calls, and the SFT data generator writes trajectories in the same words without a sandbox.
"""
from __future__ import annotations

import base64
import json
import re
import shlex
from typing import Any, Mapping, Sequence

IM_END = "<|im_end|>"


def _schema(name: str, description: str, params: Sequence[str],
            optional: Mapping[str, str] | None = None) -> dict:
    """A function schema: `params` are required strings, `optional` maps name -> JSON type."""
    props = {p: {"type": "string"} for p in params} | {k: {"type": t} for k, t in (optional or {}).items()}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props, "required": list(params)}}}


# Short on purpose: the schemas are in every prompt. With the 4096-token tiny vocabulary the
# three cost ~255 tokens (policy.chat's longer ones: ~395; most of it is the JSON structure),
# and the whole first prompt is ~415 tokens plus the problem statement.
AGENT_TOOLS: dict[str, dict] = {
    "bash": _schema("bash", "Run a bash command in the repository root.", ["command"]),
    # `line` says where, so a fix can name just the changed tokens (`"line": 42, "old": "<",
    # "new": "<="`) instead of copying a unique stretch of the file.
    "edit": _schema("edit", "Replace the one occurrence of old with new in the file path "
                            "(with line: in the nearest line that holds it).", ["path", "old", "new"],
                    {"line": "integer"}),
    "submit": _schema("submit", "Submit the repository as your fix.", []),
}
SYSTEM_PROMPT = ("Fix the bug described by the user in the Python repository in the current "
                 "directory. Call one tool per turn. Call submit when the fix is done.")
NO_CALL_MESSAGE = "No tool call found. Call one tool per turn, e.g. bash, or submit when done."


def tool_schemas(names: Sequence[str]) -> list[dict]:
    """The schemas of the named tools, in the order given."""
    return [AGENT_TOOLS[n] for n in names]


def system_prompt(task: Mapping[str, Any]) -> str:
    return SYSTEM_PROMPT


def user_prompt(task: Mapping[str, Any]) -> str:
    """The first user message: the task's problem statement."""
    return task["problem_statement"].strip()


# Reads {"path", "old", "new"[, "line"]} as base64 JSON on stdin; no single quote inside
# (it is shell-quoted). Mirrors `apply_edit`.
# A path that names no file but whose file name is that of exactly one file of the repository
# means that file (`./expression.py` for `./cronparse/expression.py`), and the answer says so:
# the folder is what a small policy drops when it copies a path from grep's output.
# An edit that changes nothing leaves the file alone: a rewrite with the same text would make
# `git checkout .` say "Updated 1 path" or "0 paths" by whether it fell in the index's second.
EDIT_SCRIPT = """import base64,json,os,sys
a=json.loads(base64.b64decode(sys.stdin.read()).decode("utf-8"))
p,o,n,l=a["path"],a["old"],a["new"],a.get("line")
q=p
if not os.path.exists(q):
    b=os.path.basename(q)
    F=[os.path.join(d,b) for d,D,N in os.walk(".") if b in N and ".git" not in d.split(os.sep)]
    if b and len(F)==1:
        q=p=F[0]
try:
    f=open(q,encoding="utf-8",newline="");s=s0=f.read();f.close()
except (OSError,UnicodeError) as e:
    print("edit failed: cannot read %s (%s)"%(p,type(e).__name__));sys.exit(1)
if l is None:
    k=s.count(o) if o else 0
    if k!=1:
        print("edit failed: old occurs %d times in %s; it must occur exactly once"%(k,p));sys.exit(1)
    s=s.replace(o,n,1)
else:
    L=s.splitlines(True)
    if not 1<=l<=len(L):
        print("edit failed: %s has %d lines, no line %d"%(p,len(L),l));sys.exit(1)
    C=[i for i in range(len(L)) if o and L[i].count(o)==1]
    if not C:
        print("edit failed: no line of %s holds old exactly once"%p);sys.exit(1)
    i=min(C,key=lambda i:(abs(i+1-l),i))
    L[i]=L[i].replace(o,n,1);s="".join(L)
    if i+1!=l:
        p="%s at line %d"%(p,i+1)
if s!=s0:
    f=open(q,"w",encoding="utf-8",newline="");f.write(s);f.close()
print("edited %s"%p)
"""
assert "'" not in EDIT_SCRIPT


def edit_command(path: str, old: str, new: str, line: int | None = None) -> str:
    """The bash command that performs an `edit` call inside the sandbox."""
    args: dict[str, Any] = {"path": path, "old": old, "new": new}
    if line is not None:
        args["line"] = int(line)
    payload = base64.b64encode(json.dumps(args).encode()).decode()
    return f"python3 -c {shlex.quote(EDIT_SCRIPT)} <<'FORGELINE_EDIT'\n{payload}\nFORGELINE_EDIT"


def apply_edit(text: str, old: str, new: str, line: int | None = None) -> str | None:
    """Pure twin of EDIT_SCRIPT: `text` after the edit, or None where the edit would fail.
    Without `line`, `old` must occur exactly once in the file. With it, the replacement is
    made in the line nearest to `line` (the earlier of two equally near) among those that hold
    `old` exactly once: a policy names the token it changes and about where, and the line
    number need not be exact."""
    if line is None:
        return text.replace(old, new, 1) if old and text.count(old) == 1 else None
    lines = text.splitlines(True)
    holding = [i for i, ln in enumerate(lines) if old and ln.count(old) == 1]
    if not 1 <= line <= len(lines) or not holding:
        return None
    i = min(holding, key=lambda i: (abs(i + 1 - line), i))
    lines[i] = lines[i].replace(old, new, 1)
    return "".join(lines)


def truncate(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters: head and tail kept, the middle replaced by a note."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


_DURATION = re.compile(
    r"((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)"
    r"|no tests ran)[^\n]*?) in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?")


_PROGRESS = re.compile(r"^([.FEsxX]+) {2,}(\[\s*\d+%\])$", re.MULTILINE)


def normalize_pytest(text: str) -> str:
    """Two edits to pytest's output: its run time is dropped from the summary line ('2 passed
    in 0.03s' -> '2 passed'): the only machine-dependent text in a typical tool output, it would
    make episodes with the same seed diverge; and the padding of a progress line
    ('..<70 spaces>[100%]' -> '.. [100%]'), which costs the tiny model's context ~70 tokens."""
    return _PROGRESS.sub(r"\1 \2", _DURATION.sub(r"\1", text))


_ERROR = re.compile(r"Traceback \(most recent call last\)|^\s*[\w.]*(?:Error|Exception)(?::|$)"
                    r"|command not found|No such file or directory|^(?:[Ee]rror|ERROR|fatal):",
                    re.MULTILINE)


def looks_like_error(output: str) -> bool:
    """True if a tool output shows an error: a Python traceback, a line starting with
    `SomeError:`/`SomeException:`, `command not found`, `No such file or directory`, or an
    `error:`/`fatal:` line (git, compilers). Failing tests are not errors (pytest's `E   `
    lines do not count): `tests_improved` reads those."""
    return bool(_ERROR.search(output))


# -- tests_improved: reading the agent's own pytest runs ----------------------------------

_PYTEST_SUMMARY = re.compile(r"^(?:=+ )?(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|"
                             r"deselected|warnings?)[^\n]*|no tests ran[^\n]*)$", re.MULTILINE)
_PYTEST_STATUS = re.compile(r"^(?:(?P<id1>\S+::\S+) (?P<st1>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
                            r"|(?P<st2>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (?P<id2>\S+::\S+?))"
                            r"(?:\s.*)?$", re.MULTILINE)


def _selects(path: str, test: str) -> bool:
    path = path.rstrip("/")
    return test == path or test.startswith(path + "::") or test.startswith(path + "/")


def f2p_passing(command: str, output: str, fail_to_pass: Sequence[str]) -> int | None:
    """How many FAIL_TO_PASS tests an agent's own pytest run shows passing, or None if `output`
    is not a pytest run (no pytest summary line) or `command` does not call pytest.

    A test counts when its node id is reported PASSED/XFAIL (-v, -rA), or when it was selected
    (no path argument, or an argument that is a prefix of its node id), is not reported as
    failing, the summary reports passes, and the run was not cut short (-x, --maxfail, -k).
    A heuristic: it reads the output the agent saw, it never runs anything.
    """
    if "pytest" not in command or not _PYTEST_SUMMARY.search(output):
        return None
    reported: dict[str, str] = {}
    for m in _PYTEST_STATUS.finditer(output):
        tid, st = (m.group("id1"), m.group("st1")) if m.group("id1") else (m.group("id2"), m.group("st2"))
        if st in ("FAILED", "ERROR") or tid not in reported:
            reported[tid] = st
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    after = words[next(i for i, w in enumerate(words) if "pytest" in w) + 1:]
    cut_short = any(w in ("-x", "--exitfirst", "-k") or w.startswith(("--maxfail", "-k")) for w in after)
    paths = [w for w in after if not w.startswith("-") and (".py" in w or "/" in w or w == "tests")]
    summary = " ".join(_PYTEST_SUMMARY.findall(output))
    some_passed = re.search(r"\b\d+ passed\b", summary) is not None
    if not any(st in ("FAILED", "ERROR") for st in reported.values()) \
            and re.search(r"\b\d+ (?:failed|errors?)\b", summary):
        return None  # failures without their names (-rN): which tests pass is unknown
    count = 0
    for test in fail_to_pass:
        status = reported.get(test)
        if status is not None:
            count += status in ("PASSED", "XFAIL")
            continue
        selected = not paths or any(_selects(p, test) for p in paths)
        if selected and some_passed and not cut_short:
            count += 1
    return count
