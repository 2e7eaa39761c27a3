"""Synthetic SFT conversations: the oracle's way of fixing a bug, written without a sandbox.

One `forgeline.tasks.mutations` mutation of a function of some Python source (the SFT
repositories' package code and the interpreter's standard library, `synthetic_sources`),
rendered as the oracle's conversation (`synthetic_messages`): the statement naming the function
(`synthetic_statement`, in the task generator's wordings) -> `grep -rn -A N "def f(" .` -> the
scan: candidate edits top to bottom, each followed by the test call that takes it back when the
suite fails, until the fix -> `submit`. Tool outputs are written the way the agent writes them
(`exit code: N\n` + output, cut by `tools.truncate`; `edited PATH`). There are no tests to run:
a test run's output is synthesised in pytest's shape (`suite_output`), failing (and
`git checkout .`'s line) after a wrong edit, passing after the fix. A `synthetic.recovery` share
first shows one turn broken or, for an edit, failed (`with_recovery`; mask 0) and the agent's or
the edit tool's error answer to it; a `synthetic.rename` share renames the function and its
neighbours' identifiers to fresh words (`fresh_names`, `rename_identifiers`).

`synthetic_conversations(files, n, seed, ...)` draws the examples: (id, messages) pairs, a
function of the files and the seed. Plain data in, plain data out; `forgeline.train.sft`
tokenizes them (`conversation_tokens`) and trains on them.
"""
from __future__ import annotations

import concurrent.futures
import difflib
import functools
import hashlib
import keyword
import random
import multiprocessing
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from forgeline.agent.oracle_script import (REVERTED, TEST_COMMAND, enclosing_function, find_function_command,
                                           first_changed_line, fix_arguments, grep_after, oracle_texts,
                                           parse_patch, scan_to_fix, shown_lines, shown_path)
from forgeline.agent.tools import NO_CALL_MESSAGE, SYSTEM_PROMPT, apply_edit, truncate
from forgeline.policy.chat import assistant_message, format_tool_call, parse_tool_calls, tool_message
from forgeline.policy.tokenizer import collect_corpus, stdlib_dir
from forgeline.tasks.mutations import KINDS, apply_mutation, candidate_sites, mutated_if_valid
from forgeline.tasks.statement import LOCATION, RAISES, REPRO, TITLES, VALUE

def _result(output: str, max_chars: int) -> str:
    """A bash tool result as the agent writes it: 'exit code: N' + newline + output, cut."""
    return truncate(f"exit code: 0\n{output}" if output else "exit code: 0", max_chars)


_EXCEPTIONS = ("TypeError", "ValueError", "AttributeError", "IndexError", "KeyError", "ZeroDivisionError")


_ARGUMENTS = ["x", "data", "1, 2", "'a b'", "[]", "None", "0", "-1", "3.5", "'x', 2", "items, key"]
_VALUES = ["0", "1", "-1", "2", "None", "True", "False", "[]", "''", "0.5", "3", "(1, 2)"]


def synthetic_statement(subject: str, name: str, module: str, rng: random.Random,
                        callers: Sequence[str] = (), path: str | None = None) -> str:
    """An issue in the task generator's wordings (its titles, body lines and reproduction
    lines) for a bug in `subject`. Like a generated issue, the body shows a call the failing
    test makes, often of another function of the module (`callers`), with made-up values
    (there is no test run): the function to look at is the one the title names."""
    symptom = rng.choice(["value", "raises", "check"])
    exc = rng.choice(_EXCEPTIONS)
    title = rng.choice(TITLES[symptom]).format(subject=subject, exc=exc)
    called = rng.choice(callers) if callers and rng.random() < 0.6 else name
    call = f"{called}({rng.choice(_ARGUMENTS)})"
    observed, expected = rng.sample(_VALUES, 2)
    body = [{"value": rng.choice(VALUE).format(call=call, observed=observed, expected=expected),
             "raises": rng.choice(RAISES).format(call=call, exc=exc, message=""),
             "check": f"The check `assert {call} == {expected}` does not hold any more."}[symptom]]
    others = rng.choice([0, 0, 1, 2, 5, 14])
    if others:
        body.append(f"{others} other test{'s' if others > 1 else ''} in the suite fail"
                    f"{'' if others > 1 else 's'} as well.")
    if path:
        body.append(LOCATION.format(path=path))
    test = f"tests/test_{module.rsplit('.', 1)[-1]}.py::test_{called.strip('_')}"
    return "\n\n".join([title, *body, rng.choice(REPRO).format(test=test)])  # as user_prompt strips it


def suite_output(failed: int, rng: random.Random) -> str:
    """What the test call (pytest -q --tb=no -rN, normalised, `|| git checkout .`) prints
    after the agent's `exit code: N` line when `failed` tests fail (then git takes the edit
    back and the command's exit code is git's, 0) or, with none, when the suite passes: the
    progress line(s), the count line, git's line. There is no suite to run for a synthetic
    conversation; its shape is what the policy reads."""
    passed = rng.randint(3, 70)
    marks = ["F"] * failed + ["."] * passed
    rng.shuffle(marks)
    lines, done = [], 0
    for i in range(0, len(marks), 70):  # pytest's progress lines hold 70 marks here
        done += len(marks[i:i + 70])
        lines.append(f"{''.join(marks[i:i + 70])} [{100 * done // len(marks):3d}%]")
    counts = [f"{failed} failed, {passed} passed", REVERTED] if failed else [f"{passed} passed"]
    return "exit code: 0\n" + "\n".join([*lines, *counts]) + "\n"


def broken_call(text: str, rng: random.Random) -> str:
    """`text` (one tool-call block) as a small policy breaks it: cut somewhere inside its JSON,
    then a stretch of itself repeated (the runaway a copy circuit falls into), closed or not."""
    start = text.index("{") + 1
    cut = rng.randint(start, len(text) - len("}}\n</tool_call>"))
    lo = rng.randint(start, cut)
    loop = text[lo:lo + rng.randint(2, 8)] * rng.randint(3, 12)
    return text[:cut] + loop + rng.choice(["", "\"}}\n</tool_call>", "\n</tool_call>"])


def failed_edit(arguments: Mapping[str, Any], rng: random.Random, shown: str = "") -> tuple[dict, str] | None:
    """A well-formed `edit` call as a small policy gets it wrong, and the edit tool's answer
    (EDIT_SCRIPT's words): `old` written twice over (no line holds it), or the file name with a
    letter dropped (no file has it). None for an edit without a path or `old`, or where the
    doubled `old` occurs in `shown` (the conversation so far: it might apply)."""
    path, old = str(arguments.get("path", "")), str(arguments.get("old", ""))
    folder, _, name = path.rpartition("/")
    stem = name.removesuffix(".py")
    if not old or not stem:
        return None
    if rng.random() < 0.5 and len(stem) > 2:
        cut = rng.randrange(1, len(stem))
        bad = f"{folder}/{stem[:cut - 1]}{stem[cut:]}.py" if folder else f"{stem[:cut - 1]}{stem[cut:]}.py"
        return {**arguments, "path": bad}, f"edit failed: cannot read {bad} (FileNotFoundError)"
    if old * 2 in shown:
        return None
    if "line" in arguments:
        return {**arguments, "old": old * 2}, f"edit failed: no line of {path} holds old exactly once"
    return {**arguments, "old": old * 2}, f"edit failed: old occurs 0 times in {path}; it must occur exactly once"


def with_recovery(messages: list[dict], tools: Sequence[dict], rng: random.Random) -> list[dict]:
    """`messages` with one assistant turn (not the submit) preceded by a failed version of it,
    marked `"train": False` (never a target), and the answer the agent gives to it. An edit
    turn fails as a well-formed edit half the time (`failed_edit`: `old` or the file name
    miscopied, the edit tool's error); otherwise the turn is broken (`broken_call`) and the
    answer is `ToolCall.error_message`, or the no-call note. SFT then teaches what to do after
    either: write the intended call again, whole and right, never the failed one again."""
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant" and '"submit"' not in m["content"]]
    if not turns:
        return messages
    at = rng.choice(turns)
    calls = parse_tool_calls(messages[at]["content"], tools)
    if len(calls) == 1 and calls[0].ok and calls[0].name == "edit" and rng.random() < 0.5:
        failed = failed_edit(calls[0].arguments, rng, "".join(m["content"] for m in messages[:at]))
        if failed is not None:
            bad = format_tool_call("edit", failed[0])
            return messages[:at] + [{**assistant_message(bad), "train": False}, tool_message(failed[1])] + messages[at:]
    for _ in range(5):
        bad = broken_call(messages[at]["content"], rng)
        calls = parse_tool_calls(bad, tools)
        if not calls or not all(c.ok for c in calls):
            break
    else:
        return messages
    answers = [tool_message(c.error_message()) for c in calls if not c.ok] if calls else \
        [{"role": "user", "content": NO_CALL_MESSAGE}]
    return messages[:at] + [{**assistant_message(bad), "train": False}, *answers] + messages[at:]


def synthetic_messages(clean: str, path: str, site, max_lines: int = 30,
                       max_tool_output_chars: int = 2000, max_guesses: int = 0,
                       reference=None) -> list[dict] | None:
    """An oracle-style conversation that fixes `site` (a mutations.Site of `clean`, the text of
    the file at repo-relative `path`): system, user (a statement naming the function), then
    grep / edit / test call / submit turns with synthesised tool results; with `max_guesses`
    > 0 the edits are the scan's up to the fix (`oracle_script.scan_to_fix`), each with its test call.
    None when the mutation cannot be rendered as one unique edit (several hunks, an ambiguous
    `old`, no newline at the end of the file) or the scan does not reach it. `reference`:
    `clean` parsed (mutations.Reference), where the caller has it."""
    if not clean.endswith("\n"):
        return None
    buggy = apply_mutation(clean, site)
    patch = "".join(difflib.unified_diff(clean.splitlines(True), buggy.splitlines(True),
                                         f"a/{path}", f"b/{path}", n=3))
    hunks = parse_patch(patch).get(path, [])
    if len(hunks) != 1:
        return None
    hunk = hunks[0]
    edit = {**fix_arguments(path, hunk, buggy), "path": shown_path(path)}
    if apply_edit(buggy, edit["old"], edit["new"], edit.get("line")) != clean:
        return None
    line = first_changed_line(hunk)
    fn = enclosing_function(buggy, line)
    if fn is None:
        return None
    name = site.function.rsplit(".", 1)[-1]
    lines = buggy.splitlines(True)
    grep = grep_after(lines, shown_path(path), f"def {name}(", max_lines - 1)
    # grep shows max_lines lines from the def on: the window a policy can ask for without
    # knowing where the bug is
    if not grep or line > fn[1] + max_lines - 1:
        return None
    module = path[:-3].replace("/", ".").removesuffix(".__init__")
    callers = sorted({f for f in re.findall(r"^\s*def ([A-Za-z]\w*)\(", clean, re.M) if f != name})
    rng = random.Random(f"{path}:{site.line}:{site.col}:{site.kind}")
    statement = synthetic_statement(f"`{site.function}`", name, module, rng, callers, path)
    edits = [edit]
    if max_guesses > 0:
        scan = scan_to_fix(buggy, clean, path, shown_lines(fn, max_lines), max_guesses, reference)
        if scan is None:
            return None
        edits = [{**e, "path": shown_path(path)} for e in scan]
    turns: list[tuple[str, dict, str | None]] = [
        ("bash", {"command": find_function_command(name, max_lines)}, _result(grep, max_tool_output_chars))]
    for k, e in enumerate(edits):
        failed = 0 if k == len(edits) - 1 else rng.choice([1, 1, 2, 3, 5, 9])
        turns += [("edit", e, f"edited {shown_path(path)}"), ("bash", {"command": TEST_COMMAND}, suite_output(failed, rng))]
    turns.append(("submit", {}, None))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": statement}]
    for (_, _, result), text in zip(turns, oracle_texts([(t[0], t[1]) for t in turns])):
        messages.append(assistant_message(text))
        if result is not None:
            messages.append(tool_message(truncate(result, max_tool_output_chars)))
    return messages


def _rank(seed: int, name: str) -> str:
    return hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()


_PROTOCOL_WORDS = frozenset(re.findall(r"[A-Za-z0-9]+", SYSTEM_PROMPT)) | frozenset(keyword.kwlist) | {
    "name", "arguments", "tool_call", "bash", "edit", "submit", "command", "path", "old", "new", "line",
    "grep", "rn", "def", "nl", "ba", "sed", "n", "p", "exit", "code", "edited", "tests", "test", "py",
    "init", "self", "cls"}
_NAME_CHARS = "A-Za-z0-9"


def _word(name: str) -> re.Pattern:
    """`name` where no letter or digit touches it (`_` does not join: `test_f` holds `f`)."""
    return re.compile(rf"(?<![{_NAME_CHARS}]){re.escape(name)}(?![{_NAME_CHARS}])")


def identifier_words(files: Iterable[tuple[str, str]], limit: int = 4000) -> list[str]:
    """The commonest lower-case words (3..9 letters) of the identifiers in `files`' text:
    the parts fresh names are made of, so they tokenize like real code."""
    counts: dict[str, int] = {}
    for _, text in files:
        for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
            for part in ident.split("_"):
                if 3 <= len(part) <= 9 and part.isalpha() and part.islower():
                    counts[part] = counts.get(part, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    return sorted(w for w in ranked[:limit] if w not in _PROTOCOL_WORDS)


def rename_identifiers(messages: Sequence[Mapping[str, Any]], mapping: Mapping[str, str]) -> list[dict]:
    """`messages` with every standalone occurrence of each `mapping` key replaced by its value
    (all at once) in every message but the system prompt. The synthetic tool outputs are made
    from the same text, so the conversation stays one a real sandbox would answer."""
    if not mapping:
        return [dict(m) for m in messages]
    names = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(rf"(?<![{_NAME_CHARS}])(?:{'|'.join(map(re.escape, names))})(?![{_NAME_CHARS}])")
    return [dict(m) if m["role"] == "system" else {**m, "content": pattern.sub(lambda g: mapping[g.group(0)], m["content"])}
            for m in messages]


def fresh_names(messages: Sequence[Mapping[str, Any]], path: str, function: str, words: Sequence[str],
                rng: random.Random) -> dict[str, str]:
    """A renaming of the function, its package folder and its module that appear nowhere in
    `messages`: the function gets 1-3 words joined by `_`, the folder two words run together
    (like `gridpath`), the module one or two words. Names that the tool protocol or Python
    use (and dunders) keep their name."""
    text = "\n".join(m["content"] for m in messages)
    parts = path[:-3].split("/")
    olds = [function.rsplit(".", 1)[-1], parts[0] if len(parts) > 1 else None,
            parts[-1] if len(parts) > 1 else None]
    makers = [lambda: "_".join(rng.sample(words, rng.randint(1, 3))),
              lambda: "".join(rng.sample(words, 2)),
              lambda: "_".join(rng.sample(words, rng.randint(1, 2)))]
    mapping: dict[str, str] = {}
    for old, make in zip(olds, makers):
        if not old or old in mapping or old.startswith("__") or old in _PROTOCOL_WORDS:
            continue
        for _ in range(20):
            new = make()
            if new not in mapping.values() and not _word(new).search(text):
                mapping[old] = new
                break
    return mapping


def synthetic_conversations(files: Sequence[tuple[str, str]], n: int, seed: int,
                            kinds: Sequence[str] = KINDS, max_lines: int = 30, per_file: int = 2,
                            max_tool_output_chars: int = 2000, rename: float = 0.0,
                            max_guesses: int = 0, recovery: float = 0.0,
                            tools: Sequence[dict] = (), workers: int = 1) -> list[tuple[str, list[dict]]]:
    """Up to `n` (id, messages) synthetic conversations from `files` [(repo-relative path,
    text)]: files in a seeded hash order, one mutation kind per file (rotating), at most
    `per_file` sites per file drawn with random.Random(seed:path), each reaching its fix by the
    scan when `max_guesses` > 0 (sites it does not reach are skipped), and a `recovery` share with one
    broken call and the agent's answer to it before a turn (`with_recovery`; `tools` are the
    schemas the calls are checked against). A `rename` share of them
    get fresh names for the function, its folder and module (`fresh_names`): a name the
    model cannot have memorised must be copied from the context, which is what the grep,
    nl and edit turns of a task of an unseen repository need. Deterministic, and the same for
    any number of `workers` (processes that make the files' conversations in parallel)."""
    words = identifier_words(files) if rename > 0 else []
    order = sorted(files, key=lambda f: _rank(seed, f[0]))
    recipe = _Recipe(seed, tuple(kinds), max_lines, min(per_file, n), max_tool_output_chars, rename,
                     max_guesses, recovery, tuple(tools), tuple(words))
    jobs = [(i, path, text) for i, (path, text) in enumerate(order)]
    out: list[tuple[str, list[dict]]] = []
    if workers <= 1:
        for job in jobs:
            if len(out) >= n:
                break
            out += _file_conversations(recipe, job)[: n - len(out)]
        return out
    # spawn, not fork: the stage's process holds torch's and the tokenizer's threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for made in pool.map(functools.partial(_file_conversations, recipe), jobs, chunksize=8):
            out += made[: n - len(out)]
            if len(out) >= n:
                pool.shutdown(wait=True, cancel_futures=True)
                break
    return out


@dataclass(frozen=True)
class _Recipe:
    """What `synthetic_conversations` makes each file's conversations with."""

    seed: int
    kinds: tuple[str, ...]
    max_lines: int
    per_file: int
    max_tool_output_chars: int
    rename: float
    max_guesses: int
    recovery: float
    tools: tuple[dict, ...]
    words: tuple[str, ...]


def _file_conversations(r: _Recipe, job: tuple[int, str, str]) -> list[tuple[str, list[dict]]]:
    """The conversations of file number `i` of the seeded order (at most r.per_file)."""
    i, path, text = job
    found = candidate_sites(text, [r.kinds[i % len(r.kinds)]], path)
    if found is None:
        return []
    sites, reference = found
    rng = random.Random(_rank(r.seed, path))
    rng.shuffle(sites)
    out: list[tuple[str, list[dict]]] = []
    for site in sites:
        if len(out) >= r.per_file:
            break
        if mutated_if_valid(text, site, reference, path) is None:
            continue
        msgs = synthetic_messages(text, path, site, r.max_lines, r.max_tool_output_chars, r.max_guesses,
                                  reference)
        if msgs is None:
            continue
        sid = f"synthetic:{path}:{site.line}:{site.col}:{site.kind}:{site.detail}"
        pick = random.Random(_rank(r.seed, sid))
        if r.words and pick.random() < r.rename:
            mapping = fresh_names(msgs, path, site.function, r.words, pick)
            msgs = rename_identifiers(msgs, mapping)
            sid += ":renamed"
        if r.recovery > 0 and pick.random() < r.recovery:
            msgs = with_recovery(msgs, r.tools, pick)
            sid += ":recovery"
        out.append((sid, msgs))
    return out


def synthetic_sources(sft_repo_dirs: Iterable[Path], stdlib: bool, repos: bool,
                      max_file_bytes: int) -> list[tuple[str, str]]:
    """(repo-relative path, text) of the source files synthetic examples are made from: the
    SFT repositories' package files (no tests) and the standard library (as `collect_corpus`
    samples it). A stdlib module `x.py` gets the path `x/__init__.py`, so every file lives in
    a package folder, as in the task repositories."""
    out = []
    if repos:
        for f in collect_corpus(list(sft_repo_dirs), None):
            rel = f.name.split("/", 1)[1]
            if rel.endswith(".py") and not rel.startswith(("tests/", "test_")) and len(f.text.encode()) <= max_file_bytes:
                out.append((rel, f.text))
    if stdlib:
        for f in collect_corpus([], stdlib_dir(), stdlib_max_bytes=50_000_000, max_file_bytes=max_file_bytes):
            rel = f.name.split(":", 1)[1]
            if "/" not in rel:
                rel = f"{rel[:-3]}/__init__.py"
            out.append((rel, f.text))
    return sorted(out)
