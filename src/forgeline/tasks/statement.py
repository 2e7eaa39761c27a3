"""The problem statement of a generated task, written from the failing test's pytest output the
way a user reports a bug: what was called, what came back, what was expected; never the fix.

- Reading a failure: `parse_failures` cuts a `pytest -rA --tb=short` log into its FAILURES and
  ERRORS blocks, `read_failure` takes one test's block apart (`Failure`: the test's line where
  it failed, the `E` lines without addresses or temporary paths).
- Writing the issue: `write_problem_statement(site, failures, patch, seed)`, in the wordings
  below (`TITLES`, `LOCATION`, `VALUE`, `RAISES`, `REPRO`, ...; the SFT data generator writes
  its statements in the same words), never a text that leaks the patch.

Plain data in, plain data out: `forgeline.tasks.generate` runs the suites and calls these.
"""
from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field
from typing import Sequence

from forgeline.provenance import sha256_bytes
from forgeline.sandbox.grading import is_test_path
from forgeline.sandbox.snapshot import import_parts
from forgeline.tasks.mutations import Site, parse


# -- reading a failure from the pytest log --------------------------------------------------------

@dataclass
class Failure:
    """One failing test as pytest reported it (--tb=short)."""

    test_id: str
    test_line: str = ""  # the test's source line where it failed (assert/with/call)
    error: list[str] = field(default_factory=list)  # the `E` lines, cleaned

    @property
    def first(self) -> str:
        return self.error[0] if self.error else ""


_SECTION = re.compile(r"^={3,} (FAILURES|ERRORS|PASSES|short test summary info|warnings summary)"
                      r" ={3,}$|^={3,} .* in [\d.]+s.* ={3,}$")
_HEADER = re.compile(r"^_{2,} (.+?) _{2,}$")
_FRAME = re.compile(r"^(\S+\.py):(\d+): in (\S+)$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_TMPDIR = re.compile(r"(?:/[^\s/'\"]+)*/forgeline-[^\s/'\"]+/")


def _clean(text: str) -> str:
    """Drop what differs between two runs of the same thing: addresses and temp paths."""
    return _TMPDIR.sub("", _ADDRESS.sub("", text))


def _header_of(test_id: str) -> str:
    return ".".join(test_id.split("::")[1:])


def parse_failures(log_text: str) -> dict[str, list[str]]:
    """Section header ('test_x', 'TestA.test_y[1]', 'ERROR at setup of test_z') -> its lines,
    for the FAILURES and ERRORS sections of a `pytest -rA --tb=short` log."""
    blocks: dict[str, list[str]] = {}
    section = None
    current: list[str] | None = None
    for line in log_text.splitlines():
        m = _SECTION.match(line)
        if m:
            section = m.group(1) if m.group(1) in ("FAILURES", "ERRORS") else None
            current = None
            continue
        if section is None:
            continue
        h = _HEADER.match(line)
        if h:
            current = blocks.setdefault(h.group(1), [])
            continue
        if current is not None:
            current.append(line)
    return blocks


def read_failure(log_text: str, test_id: str, blocks: dict[str, list[str]] | None = None,
                 message: str = "") -> Failure:
    """The Failure of `test_id` in a pytest log (empty fields when the log does not show it);
    `message` (pytest's crash message, TestRun.messages) stands in when the log has no `E` line."""
    blocks = parse_failures(log_text) if blocks is None else blocks
    header = _header_of(test_id)
    lines = blocks.get(header) or blocks.get(f"ERROR at setup of {header}") or []
    failure = Failure(test_id)
    in_test_frame = False
    for line in lines:
        if line.startswith("-" * 10):  # "----- Captured stdout call -----": not the traceback
            break
        frame = _FRAME.match(line)
        if frame:
            in_test_frame = is_test_path(frame.group(1))
            if in_test_frame:  # the last frame in the tests is the line that failed
                failure.test_line = ""
            continue
        if line.startswith("E"):
            text = _clean(line[4:] if line.startswith("E   ") else line[1:].lstrip())
            if text.strip().startswith(("Full diff:", "...Full output truncated", "Use -v to get")):
                break
            explanation = text.lstrip().startswith(("+", "and "))  # pytest's "+  where x = ..."
            if text.strip() and not (explanation and (" object>" in text or "where <" in text)):
                failure.error.append(text.rstrip())
        elif in_test_frame and line.startswith("    ") and not set(line.strip()) <= {"^", "~"}:
            failure.test_line = (failure.test_line + " " + line.strip()).strip()
    if not failure.error and message.strip():  # whole, where the console cuts it to its width
        failure.error.append(_clean(message.strip().splitlines()[0]))
    failure.error = failure.error[:8]
    return failure


# -- the problem statement -----------------------------------------------------------------------

_ASSERT_EQ = re.compile(r"^(?:AssertionError: )?assert (.+?) == (.+)$")
_NOT_RAISED_RE = re.compile(r"^Failed: DID NOT RAISE (?:<class ')?([\w.]+)")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s*(.*))?$")
# Messages Python writes with the operator in them; the operator would hint at the fix.
_OPERATOR_MESSAGES = [
    (re.compile(r"unsupported operand type\(s\) for \S+: (.*)"), r"unsupported operand types (\1)"),
    (re.compile(r"'\S+' not supported between instances of (.*)"),
     r"comparison not supported between instances of \1"),
    (re.compile(r"bad operand type for unary \S+: (.*)"), r"bad operand type for a unary operator: \1"),
]


def module_name(relpath: str) -> str:
    """'ledgerkit/money.py' -> 'ledgerkit.money'; a package's __init__.py -> the package;
    'src/pkg/mod.py' -> 'pkg.mod'."""
    parts = list(import_parts(relpath[:-3].split("/") if relpath.endswith(".py") else relpath.split("/")))
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


_WRAPPERS = frozenset({"len", "list", "sorted", "set", "tuple", "dict", "str", "repr", "int", "float",
                       "round", "abs", "any", "all", "approx", "isinstance", "raises", "type"})


def _parse_line(test_line: str) -> ast.stmt | None:
    line = test_line.strip()
    for candidate in (line, line + " pass", line + "\n    pass"):  # `with ...:` / `for ...:`
        try:
            return parse(candidate).body[0]
        except (SyntaxError, IndexError):
            continue
    return None


def _source(test_line: str, node: ast.AST) -> str:
    """The node as the test wrote it (ast.unparse would requote strings)."""
    return ast.get_source_segment(test_line.strip(), node) or ast.unparse(node)


def _first_call(node: ast.AST) -> ast.Call | None:
    """The outermost call that is not a wrapper (`len(f(x))` -> `f(x)`), breadth first."""
    queue = [node]
    while queue:
        n = queue.pop(0)
        if isinstance(n, ast.Call):
            func = n.func.id if isinstance(n.func, ast.Name) else (
                n.func.attr if isinstance(n.func, ast.Attribute) else "")
            if func not in _WRAPPERS:
                return n
        queue.extend(ast.iter_child_nodes(n))
    return None


def _called_expression(test_line: str) -> tuple[str, str] | None:
    """From an `assert A == B` line: (the side that calls something, 'left'|'right')."""
    node = _parse_line(test_line)
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq)):
        return None
    left, right = node.test.left, node.test.comparators[0]
    has_call = [any(isinstance(n, ast.Call) for n in ast.walk(side)) for side in (left, right)]
    if not any(has_call):
        return None  # `assert result == 5`: no call to name
    side, which = (left, "left") if has_call[0] else (right, "right")
    return _source(test_line, side), which


def _call_of(test_line: str) -> ast.Call | None:
    """The call a failing test line makes (`x = f(a)`, `assert g(b) > 1`, `obj.m()`)."""
    node = _parse_line(test_line)
    return _first_call(node) if node is not None else None


def _exception(failure: Failure) -> tuple[str, str] | None:
    m = _EXCEPTION.match(failure.first)
    if not m or failure.first.startswith(("assert ", "AssertionError")):
        return None
    name, message = m.group(1), (m.group(2) or "").strip()
    if not (name[:1].isupper() or "." in name):
        return None
    for pattern, replacement in _OPERATOR_MESSAGES:
        message = pattern.sub(replacement, message)
    return name, message


def _rank(failure: Failure) -> int:
    """Which failing test tells the story best: a clean `assert f(x) == y` first."""
    if _ASSERT_EQ.match(failure.first) and _called_expression(failure.test_line):
        return 0
    if failure.first.startswith(("assert", "AssertionError")):
        return 1
    if failure.first:
        return 2
    return 3


# Wordings, per symptom; one of each is drawn with the instance's seed.
# Every title opens with the subject: the first `...` of an issue is what misbehaves.
TITLES = {
    "value": ["{subject} returns a wrong result", "{subject} computes the wrong value",
              "{subject} gives incorrect output"],
    "raises": ["{subject} raises `{exc}` unexpectedly", "{subject} crashes with `{exc}`",
               "{subject} fails with `{exc}`"],
    "not_raised": ["{subject} accepts input it should reject", "{subject} no longer raises `{exc}`"],
    "check": ["{subject} behaves unexpectedly", "{subject} misbehaves",
              "{subject} does not do what it should"],
}
# Where a public function that misbehaves is defined (the body's last line before the repro).
LOCATION = "It is defined in `{path}`."

VALUE = [
    "Calling `{call}` gives `{observed}`, but I expected `{expected}`.",
    "`{call}` returns `{observed}` instead of `{expected}`.",
    "I get `{observed}` from `{call}`; the expected result is `{expected}`.",
]
RAISES = [
    "`{call}` fails with `{exc}`{message}, where I expected it to work.",
    "Calling `{call}` now raises `{exc}`{message}.",
    "I'm getting an unexpected `{exc}`{message} when I call `{call}`.",
]
_RAISES_NO_CALL = [
    "Using {subject} now raises `{exc}`{message}.",
    "I'm getting an unexpected `{exc}`{message} from {subject}.",
]
_NOT_RAISED = [
    "{subject} is supposed to reject this input with `{exc}`, but it returns normally.",
    "No `{exc}` is raised by {subject} for input that should be rejected.",
]
_CHECK = [
    "The check `{line}` does not hold any more. pytest reports:",
    "This assertion fails: `{line}`. Output:",
    "`{line}` is not satisfied. What I see:",
]
REPRO = [
    "To reproduce: `python -m pytest {test}`",
    "Reproduce with `pytest {test}`.",
    "Minimal reproduction: run `pytest {test}`.",
]


def _leaks(text: str, patch: str) -> bool:
    """Does the text quote a line the patch changes (the bug, or the fix)?"""
    changed = [line[1:].strip() for line in patch.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return any(len(c) >= 4 and c in text for c in changed)


def _is_private(qualname: str) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               for p in qualname.split("."))


def write_problem_statement(site: Site, failures: Sequence[Failure], patch: str, seed: int) -> str:
    """An issue-style report of the bug from the failing tests' pytest output.

    Inputs: the mutation site (only its file/function are used, to name what misbehaves), the
    parsed failures of the FAIL_TO_PASS tests (sorted by node id), the patch (to check that
    nothing of it is quoted), and a seed choosing among wordings. Output: markdown text naming
    the public function, observed vs expected, and how to reproduce; never the changed line,
    the operator or constant, or the diff.
    """
    rng = random.Random(f"{seed}:{sha256_bytes(patch.encode())}")
    failure = failures[min(range(len(failures)), key=lambda i: (_rank(failures[i]), i))]
    first = failure.first
    call_node = _call_of(failure.test_line)
    call = _source(failure.test_line, call_node) if call_node is not None else ""
    if len(call) > 120:  # a long chain reads worse than naming the function
        call = ""
    where: list[str] = []
    if not _is_private(site.function):
        # its name as its file defines it (`f`, `Class.method`), and the file in the body
        subject = f"`{site.function}`"
        where = [LOCATION.format(path=site.file)]
    elif call_node is not None:  # a private helper: name the public entry point the test used
        subject = f"`{_source(failure.test_line, call_node.func)}`"
    else:
        subject = f"`{module_name(site.file)}`"

    body: list[str] = []
    eq, called = _ASSERT_EQ.match(first), _called_expression(failure.test_line)
    exc, not_raised = _exception(failure), _NOT_RAISED_RE.match(first)
    if eq and called:
        symptom, exc_name = "value", ""
        observed, expected = eq.group(1), eq.group(2)
        if called[1] == "right":
            observed, expected = expected, observed
        body.append(rng.choice(VALUE).format(call=called[0], observed=observed, expected=expected))
        extra = [e.strip() for e in failure.error[1:] if e.lstrip().startswith("At index")]
        if extra:
            body.append("```\n" + "\n".join(extra) + "\n```")
    elif not_raised:
        symptom, exc_name = "not_raised", not_raised.group(1)
        body.append(rng.choice(_NOT_RAISED).format(subject=subject, exc=exc_name))
    elif exc:
        symptom, (exc_name, message) = "raises", exc
        message = f" (`{message}`)" if message else ""
        template = rng.choice(RAISES) if call else rng.choice(_RAISES_NO_CALL)
        body.append(template.format(call=call, subject=subject, exc=exc_name, message=message))
    elif failure.test_line and failure.error:
        symptom, exc_name = "check", ""
        body.append(rng.choice(_CHECK).format(line=failure.test_line))
        body.append("```\n" + "\n".join(failure.error) + "\n```")
    else:
        symptom, exc_name = "check", ""
        body.append(f"{subject} no longer behaves as its tests expect.")
    others = len(failures) - 1
    if others:
        body.append(f"{others} other test{'s' if others > 1 else ''} in the suite fail"
                    f"{'' if others > 1 else 's'} as well.")
    repro = rng.choice(REPRO).format(test=failure.test_id)
    title = rng.choice(TITLES[symptom]).format(subject=subject, exc=exc_name)
    text = title + "\n\n" + "\n\n".join(body + where + [repro]) + "\n"
    if _leaks(text, patch):  # pytest quoted the changed code: say less rather than leak it
        text = (f"{subject} misbehaves\n\n{subject} no longer behaves as its tests expect "
                f"(`{failure.test_id}` fails).\n\n{repro}\n")
    return text
