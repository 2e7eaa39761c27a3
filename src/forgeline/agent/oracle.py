"""Oracle trajectories: a scripted expert that solves a task through the agent's own tools in
the real sandbox, so every tool output in its trajectory is real. SFT data for the tiny policy.

The script, derived from the task alone (its bug patch, FAIL_TO_PASS tests, `mutation` field):

1. `bash: grep -rn -A <max_lines - 1> "def <function>(" <package dir>`  (the function the bug
   is in, with `path:N:` / `path-N-` line numbers: one call finds and shows it, so the policy
   copies one name and one folder, not a path and a line range too)
2. `bash: nl -ba <file> | sed -n 'A,Bp'`  (only where the bug lies past what 1. shows, or in
   no function: `oracle.max_lines` lines around it)
3. `edit: path, old, new`  (the bug patch reversed: where one line changed, old = that line
   without its indentation and new = the fixed line; if that text is not unique, `line` + the
   differing tokens; else widened with context lines until `old` occurs once)
4. `bash: python3 -m pytest -q`  (the whole suite: the same command for every task, nothing to
   copy)
5. `submit`

Each assistant turn is exactly one tool-call block (no prose): short and regular, so the tiny
model can imitate it. The turns are fed through the same `Episode` loop as a policy's, by a
`ScriptedEngine` whose "generations" are the tokenizer's ids of the scripted text plus
<|im_end|> (logprobs 0: nothing was sampled). The record says `source: "oracle"`; only
episodes that `verify()` resolves are kept.

`ScriptedEngine` is also the test double for the agent loop: an Engine that replays fixed texts.
"""
from __future__ import annotations

import argparse
import ast
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.episode import IM_END, agent_config, apply_edit, run_episode, task_env
from forgeline.agent.trajectory import export_trajectories
from forgeline.policy.chat import format_tool_call
from forgeline.policy.engine import Engine, Generation
from forgeline.provenance import Manifest, read_jsonl, stage_sources, write_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.base import Sandbox, TaskEnv

log = logging.getLogger(__name__)
STAGE = "agent.oracle"
_ASSISTANT = "<|im_start|>assistant\n"


# -- a replaying engine ---------------------------------------------------------------------

class ScriptedEngine(Engine):
    """An Engine whose answers come from `respond(prompt_text, turn) -> text` (turn = how many
    assistant turns the prompt already holds). Returns the tokenizer's ids of the text plus
    <|im_end|>, logprobs 0, finish "stop"; a text longer than max_new_tokens is cut there
    (finish "length"), as a real engine would. Seeds are ignored."""

    def __init__(self, tokenizer, respond: Callable[[str, int], str]):
        self.tokenizer = tokenizer
        self.respond = respond
        self.im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.calls = 0
        self.prompts = 0

    @classmethod
    def replay(cls, tokenizer, scripts: Mapping[str, Sequence[str]]) -> "ScriptedEngine":
        """Answers by script: the first key found in the prompt's text picks the script; turn t
        gets script[t] (the last entry again once the script is exhausted)."""
        def respond(prompt: str, turn: int) -> str:
            for marker, texts in scripts.items():
                if marker in prompt:
                    return texts[min(turn, len(texts) - 1)]
            raise KeyError("no script matches the prompt")
        return cls(tokenizer, respond)

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, stop=()):
        self.calls += 1
        out = []
        for p in prompts:
            self.prompts += 1
            text = p if isinstance(p, str) else self.tokenizer.decode(list(p), skip_special_tokens=False)
            answer = self.respond(text, max(text.count(_ASSISTANT) - 1, 0))
            ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.im_end_id]
            reason = "stop"
            if len(ids) > max_new_tokens:
                ids, reason = ids[:max_new_tokens], "length"
                answer = self.tokenizer.decode(ids, skip_special_tokens=False)
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), text=answer,
                                  finish_reason=reason, prompt_tokens=len(p)))
        return out


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


def whole_line_fix(hunk: Hunk, current: str) -> tuple[str, str] | None:
    """(old, new) of an `edit` that undoes a hunk changing exactly one line by replacing that
    line's text (without its indentation) where it occurs once in `current`; else None."""
    change = one_line_change(hunk)
    if change is None:
        return None
    line, clean, buggy = change[0], change[1].rstrip("\n"), change[2].rstrip("\n")
    indent = len(buggy) - len(buggy.lstrip())
    if not buggy.strip() or clean[:indent] != buggy[:indent] or current.count(buggy.strip()) != 1:
        return None
    old, new = buggy.strip(), clean[indent:].rstrip()
    lines = current.splitlines(True)
    expected = lines[:line - 1] + [lines[line - 1].replace(buggy, clean, 1)] + lines[line:]
    return (old, new) if apply_edit(current, old, new) == "".join(expected) else None


def fix_arguments(path: str, hunk: Hunk, current: str) -> dict[str, Any]:
    """The `edit` arguments that undo `hunk` in `current`, in the form a small policy writes
    most reliably: where one line changed, old = that line as grep showed it (without its
    indentation) and new = the fixed line, i.e. copy a line from the context and change a
    token. Without a line number there is no second lookup (number -> that line's text), the
    one step the tiny policy never got right. Where the line's text is not unique: line-scoped
    (line number + the differing tokens); else `fix_edit`'s unique stretch of the file."""
    whole = whole_line_fix(hunk, current)
    if whole is not None:
        return {"path": path, "old": whole[0], "new": whole[1]}
    fix = line_fix(hunk)
    if fix is not None and apply_edit(current, fix[1], fix[2], fix[0]) is not None:
        return {"path": path, "line": fix[0], "old": fix[1], "new": fix[2]}
    old, new = fix_edit(hunk, current)
    return {"path": path, "old": old, "new": new}


def _enclosing_function(source: str, line: int) -> tuple[str, int, int] | None:
    """(name, first line, last line) of the innermost def containing `line` (1-based)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno) \
                and (best is None or node.lineno >= best[1]):
            best = (node.name, node.lineno, node.end_lineno or node.lineno)
    return best


def _first_changed_line(hunk: Hunk) -> int:
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


def find_function_command(name: str, folder: str, max_lines: int) -> str:
    """The call that finds a function and shows its first `max_lines` lines, numbered."""
    return f'grep -rn -A {max_lines - 1} "def {name}(" {folder}'


TEST_COMMAND = "python3 -m pytest -q"


def oracle_actions(task: Mapping[str, Any], source: str | Path, max_lines: int = 30) -> list[tuple[str, dict]]:
    """The oracle's tool calls [(name, arguments)] for `task`, whose clean repository is at
    `source` (the bug patch is applied here, in memory, to find lines and functions)."""
    files = parse_patch(task["patch"])
    if not files:
        raise ValueError(f"{task['instance_id']}: the patch changes no file")
    mutation = task.get("mutation") or {}
    actions: list[tuple[str, dict]] = []
    shown: set[tuple[str, str]] = set()
    for path in sorted(files):
        hunks = files[path]
        clean = (Path(source) / path).read_text(encoding="utf-8")
        current = apply_hunks(clean, hunks)  # the buggy file
        buggy = current
        # bottom-up: an edit never shifts the line numbers of what is shown next
        for hunk in sorted(hunks, key=lambda h: -h.new_start):
            line = _first_changed_line(hunk)
            fn = _enclosing_function(buggy, line)
            name = fn[0] if fn else None
            if mutation.get("file") == path and mutation.get("function") and fn:
                name = str(mutation["function"]).rsplit(".", 1)[-1]
            if fn and (path, name) not in shown:
                shown.add((path, name))
                folder = path.split("/")[0] if "/" in path else "."
                actions.append(("bash", {"command": find_function_command(name, folder, max_lines)}))
            if not fn or line > fn[1] + max_lines - 1:  # the bug is not in what grep showed
                lo = max(1, line - max_lines // 2)
                actions.append(("bash", {"command": f"nl -ba {path} | sed -n '{lo},{lo + max_lines - 1}p'"}))
            args = fix_arguments(path, hunk, current)
            actions.append(("edit", args))
            current = apply_edit(current, args["old"], args["new"], args.get("line")) or current
    actions.append(("bash", {"command": TEST_COMMAND}))
    actions.append(("submit", {}))
    return actions


def oracle_texts(actions: Sequence[tuple[str, dict]]) -> list[str]:
    """The assistant turns: one tool-call block each, as the chat template writes them."""
    return [format_tool_call(name, args) for name, args in actions]


def oracle_episode(task: Mapping[str, Any], sandbox: Sandbox, tokenizer, cfg: Mapping[str, Any] | None = None,
                   *, env: TaskEnv | None = None, repos_root: str | Path | None = None,
                   test_timeout_s: float = 120.0) -> dict:
    """Run the oracle on `task` through the agent loop; returns the episode record (with
    `source: "oracle"`, logprobs 0). Keep it only if `record["outcome"] == "resolved"`."""
    c = agent_config(cfg)
    env = env if env is not None else task_env(task, repos_root)
    actions = oracle_actions(task, env.source, int(c["oracle"]["max_lines"]))
    texts = oracle_texts(actions)
    c["max_steps"] = max(int(c["max_steps"]), len(texts))
    engine = ScriptedEngine(tokenizer, lambda prompt, turn: texts[min(turn, len(texts) - 1)])
    record = run_episode(task, 0, engine, sandbox, c, env=env, tokenizer=tokenizer, policy="oracle",
                         source="oracle", test_timeout_s=test_timeout_s)
    record["oracle_actions"] = [name for name, _ in actions]
    return record


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, help="task JSONL file(s)")
    parser.add_argument("--tokenizer", required=True, help="the policy folder whose tokenizer to use")
    parser.add_argument("--out", required=True, help="JSONL of the resolved oracle episodes")
    parser.add_argument("--traj-dir", help="also export mini-swe-agent trajectories here")
    parser.add_argument("--manifest", help="manifest path (default: OUT with .manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    section = agent_config(cfg.data.get("agent"))
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sandbox = get_sandbox(cfg["sandbox"])
    repos_root = Path(cfg["repos"]["root"])
    tasks = sorted((t for f in args.tasks for t in read_jsonl(f)), key=lambda t: t["instance_id"])
    manifest = Manifest(stage=STAGE, params={"agent": section}, inputs=[*args.tasks, args.tokenizer],
                        code=stage_sources(__name__))
    kept, dropped = [], []
    with manifest.timed("oracle"):
        for task in tqdm(tasks, desc="oracle", unit="task", dynamic_ncols=True):
            rec = oracle_episode(task, sandbox, tokenizer, section, repos_root=repos_root,
                                 test_timeout_s=float(cfg["sandbox"]["test_timeout_s"]))
            (kept if rec["outcome"] == "resolved" else dropped).append(rec)
    for rec in dropped:
        log.warning("oracle did not resolve %s: %s (%s)", rec["instance_id"], rec["outcome"],
                    json.dumps(rec["verdict"].get("failing", []))[:300])
    for rec in kept:
        rec.pop("timing", None)  # machine-dependent; the manifest has the stage's timings
    out = Path(args.out)
    write_jsonl(out, kept)
    outputs = [out]
    if args.traj_dir:
        Path(args.traj_dir).mkdir(parents=True, exist_ok=True)
        export_trajectories(kept, args.traj_dir)
        outputs.append(Path(args.traj_dir))
    manifest.notes = {"tasks": len(tasks), "resolved": len(kept),
                      "unresolved": sorted(r["instance_id"] for r in dropped),
                      "mean_sequence_tokens": (sum(len(r["tokens"]) for r in kept) / len(kept)) if kept else 0}
    manifest.write(args.manifest or out.with_suffix(".manifest.json"), outputs=outputs)
