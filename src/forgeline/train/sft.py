"""Stage `sft`: supervised fine-tuning of the tiny base policy on agent trajectories.

Data (never a pool or panel repository: asserted):

- oracle episodes of the `repos.sft` repositories (`forgeline agent-oracle` records: `tokens`,
  `action_mask`); the loss is on the action tokens only (the assistant turns, each with its
  closing <|im_end|>), exactly the tokens a policy would have generated;
- synthetic edit trajectories, built without any sandbox: one `forgeline.tasks.mutations`
  mutation of a function of some Python source (the SFT repositories' package code and the
  interpreter's standard library), rendered as the oracle's conversation
  (statement naming the function -> `grep -rn -A N "def f(" .` -> the scan: candidate edits
  top to bottom, each followed by the test call that takes it back when the suite fails,
  until the fix -> `submit`), with the tool outputs
  written the way the agent writes them (`exit code: N\\n` + output, cut by
  `tools.truncate`; `edited PATH`). There are no tests to run: a test run's output is
  synthesised in pytest's shape (`suite_output`), failing (and `git checkout .`'s line) after a
  wrong edit, passing after the fix.
  A `synthetic.recovery` share first shows one turn broken or, for an edit, failed
  (`with_recovery`; mask 0) and the agent's or the edit tool's error answer to it.

Training: examples cut to `max_seq_len`, shuffled per epoch with a seeded RNG, packed into
batches of at most `tokens_per_batch` padded tokens, AdamW, linear warm-up then cosine (or
linear) decay, gradient-norm clipping, torch deterministic algorithms. Writes a Hugging Face
folder (weights + tokenizer, like `policy-init`) with `loss_curve.json` / `loss_curve.png`,
atomically (temp folder + rename), then the manifest.

Pure parts (unit-tested): `conversation_tokens`, `example_from_record`, `synthetic_messages`,
`suite_output`, `broken_call`, `failed_edit`, `with_recovery`,
`truncate_example`, `make_batches`, `collate`, `masked_lm_loss`, `lr_at`.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import keyword
import logging
import math
import random
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.oracle import (REVERTED, TEST_COMMAND, _enclosing_function,
                                    _first_changed_line, find_function_command, fix_arguments,
                                    grep_after, oracle_texts, parse_patch, scan_to_fix, shown_lines,
                                    shown_path)
from forgeline.agent.tools import IM_END, NO_CALL_MESSAGE, SYSTEM_PROMPT, apply_edit, tool_schemas, truncate
from forgeline.config import as_dict
from forgeline.params import SftConfig
from forgeline.plots import figure, save_png
from forgeline.policy.chat import assistant_message, format_tool_call, parse_tool_calls, render, tool_message
from forgeline.policy.tokenizer import collect_corpus, portable_tokenizer_config, stdlib_dir
from forgeline.provenance import (MANIFEST_NAME, Manifest, atomic_dir, read_jsonl,
                                  write_json)
from forgeline.seeds import stage_seed
from forgeline.tasks.generate import LOCATION, RAISES, REPRO, TITLES, VALUE
from forgeline.tasks.mutations import KINDS, apply_mutation, candidate_sites, mutated_if_valid
from forgeline.tasks.schema import repo_key

log = logging.getLogger(__name__)
STAGE = "train.sft"

# -- examples -------------------------------------------------------------------------------

def conversation_tokens(tokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[dict]
                        ) -> tuple[list[int], list[int]]:
    """(tokens, action_mask) of a conversation, built like the agent's record: the rendered
    non-assistant parts tokenized, each assistant turn's content tokenized alone plus
    <|im_end|> (mask 1, or 0 for a turn marked `"train": False`), the rest mask 0. Every boundary is a special token, so `tokens` equals
    the tokenization of the full rendering (tested)."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False) if text else []  # noqa: E731
    tokens: list[int] = []
    mask: list[int] = []
    pos = 0
    for k, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        prompt = render(tokenizer, messages[:k], tools, add_generation_prompt=True)
        part = enc(prompt[pos:])
        tokens += part
        mask += [0] * len(part)
        action = enc(msg["content"]) + [im_end]
        tokens += action
        mask += [int(msg.get("train", True))] * len(action)
        pos = len(prompt) + len(msg["content"]) + len(IM_END)
    full = render(tokenizer, messages, tools, add_generation_prompt=False)
    tail = enc(full[pos:])
    tokens += tail
    mask += [0] * len(tail)
    return tokens, mask


def example_from_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """An SFT example from an agent record (oracle or policy): its `tokens` and `action_mask`."""
    tokens, mask = list(record["tokens"]), list(record["action_mask"])
    if len(tokens) != len(mask):
        raise ValueError(f"{record.get('instance_id')}: tokens and action_mask differ in length")
    return {"id": f"oracle:{record['instance_id']}", "tokens": tokens, "mask": mask}


def truncate_example(example: Mapping[str, Any], max_len: int) -> dict[str, Any] | None:
    """The example cut to its first `max_len` tokens; None if no action token is left."""
    tokens, mask = example["tokens"][:max_len], example["mask"][:max_len]
    if not any(mask[1:]):
        return None
    return {**example, "tokens": list(tokens), "mask": list(mask)}


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
                       max_tool_output_chars: int = 2000, max_guesses: int = 0) -> list[dict] | None:
    """An oracle-style conversation that fixes `site` (a mutations.Site of `clean`, the text of
    the file at repo-relative `path`): system, user (a statement naming the function), then
    grep / edit / test call / submit turns with synthesised tool results; with `max_guesses`
    > 0 the edits are the scan's up to the fix (`oracle.scan_to_fix`), each with its test call.
    None when the mutation cannot be rendered as one unique edit (several hunks, an ambiguous
    `old`, no newline at the end of the file) or the scan does not reach it."""
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
    line = _first_changed_line(hunk)
    fn = _enclosing_function(buggy, line)
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
        scan = scan_to_fix(buggy, clean, path, shown_lines(fn, max_lines), max_guesses)
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
                            tools: Sequence[dict] = ()) -> list[tuple[str, list[dict]]]:
    """Up to `n` (id, messages) synthetic conversations from `files` [(repo-relative path,
    text)]: files in a seeded hash order, one mutation kind per file (rotating), at most
    `per_file` sites per file drawn with random.Random(seed:path), each reaching its fix by the
    scan when `max_guesses` > 0 (sites it does not reach are skipped), and a `recovery` share with one
    broken call and the agent's answer to it before a turn (`with_recovery`; `tools` are the
    schemas the calls are checked against). A `rename` share of them
    get fresh names for the function, its folder and module (`fresh_names`): a name the
    model cannot have memorised must be copied from the context, which is what the grep,
    nl and edit turns of a task of an unseen repository need. Deterministic."""
    out: list[tuple[str, list[dict]]] = []
    words = identifier_words(files) if rename > 0 else []
    order = sorted(files, key=lambda f: _rank(seed, f[0]))
    for i, (path, text) in enumerate(order):
        if len(out) >= n:
            break
        kind = kinds[i % len(kinds)]
        found = candidate_sites(text, [kind], path)
        if found is None:
            continue
        sites, reference = found
        rng = random.Random(_rank(seed, path))
        rng.shuffle(sites)
        got = 0
        for site in sites:
            if got >= per_file or len(out) >= n:
                break
            if mutated_if_valid(text, site, reference, path) is None:
                continue
            msgs = synthetic_messages(text, path, site, max_lines, max_tool_output_chars,
                                      max_guesses)
            if msgs is None:
                continue
            sid = f"synthetic:{path}:{site.line}:{site.col}:{site.kind}:{site.detail}"
            pick = random.Random(_rank(seed, sid))
            if words and pick.random() < rename:
                mapping = fresh_names(msgs, path, site.function, words, pick)
                msgs = rename_identifiers(msgs, mapping)
                sid += ":renamed"
            if recovery > 0 and pick.random() < recovery:
                msgs = with_recovery(msgs, tools, pick)
                sid += ":recovery"
            out.append((sid, msgs))
            got += 1
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


# -- batching and the loss --------------------------------------------------------------------

def make_batches(lengths: Sequence[int], tokens_per_batch: int, seed: int, epoch: int) -> list[list[int]]:
    """Index batches for one epoch: indices shuffled by random.Random(f"{seed}:{epoch}"), then
    packed in that order so that len(batch) x max length <= tokens_per_batch (a longer single
    example is a batch alone). Every index appears exactly once."""
    order = list(range(len(lengths)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > tokens_per_batch:
            batches.append(cur)
            cur, new_longest = [], lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    return batches


def collate(examples: Sequence[Mapping[str, Any]], pad_id: int):
    """(input_ids, attention_mask, loss_mask) LongTensors [B, T], right-padded with pad_id."""
    import torch

    width = max(len(e["tokens"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    loss = torch.zeros((len(examples), width), dtype=torch.long)
    for b, e in enumerate(examples):
        n = len(e["tokens"])
        ids[b, :n] = torch.tensor(e["tokens"], dtype=torch.long)
        att[b, :n] = 1
        loss[b, :n] = torch.tensor(e["mask"], dtype=torch.long)
    return ids, att, loss


def masked_lm_loss(logits, input_ids, loss_mask):
    """Mean next-token cross-entropy over the positions whose TARGET token has loss_mask 1
    (logits[:, t] predicts input_ids[:, t+1]). Returns (loss, number of target tokens)."""
    import torch.nn.functional as F

    target = input_ids[:, 1:]
    m = loss_mask[:, 1:].bool()
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    count = int(m.sum())
    return (nll[m].sum() / max(count, 1)), count


def action_loss(model, input_ids, attention_mask, loss_mask):
    """`masked_lm_loss` of a causal LM without its full logits: the output head runs only
    on the positions that predict an action token (~15% of an agent conversation), which
    saves most of the head's time and memory. Returns (loss, number of target tokens)."""
    import torch.nn.functional as F

    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    m = loss_mask[:, 1:].bool()
    logits = model.get_output_embeddings()(hidden[:, :-1][m])
    count = int(m.sum())
    return F.cross_entropy(logits.float(), input_ids[:, 1:][m], reduction="sum") / max(count, 1), count


def lr_at(step: int, total: int, warmup: int, base: float, min_ratio: float, kind: str = "cosine") -> float:
    """Learning rate of optimizer step `step` (0-based) of `total`: linear warm-up over
    `warmup` steps to `base`, then cosine or linear decay to base x min_ratio at the end."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    span = max(total - warmup, 1)
    frac = min(max(step - warmup, 0) / span, 1.0)
    decay = 0.5 * (1 + math.cos(math.pi * frac)) if kind == "cosine" else 1 - frac
    return base * (min_ratio + (1 - min_ratio) * decay)


def train(model, examples: Sequence[Mapping[str, Any]], cfg: SftConfig, seed: int,
          pad_id: int, progress: bool = True) -> list[dict]:
    """Train `model` in place on `examples` ({tokens, mask}) as `cfg` (the config's train.sft)
    says; returns the loss curve
    [{step, epoch, loss, tokens, lr, grad_norm}]. Deterministic for the same inputs and seed
    (torch.manual_seed(seed), deterministic algorithms, seeded batch order)."""
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    lengths = [len(e["tokens"]) for e in examples]
    epochs = int(cfg.epochs)
    plan = [(ep, b) for ep in range(epochs) for b in make_batches(lengths, int(cfg.tokens_per_batch), seed, ep)]
    if int(cfg.max_steps) > 0:
        # more steps than the epochs give: keep drawing epochs
        ep = epochs
        while len(plan) < int(cfg.max_steps):
            plan += [(ep, b) for b in make_batches(lengths, int(cfg.tokens_per_batch), seed, ep)]
            ep += 1
        plan = plan[: int(cfg.max_steps)]
    total = len(plan)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(cfg.weight_decay)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(cfg.lr), betas=tuple(cfg.betas), eps=1e-8)
    model.train()
    curve: list[dict] = []
    bar = tqdm(plan, desc="sft", unit="step", dynamic_ncols=True, disable=not progress)
    for step, (epoch, idx) in enumerate(bar):
        lr = lr_at(step, total, int(cfg.warmup_steps), float(cfg.lr), float(cfg.min_lr_ratio),
                   cfg.schedule)
        for g in opt.param_groups:
            g["lr"] = lr
        ids, att, lmask = collate([examples[i] for i in idx], pad_id)
        loss, count = action_loss(model, ids, att, lmask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg.grad_clip))
        opt.step()
        curve.append({"step": step, "epoch": epoch, "loss": round(float(loss.detach()), 6), "tokens": count,
                      "examples": len(idx), "lr": lr, "grad_norm": round(float(norm), 6)})
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", lr=f"{lr:.1e}")
    model.eval()
    return curve


def plot_curve(curve: Sequence[Mapping[str, Any]], path: Path) -> None:
    """A PNG of the loss per step (and its 20-step moving average)."""
    steps = [c["step"] for c in curve]
    loss = [c["loss"] for c in curve]
    k = 20
    avg = [sum(loss[max(0, i - k + 1):i + 1]) / len(loss[max(0, i - k + 1):i + 1]) for i in range(len(loss))]
    with figure(figsize=(7, 4), dpi=100) as (fig, ax):
        ax.plot(steps, loss, lw=0.6, alpha=0.5, label="loss (action tokens)")
        ax.plot(steps, avg, lw=1.5, label=f"{k}-step mean")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title("SFT")
        ax.legend()
        fig.tight_layout()
        save_png(fig, path)


# -- the stage ------------------------------------------------------------------------------

def check_sft_repos(records: Iterable[Mapping[str, Any]], sft: Sequence[str], forbidden: Sequence[str]) -> None:
    """Raise unless every record's repository is an SFT repository and none is forbidden
    (the RL pool, the panel)."""
    sft_set, bad = set(sft), set(forbidden)
    assert not sft_set & bad, f"repos.sft overlaps the pool/panel: {sorted(sft_set & bad)}"
    for rec in records:
        key = repo_key(rec["repo"])
        if key not in sft_set or key in bad:
            raise ValueError(f"{rec.get('instance_id')}: repository {key} is not an SFT repository "
                             f"(repos.sft = {sorted(sft_set)}): SFT never sees pool or panel tasks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--init", required=True, help="the policy folder to start from (policy-init)")
    parser.add_argument("--oracle", nargs="*", default=[], help="oracle episode JSONL file(s)")
    parser.add_argument("--out", required=True, help="the trained policy folder")
    parser.add_argument("--manifest", help=f"manifest path (default: OUT/{MANIFEST_NAME})")


def run(cfg, args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    c, a = cfg.train.sft, cfg.agent
    torch.set_num_threads(max(1, int(c.threads)))
    seed = stage_seed(cfg.seed, STAGE)
    repos_root = Path(cfg.repos.root)
    sft_repos = sorted(cfg.repos.sft)
    forbidden = sorted(set(cfg.repos.pool) | set(cfg.repos.panel))
    manifest = Manifest(stage=STAGE, params={"train.sft": as_dict(c), "agent.tools": a.tools},
                        seeds={"sft": seed}, inputs=[args.init, *args.oracle],
                        code=__name__)
    tokenizer = AutoTokenizer.from_pretrained(args.init)
    model = AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32)

    with manifest.timed("data"):
        records = [r for f in sorted(args.oracle) for r in read_jsonl(f)]
        check_sft_repos(records, sft_repos, forbidden)
        records = sorted((r for r in records if r.get("outcome") == "resolved"),
                         key=lambda r: r["instance_id"])
        examples = [example_from_record(r) for r in records] * max(1, int(c.oracle_repeat))
        s = c.synthetic
        tools = tool_schemas(a.tools)
        synth: list = []
        if int(s.examples) > 0:
            files = synthetic_sources([repos_root / r for r in sft_repos], bool(s.stdlib),
                                      bool(s.repos), int(s.max_file_bytes))
            synth = synthetic_conversations(files, int(s.examples), seed, s.kinds,
                                            int(s.max_lines), int(s.per_file),
                                            int(a.max_tool_output_chars), float(s.rename),
                                            int(s.max_guesses), float(s.recovery), tools)
        for sid, msgs in synth:
            tokens, mask = conversation_tokens(tokenizer, msgs, tools)
            examples.append({"id": sid, "tokens": tokens, "mask": mask})
        cut = [truncate_example(e, int(c.max_seq_len)) for e in examples]
        n_cut = sum(len(e["tokens"]) > int(c.max_seq_len) for e in examples)
        examples = [e for e in cut if e is not None]
    if not examples:
        raise SystemExit("no SFT examples (no resolved oracle episodes and no synthetic ones)")
    log.info("SFT data: %d oracle episodes (x%d), %d synthetic, %d cut to %d tokens; "
             "%d tokens, %d action", len(records), int(c.oracle_repeat), len(synth), n_cut,
             int(c.max_seq_len),
             sum(len(e["tokens"]) for e in examples), sum(sum(e["mask"]) for e in examples))
    t0 = time.process_time()
    with manifest.timed("train"):
        curve = train(model, examples, c, seed, tokenizer.pad_token_id)
    cpu_s = time.process_time() - t0

    out = Path(args.out)
    with atomic_dir(out, owned=(MANIFEST_NAME, "config.json")) as tmp:
        with manifest.timed("save"):
            tokenizer.save_pretrained(tmp)
            model.save_pretrained(tmp)
            portable_tokenizer_config(tmp / "tokenizer_config.json")
            write_json(tmp / "loss_curve.json", curve)
            plot_curve(curve, tmp / "loss_curve.png")
    outputs = sorted(p for p in out.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    n_tok = sum(x["tokens"] for x in curve)
    first = [x["loss"] for x in curve[:10]]
    last = [x["loss"] for x in curve[-10:]]
    manifest.notes = {
        "oracle_episodes": len(records), "oracle_repos": sorted({repo_key(r["repo"]) for r in records}),
        "synthetic_examples": len(synth), "examples": len(examples),
        "cut_examples": n_cut,
        "sequence_tokens": sum(len(e["tokens"]) for e in examples),
        "action_tokens": sum(sum(e["mask"]) for e in examples),
        "steps": len(curve), "trained_action_tokens": n_tok,
        "loss_first10": sum(first) / max(len(first), 1), "loss_last10": sum(last) / max(len(last), 1),
        "train_cpu_s": round(cpu_s, 1),
    }
    manifest.write(Path(args.manifest) if args.manifest else out / MANIFEST_NAME, outputs=outputs)
    log.info("wrote %s: %d steps, loss %.3f -> %.3f", out, len(curve), manifest.notes["loss_first10"],
             manifest.notes["loss_last10"])
