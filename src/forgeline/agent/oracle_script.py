"""The oracle's script: the tool calls a scripted expert makes to fix a task, derived from the
task alone (its bug patch, FAIL_TO_PASS tests, `mutation` field) and the clean source. Plain
data in, plain data out (`oracle_actions`, `oracle_texts`); `forgeline.agent.oracle` runs it
through the agent loop, `forgeline.train.synthetic` writes conversations the same way.

1. `bash: grep -rn -A <max_lines - 1> "def <function>(" .`  (the function the bug is in, with
   `./path:N:` / `./path-N-` line numbers: one call finds and shows it, and the only thing
   to copy is the name the issue gives)
2. `bash: nl -ba <file> | sed -n 'A,Bp'`  (only where the bug lies past what 1. shows, or in
   no function: `oracle.max_lines` lines around it)
3. with `max_guesses` > 0 (a bug in one line that grep shows): the scan. Every candidate edit
   of the lines grep showed (`scan_edits`: the generator's own mutations, in source order),
   each followed by `bash: python3 -m pytest -q --tb=no -rN || git checkout .`, which takes
   the edit back when the suite fails, until the one that is the fix (the suite passes). A
   task whose fix the scan does not reach within `max_guesses` wrong edits gets no episode.
4. else `edit: path, line, old, new`  (the bug patch reversed: where one line changed, grep's
   line number and the few tokens that differ; else widened with context lines until `old`
   occurs once), then the same test call
5. `submit`

Each assistant turn is exactly one tool-call block (no prose): short and regular, so the tiny
model can imitate it.
"""
from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from forgeline.agent.tools import apply_edit
from forgeline.policy.chat import format_tool_call
from forgeline.tasks.mutations import Reference, candidate_sites, mutated_if_valid, parse, program

# The whole suite, without tracebacks or the list of failures (-rN), and, when it fails, every
# edit since the session started (its baseline commit) taken back: the same command after
# every edit of every task (nothing to copy), two or three lines of context, and a wrong edit
# never stays to confuse the next one.
TEST_COMMAND = "python3 -m pytest -q --tb=no -rN || git checkout ."
# What `git checkout .` adds to the output when it took an edit back.
REVERTED = "Updated 1 path from the index"
# Mutation kinds the scan's candidate edits are: those whose undo is a line-scoped edit.
GUESS_KINDS = ("op_swap", "cmp_boundary", "bool_flip", "arg_swap", "const_change", "invert_if")


# -- patches --------------------------------------------------------------------------------

@dataclass
class Hunk:
    old_start: int  # 1-based first line in the old file (0 for an empty range)
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (" ", "-", "+"), text with "\n"


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_patch(patch: str) -> dict[str, list[Hunk]]:
    """{path: [Hunk]} of a git/unified diff (paths without a/ b/; new path for renames).
    '\\ No newline at end of file' markers remove the newline of the line before them."""
    files: dict[str, list[Hunk]] = {}
    current: list[Hunk] | None = None
    hunk: Hunk | None = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            current, hunk = None, None
            continue
        if line.startswith("+++ "):
            name = line[4:].rstrip("\n")
            name = name[2:] if name.startswith(("a/", "b/")) else name
            current = files.setdefault(name, [])
            continue
        if line.startswith("--- ") and hunk is None:
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            hunk = Hunk(int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1))
            current.append(hunk)
            continue
        if hunk is None:
            continue
        if line.startswith("\\"):
            if hunk.lines:
                tag, text = hunk.lines[-1]
                hunk.lines[-1] = (tag, text.rstrip("\n"))
            continue
        if line[:1] in (" ", "-", "+"):
            hunk.lines.append((line[0], line[1:]))
        elif line in ("\n", ""):
            hunk.lines.append((" ", "\n"))
    return files


def apply_hunks(text: str, hunks: Sequence[Hunk]) -> str:
    """Apply hunks (forward) to a file's text; raises ValueError if the old lines differ."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for h in hunks:
        start = h.old_start - 1 if h.old_len else h.old_start
        out.extend(lines[pos:start])
        pos = start
        for tag, body in h.lines:
            if tag in (" ", "-"):
                if pos >= len(lines) or lines[pos] != body:
                    raise ValueError(f"hunk at line {h.old_start} does not match the file")
                pos += 1
            if tag in (" ", "+"):
                out.append(body)
    out.extend(lines[pos:])
    return "".join(out)


def fix_edit(hunk: Hunk, current: str) -> tuple[str, str]:
    """(old, new) of an `edit` call that undoes one hunk of a bug patch in `current` (the file
    as it is now): old = the hunk's new side ('+' and context), new = its old side ('-' and
    context), over the smallest window of the hunk that covers the changed lines and makes
    `old` non-empty and unique in `current`. One trailing newline is dropped from both."""
    lines = hunk.lines
    changed = [i for i, (tag, _) in enumerate(lines) if tag != " "]
    lo, hi = (changed[0], changed[-1]) if changed else (0, len(lines) - 1)

    def sides(a: int, b: int) -> tuple[str, str]:
        window = lines[a:b + 1]
        old = "".join(t for tag, t in window if tag in (" ", "+"))
        new = "".join(t for tag, t in window if tag in (" ", "-"))
        if old.endswith("\n") and new.endswith("\n"):
            old, new = old[:-1], new[:-1]
        return old, new

    grow_low = True
    while True:
        old, new = sides(lo, hi)
        if old.strip() and current.count(old) == 1:
            return old, new
        if lo == 0 and hi == len(lines) - 1:
            return old, new  # the best there is; the edit will report the ambiguity
        if (grow_low and lo > 0) or hi == len(lines) - 1:
            lo -= 1
        else:
            hi += 1
        grow_low = not grow_low


# Multi-character operators stay whole, so `<` -> `<=` is one token replaced, not `=` inserted.
_TOKEN = re.compile(r"\w+|\s+|==|!=|<=|>=|//|\*\*|->|[^\w\s]")


def one_line_change(hunk: Hunk) -> tuple[int, str, str] | None:
    """(line, clean text, buggy text) where the hunk replaces exactly one line by one ('-' then
    '+'); `line` is 1-based in the buggy file, texts keep their newline. Else None."""
    minus = [i for i, (tag, _) in enumerate(hunk.lines) if tag == "-"]
    plus = [i for i, (tag, _) in enumerate(hunk.lines) if tag == "+"]
    if len(minus) != 1 or len(plus) != 1:
        return None
    line = hunk.new_start + sum(1 for tag, _ in hunk.lines[:plus[0]] if tag != "-")
    return line, hunk.lines[minus[0]][1], hunk.lines[plus[0]][1]


def line_fix(hunk: Hunk) -> tuple[int, str, str] | None:
    """(line, old, new) of a line-scoped `edit` that undoes a hunk changing exactly one line
    (one '-' line replaced by one '+' line): the smallest run of whole tokens that differs,
    grown a token at a time (left, then right) until `old` is non-blank and occurs once in the
    buggy line. `line` is the 1-based line number in the buggy file. None for other hunks."""
    change = one_line_change(hunk)
    if change is None:
        return None
    line, clean, buggy = change
    b, c = _TOKEN.findall(buggy.rstrip("\n")), _TOKEN.findall(clean.rstrip("\n"))
    pre = 0
    while pre < min(len(b), len(c)) and b[pre] == c[pre]:
        pre += 1
    suf = 0
    while suf < min(len(b), len(c)) - pre and b[-1 - suf] == c[-1 - suf]:
        suf += 1
    lo, hi_b, hi_c = pre, len(b) - suf, len(c) - suf
    grow_left = True
    while True:
        old, new = "".join(b[lo:hi_b]), "".join(c[lo:hi_c])
        if old.strip() and buggy.count(old) == 1:
            return line, old, new
        if lo == 0 and hi_b == len(b):
            return None
        if (grow_left and lo > 0) or hi_b == len(b):
            lo -= 1
        else:
            hi_b, hi_c = hi_b + 1, hi_c + 1
        grow_left = not grow_left


def fix_arguments(path: str, hunk: Hunk, current: str) -> dict[str, Any]:
    """The `edit` arguments that undo `hunk` in `current`, in the form a small policy writes
    most reliably: where one line changed, line-scoped (`line` as grep numbered it + the few
    tokens that differ), so every string of the call is a path or a token or two, never a
    copied line that can run away or need JSON escapes. Else (lines added or removed)
    `fix_edit`'s unique stretch of the file."""
    fix = line_fix(hunk)
    if fix is not None and apply_edit(current, fix[1], fix[2], fix[0]) is not None:
        return {"path": path, "line": fix[0], "old": fix[1], "new": fix[2]}
    old, new = fix_edit(hunk, current)
    return {"path": path, "old": old, "new": new}


def scan_edits(buggy: str, path: str, lines: range, kinds: Sequence[str] = GUESS_KINDS) -> Iterator[dict[str, Any]]:
    """Every candidate fix of `buggy` (the file at `path`) on `lines`, in source order (line,
    column, kind): each a line-scoped edit that is one of the bug generator's own mutations
    (a token or a negation changed), distinct by the file it makes. What a policy that cannot
    tell which token is wrong can still do reliably: try them top to bottom, each tested.
    Lazy: each candidate costs a parse of the mutated file."""
    found = candidate_sites(buggy, kinds, path, lines)
    if found is None:
        return
    sites, reference = found
    made: set[str] = set()
    for site in sites:
        mutated = mutated_if_valid(buggy, site, reference, path)
        if mutated is None or mutated in made:
            continue
        # the candidate as a hunk of a "bug patch" from `mutated` to `buggy`: line_fix undoes it
        diff = "".join(difflib.unified_diff(mutated.splitlines(True), buggy.splitlines(True),
                                            f"a/{path}", f"b/{path}", n=3))
        hunks = parse_patch(diff).get(path, [])
        fix = line_fix(hunks[0]) if len(hunks) == 1 else None
        if fix is None or apply_edit(buggy, fix[1], fix[2], fix[0]) != mutated:
            continue
        made.add(mutated)
        yield {"path": path, "line": fix[0], "old": fix[1], "new": fix[2]}


def same_program(a: str | None, b: str, reference: Reference | None = None) -> bool:
    """Whether source `a` is the program `b` (the same AST): a fix may leave parentheses the bug
    put in (`not (x < y)` -> `(x < y)` restores `x < y`), and the tests cannot tell.
    `reference`: `b` parsed, to compare only the statement that differs."""
    if a is None:
        return False
    if a == b:
        return True
    same = reference.same(a) if reference is not None else None
    if same is not None:
        return same
    try:
        return program(a) == program(b)
    except (SyntaxError, ValueError):
        return False


def scan_to_fix(buggy: str, clean: str, path: str, lines: range, max_guesses: int,
                reference: Reference | None = None) -> list[dict[str, Any]] | None:
    """The scan's edits up to and including the one that restores `clean`'s program (the fix
    last), or None when no candidate on `lines` is the fix or more than `max_guesses` wrong ones
    come first. `reference`: `clean` parsed, where the caller has it."""
    out: list[dict[str, Any]] = []
    if reference is None:
        try:
            reference = Reference(clean, parse(clean))
        except (SyntaxError, ValueError):
            pass
    for edit in scan_edits(buggy, path, lines):
        out.append(edit)
        if same_program(apply_edit(buggy, edit["old"], edit["new"], edit["line"]), clean, reference):
            return out
        if len(out) > max_guesses:
            return None
    return None


def enclosing_function(source: str, line: int) -> tuple[str, int, int] | None:
    """(name, first line, last line) of the innermost def containing `line` (1-based)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best = None
    todo: list[ast.AST] = [tree]
    while todo:  # only into nodes that hold `line`: a def that holds it lies inside them
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and (best is None or node.lineno > best[1]):
            best = (node.name, node.lineno, node.end_lineno or node.lineno)
        todo += [child for child in ast.iter_child_nodes(node) if getattr(child, "lineno", None) is None
                 or child.lineno <= line <= (child.end_lineno or child.lineno)]
    return best


def first_changed_line(hunk: Hunk) -> int:
    """1-based line, in the NEW (buggy) file, of the hunk's first changed line."""
    n = hunk.new_start
    for tag, _ in hunk.lines:
        if tag != " ":
            return n
        n += 1
    return hunk.new_start


def grep_after(lines: Sequence[str], shown_path: str, needle: str, after: int) -> str:
    """What `grep -rn -A after "needle" DIR` prints for one file whose lines are `lines` and
    whose path grep shows as `shown_path`: matches as `path:N:text`, context as `path-N-text`,
    `--` between groups that do not touch (GNU grep's format)."""
    hits = [i for i, text in enumerate(lines) if needle in text]
    show = sorted({j for i in hits for j in range(i, min(i + after, len(lines) - 1) + 1)})
    out, prev = [], None
    for j in show:
        if prev is not None and j > prev + 1:
            out.append("--\n")
        sep = ":" if needle in lines[j] else "-"
        text = lines[j] if lines[j].endswith("\n") else lines[j] + "\n"
        out.append(f"{shown_path}{sep}{j + 1}{sep}{text}")
        prev = j
    return "".join(out)


def find_function_command(name: str, max_lines: int) -> str:
    """The call that finds a function and shows its first `max_lines` lines, numbered. It
    searches `.`, so the only thing to copy is the name the issue gives."""
    return f'grep -rn -A {max_lines - 1} "def {name}(" .'


def shown_lines(fn: tuple[str, int, int], max_lines: int) -> range:
    """The lines of function `fn` (name, first, last) that the grep call shows: where guesses go."""
    return range(fn[1], min(fn[2], fn[1] + max_lines - 1) + 1)


def shown_path(path: str) -> str:
    """How `grep -r ... .` prints a repository-relative path (and how the edits name it)."""
    return "./" + path


def oracle_actions(task: Mapping[str, Any], source: str | Path, max_lines: int = 30,
                   max_guesses: int = 0) -> list[tuple[str, dict]] | None:
    """The oracle's tool calls [(name, arguments)] for `task`, whose clean repository is at
    `source` (the bug patch is applied here, in memory, to find lines and functions).

    With `max_guesses` > 0 the fix is reached by the scan (`scan_to_fix`: the candidate edits
    of what grep showed, top to bottom, each followed by the test call that takes it back when
    the suite fails); None when the task is not one the scan solves (a bug in several lines or
    outside what grep shows, a fix that is no candidate, or more than `max_guesses` before it).
    With 0 the fix comes straight after the grep."""
    files = parse_patch(task["patch"])
    if not files:
        raise ValueError(f"{task['instance_id']}: the patch changes no file")
    mutation = task.get("mutation") or {}
    actions: list[tuple[str, dict]] = []
    shown: set[tuple[str, str]] = set()
    single = len(files) == 1 and sum(len(h) for h in files.values()) == 1
    if max_guesses > 0 and not single:
        return None
    for path in sorted(files):
        hunks = files[path]
        clean = (Path(source) / path).read_text(encoding="utf-8")
        current = apply_hunks(clean, hunks)  # the buggy file
        buggy = current
        # bottom-up: an edit never shifts the line numbers of what is shown next
        for hunk in sorted(hunks, key=lambda h: -h.new_start):
            line = first_changed_line(hunk)
            fn = enclosing_function(buggy, line)
            name = fn[0] if fn else None
            if mutation.get("file") == path and mutation.get("function") and fn:
                name = str(mutation["function"]).rsplit(".", 1)[-1]
            if fn and (path, name) not in shown:
                shown.add((path, name))
                actions.append(("bash", {"command": find_function_command(name, max_lines)}))
            if not fn or line > fn[1] + max_lines - 1:  # the bug is not in what grep showed
                if max_guesses > 0:
                    return None
                lo = max(1, line - max_lines // 2)
                actions.append(("bash", {"command": f"nl -ba {path} | sed -n '{lo},{lo + max_lines - 1}p'"}))
            if max_guesses > 0:
                scan = scan_to_fix(buggy, clean, path, shown_lines(fn, max_lines), max_guesses)
                if scan is None:
                    return None
                for edit in scan:
                    actions += [("edit", {**edit, "path": shown_path(path)}), ("bash", {"command": TEST_COMMAND})]
                return actions + [("submit", {})]
            args = {**fix_arguments(path, hunk, current), "path": shown_path(path)}
            actions.append(("edit", args))
            current = apply_edit(current, args["old"], args["new"], args.get("line")) or current
    actions.append(("bash", {"command": TEST_COMMAND}))
    actions.append(("submit", {}))
    return actions


def oracle_texts(actions: Sequence[tuple[str, dict]]) -> list[str]:
    """The assistant turns: one tool-call block each, as the chat template writes them."""
    return [format_tool_call(name, args) for name, args in actions]
