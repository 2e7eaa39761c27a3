"""Stage `generate`: bug candidates for one repository, as SWE-smith task instances.

Each candidate is one procedural mutation (forgeline.tasks.mutations) of a library function.
Every field that matters comes from running the real test suite in the sandbox: the clean
suite once (the baseline), then the whole suite once per mutation with the bug patched in.
FAIL_TO_PASS = tests that pass clean and FAIL/ERROR with the bug; PASS_TO_PASS = tests that
pass in both. A mutation that breaks nothing, times out, or breaks collection is discarded.
The problem statement is written from the failing test's pytest output, the way a user
reports a bug: what was called, what came back, what was expected; never the fix.

    forgeline generate --repo ledgerkit --out results/candidates/ledgerkit.jsonl \\
        --manifest results/candidates/ledgerkit.manifest.json --threads 2
"""
from __future__ import annotations

import argparse
import ast
import difflib
import logging
import random
import re
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Sequence

from tqdm import tqdm

from forgeline.config import Config, as_dict
from forgeline.provenance import Manifest, sha256_bytes, write_jsonl
from forgeline.sandbox import PatchError, SandboxError, TestRun, get_sandbox
from forgeline.sandbox.grading import is_test_path, representable
from forgeline.sandbox.verify import admissible, package_layout
from forgeline.seeds import derive_seed
from forgeline.tasks.mutations import Site, apply_mutation, enumerate_mutation_sites, parse, select_sites
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import instance_id

log = logging.getLogger(__name__)

# `created_at` is a constant: a wall-clock time would make two runs of the same inputs differ.
CREATED_AT = "2026-01-01T00:00:00Z"
# A mutation can turn a loop infinite; such a run is cut at this multiple of the clean suite's
# duration (at least MIN_MUTATION_TIMEOUT_S, at most sandbox.test_timeout_s) and discarded.
TIMEOUT_FACTOR = 10
MIN_MUTATION_TIMEOUT_S = 10.0


# -- patches ------------------------------------------------------------------------------------

def make_patch(relpath: str, before: str, after: str) -> str:
    """A git-format unified diff (3 lines of context) turning `before` into `after`.

    `relpath` is the file's path relative to the repository root; `git apply` in that root
    accepts the result and `git apply -R` undoes it. Returns "" when the texts are equal.
    """
    lines = []
    for line in difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                     fromfile=f"a/{relpath}", tofile=f"b/{relpath}", n=3):
        if not line.endswith("\n"):  # last line of a file without a final newline
            line += "\n\\ No newline at end of file\n"
        lines.append(line)
    if not lines:
        return ""
    return f"diff --git a/{relpath} b/{relpath}\n" + "".join(lines)


# -- classifying one bugged run ------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What one bugged run says: FAIL_TO_PASS / PASS_TO_PASS, or why it is discarded."""

    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    discard: str | None = None  # "timeout" | "collection_error" | "no_failing_test" | ...


def classify_run(clean: dict[str, str], bugged: dict[str, str], timed_out: bool) -> Verdict:
    """Compare per-test statuses of the clean and the bugged suite (pytest node id -> status).

    Only tests that PASSED clean and that the reference graders' log parsers can name
    (grading.representable) count. FAIL_TO_PASS = those that FAILED with the bug,
    PASS_TO_PASS = those that PASSED; one that ERRORs with the bug is in neither list
    (SWE-smith's rule: a setup error is no failing assertion). A bugged run that timed out, or
    in which one of them is missing (a module failed to import) or every one of them is an
    ERROR, is discarded.
    """
    baseline = sorted(t for t, s in clean.items() if s == "PASSED" and representable(t))
    if timed_out:
        return Verdict(discard="timeout")
    if not bugged or any(t not in bugged for t in baseline) or all(bugged[t] == "ERROR" for t in baseline):
        return Verdict(discard="collection_error")
    f2p = tuple(t for t in baseline if bugged[t] == "FAILED")
    p2p = tuple(t for t in baseline if bugged[t] == "PASSED")
    if not f2p:
        return Verdict(discard="no_failing_test")
    return Verdict(f2p, p2p)


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
    parts = relpath[:-3].split("/") if relpath.endswith(".py") else relpath.split("/")
    if parts[0] == "src" and len(parts) > 1:  # a src/ layout: the import name starts below it
        parts = parts[1:]
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


# -- one candidate ---------------------------------------------------------------------------------

def build_instance(snapshot: RepoSnapshot, site: Site, patch: str, verdict: Verdict, run: TestRun,
                   seed: int) -> dict:
    """The SWE-smith instance of one kept mutation (plus `bug_type` and `mutation`).

    Inputs: the repository snapshot (its SWE-smith names, commit, image), the site, the patch
    that introduces the bug, the verdict and the bugged run, and the stage seed (wording only).
    """
    blocks = parse_failures(run.log)
    failures = [read_failure(run.log, t, blocks, run.messages.get(t, ""))
                for t in verdict.fail_to_pass]
    return {
        "instance_id": instance_id(snapshot.repo_name, site.bug_type, sha256_bytes(patch.encode())),
        "repo": snapshot.repo,
        "base_commit": snapshot.commit,
        "image_name": snapshot.image,
        "created_at": CREATED_AT,
        "patch": patch,
        "FAIL_TO_PASS": sorted(verdict.fail_to_pass),
        "PASS_TO_PASS": sorted(verdict.pass_to_pass),
        "problem_statement": write_problem_statement(site, failures, patch, seed),
        "bug_type": site.bug_type,
        "mutation": site.describe(),
    }


@dataclass
class Outcome:
    site: Site
    instance: dict | None
    discard: str | None
    duration_s: float


def _try_site(sandbox, snapshot: RepoSnapshot, sources: dict[str, str], site: Site,
              clean: dict[str, str], timeout_s: float, seed: int) -> Outcome:
    before = sources[site.file]
    patch = make_patch(site.file, before, apply_mutation(before, site))
    try:
        run: TestRun = sandbox.run_tests(snapshot.env(), [patch], None, timeout_s)
    except PatchError:
        return Outcome(site, None, "patch_error", 0.0)
    except SandboxError as exc:
        log.warning("%s:%d %s: sandbox error: %s", site.file, site.line, site.kind, exc)
        return Outcome(site, None, "sandbox_error", 0.0)
    verdict = classify_run(clean, run.statuses, run.timed_out)
    if verdict.discard:
        return Outcome(site, None, verdict.discard, run.duration_s)
    return Outcome(site, build_instance(snapshot, site, patch, verdict, run, seed), None,
                   run.duration_s)


def _run_all(try_one, sites: list[Site], threads: int, max_keep: int) -> tuple[list[Outcome], int]:
    """Run `try_one` over `sites` (up to `threads` at once) until `max_keep` are kept.

    Returns (outcomes of the deterministic prefix, its length): the prefix ends at the site
    that made the max_keep-th kept candidate in site order, so neither the result nor the
    counts depend on which run finished first.
    """
    results: dict[int, Outcome] = {}
    todo = iter(range(len(sites)))
    pending: dict = {}
    cutoff = len(sites)

    def prefix_cutoff() -> int | None:
        kept = 0
        i = 0
        while i in results:
            kept += results[i].instance is not None
            i += 1
            if kept >= max_keep:
                return i
        return None

    bar = tqdm(total=len(sites), desc="mutations", unit="run", leave=False, dynamic_ncols=True)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        def fill() -> None:
            while len(pending) < max(1, threads):
                i = next(todo, None)
                if i is None or i >= cutoff:
                    return
                pending[pool.submit(try_one, sites[i])] = i

        fill()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                results[pending.pop(fut)] = fut.result()
                bar.update(1)
            found = prefix_cutoff()
            if found is not None:
                cutoff = min(cutoff, found)
            fill()
    bar.close()
    return [results[i] for i in range(cutoff)], cutoff


# -- the stage -------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="repository name (a folder under repos.root)")
    parser.add_argument("--out", required=True, help="candidates, JSONL (results/candidates/REPO.jsonl)")
    parser.add_argument("--manifest", required=True, help="manifest JSON written last")
    parser.add_argument("--threads", type=int, default=1, help="mutation test runs at once (default 1)")


def run(cfg: Config, args: argparse.Namespace) -> None:
    gen = cfg.tasks.generate
    root = cfg.repos.root
    kinds = list(gen.kinds)
    max_keep, max_tries = int(gen.max_per_repo), int(gen.max_tries_per_repo)
    snapshot = RepoSnapshot.load(root, args.repo)
    env = snapshot.env()
    seed = derive_seed(cfg.seed, "generate", snapshot.name, bits=64)  # one per repository
    manifest = Manifest(
        stage="generate",
        params={"seed": cfg.seed, "repos.root": root, "sandbox": as_dict(cfg.sandbox),
                "tasks.generate": as_dict(gen)},
        seeds={"generate": seed}, inputs=[str(snapshot.path)], code=__name__)

    with manifest.timed("sites"):
        # only files whose fix the verifier admits: a bug in one it strips (a package's
        # __main__.py, say) could never be graded solved
        packages, files = package_layout(snapshot.path)
        sources = {rel: p.read_text(encoding="utf-8") for p in snapshot.source_files()
                   if admissible(rel := p.relative_to(snapshot.path).as_posix(), packages, files) is None}
        sites = [s for rel, text in sorted(sources.items())
                 for s in enumerate_mutation_sites(text, kinds, path=rel)]
        chosen = select_sites(sites, kinds, seed, max_tries)
    log.info("%s: %d mutation sites in %d files; trying %d", snapshot.name, len(sites), len(sources),
             len(chosen))

    sandbox = get_sandbox(cfg.sandbox)
    suite_timeout = float(cfg.sandbox.test_timeout_s)
    with manifest.timed("baseline"):
        clean = sandbox.run_tests(env, [], None, suite_timeout)
    passing = sorted(t for t, s in clean.statuses.items() if s == "PASSED")
    if clean.timed_out or not passing:
        raise SandboxError(f"{snapshot.name}: the clean test suite does not pass (timed out: "
                           f"{clean.timed_out}, {len(clean.statuses)} tests, none passing); log tail:\n"
                           + clean.log[-2000:])
    not_passing = sorted(set(clean.statuses) - set(passing))
    if not_passing:
        log.warning("%s: %d tests do not pass on the clean snapshot; they are never used: %s",
                    snapshot.name, len(not_passing), ", ".join(not_passing[:10]))
    unnameable = [t for t in passing if not representable(t)]
    if unnameable:
        log.warning("%s: %d passing test ids contain whitespace, which the SWE-bench/SWE-smith log "
                    "parsers cannot name; they are never used: %s", snapshot.name, len(unnameable),
                    ", ".join(unnameable[:5]))
    timeout_s = round(min(suite_timeout, max(MIN_MUTATION_TIMEOUT_S, TIMEOUT_FACTOR * clean.duration_s)), 1)

    with manifest.timed("mutations"):
        outcomes, tried = _run_all(
            lambda site: _try_site(sandbox, snapshot, sources, site, clean.statuses, timeout_s, seed),
            chosen, args.threads, max_keep)

    instances: dict[str, dict] = {}
    discarded: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.instance is None:
            discarded[outcome.discard] = discarded.get(outcome.discard, 0) + 1
        elif outcome.instance["instance_id"] in instances:
            discarded["duplicate"] = discarded.get("duplicate", 0) + 1
        else:
            instances[outcome.instance["instance_id"]] = outcome.instance
    records = [instances[k] for k in sorted(instances)]
    write_jsonl(args.out, records)

    def per_kind(items) -> dict[str, int]:
        items = list(items)
        return {k: sum(1 for s in items if s.kind == k) for k in kinds}

    kept_sites = [o.site for o in outcomes if o.instance is not None
                  and instances.get(o.instance["instance_id"]) is o.instance]
    manifest.notes = {
        "repo": snapshot.name, "threads": args.threads, "base_commit": snapshot.commit, "image_name": snapshot.image,
        "source_files": sorted(sources),
        "baseline": {"tests": len(clean.statuses), "passed": len(passing), "not_passing": not_passing,
                     "unnameable": unnameable},
        "mutation_timeout_s": timeout_s,
        "sites_found": per_kind(sites), "selected": len(chosen), "tried": tried,
        "tried_per_kind": per_kind(o.site for o in outcomes), "kept": len(records),
        "kept_per_kind": per_kind(kept_sites),
        "discarded": dict(sorted(discarded.items())),
        "not_run": len(chosen) - tried,
    }
    manifest.write(args.manifest, outputs=[args.out])
    log.info("%s: kept %d of %d tried (%s); discarded %s", snapshot.name, len(records), tried,
             ", ".join(f"{k} {v}" for k, v in manifest.notes["kept_per_kind"].items()), discarded)
