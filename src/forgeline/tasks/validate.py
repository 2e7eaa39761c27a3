"""Validation: run each task's tests in the sandbox and keep only the tasks that hold up.

One batch per repository. The clean snapshot's whole suite is run `tasks.validate.gold_runs`
times ONCE for the batch (the first run is also the collection of node ids); every instance is
then checked, in this order, and stops at its first failed check:

    structure      fields agree with the snapshot (base_commit, when given, is its commit;
                   instance_id names repo and commit), FAIL_TO_PASS non-empty, FAIL_TO_PASS and
                   PASS_TO_PASS disjoint, every node id in the clean suite and free of whitespace
                   (grading.representable), the patch touches no test file
    patch_applies  the bug patch applies in a fresh sandbox environment
    flaky          no FAIL_TO_PASS / PASS_TO_PASS test changes outcome across the gold runs
    nop            with the bug in, every FAIL_TO_PASS test FAILs or ERRORs (only those run)
    oracle         with the bug reversed (= the clean snapshot) every FAIL_TO_PASS and
                   PASS_TO_PASS test passes in every gold run (SWE-bench grading), and reversing
                   the patch really restores the snapshot's files
    verifier       the gold fix (the patch reversed) graded by the verifier itself, exactly the
                   run an agent's verdict comes from (fresh environment, bug patch, the fix as a
                   filtered diff, tests restored, only the listed tests): resolved
    alignment      (tasks.validate.alignment) the problem statement names an identifier the
                   FAIL_TO_PASS tests use, and quotes no code line of the patch (docs/validation.md)

`flaky` is part of the oracle in spirit but is decided before the NOP run: it needs no test
run of its own (the gold runs are done), and deciding it first keeps the rejection reason of a
task that hangs on a flaky FAIL_TO_PASS test from depending on how that test happened to behave
in its NOP run. `tasks.validate.strong_model` needs an agent and a model endpoint, which
forgeline does not have yet: enabling it fails the stage at once.

Outputs hold only deterministic facts (no durations, no temp paths): same inputs + params =>
byte-identical files. Timings go to the manifest.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import keyword
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from tqdm import tqdm

from forgeline.config import ConfigError, as_dict
from forgeline.params import ValidateConfig
from forgeline.provenance import Manifest, owned_tempdir, read_jsonl, write_json, write_jsonl
from forgeline.sandbox import PatchError, Sandbox, TestRun, get_sandbox
from forgeline.sandbox.grading import grade, is_test_path, representable
from forgeline.sandbox.verify import gold_fix, verify
from forgeline.tasks.mutations import parse
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import InstanceError, normalize_instance, parse_patch, repo_key

log = logging.getLogger(__name__)

# Rejection keys, in the order the checks run (every key is in the report, even at 0).
CHECKS = ("structure", "patch_applies", "flaky", "nop", "oracle", "verifier", "alignment")
NOP_FAILING = ("FAILED", "ERROR")
MIN_IDENTIFIER = 3  # shortest identifier that counts as "named" by a problem statement
MIN_LEAK_LINE = 8  # shortest stripped patch line whose presence in a statement is a leak
_LIST_MAX = 5  # node ids named in one rejection reason


class ValidationError(RuntimeError):
    """The batch cannot be validated at all (e.g. the clean suite does not run)."""


def _listing(items: Sequence[str], limit: int = _LIST_MAX) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# -- patches -------------------------------------------------------------------------------

def patch_files(patch: str) -> list[str]:
    """Repository-relative paths a unified (git) diff touches, sorted."""
    return parse_patch(patch)[0]


def patch_code_lines(patch: str, min_chars: int = MIN_LEAK_LINE) -> list[str]:
    """Added and removed code lines of a diff, stripped, at least `min_chars` long, sorted, unique."""
    return sorted({s for s in (t.strip() for t in parse_patch(patch)[1]) if len(s) >= min_chars})


# -- the checks (pure: data in, a rejection reason or None out) -----------------------------

def repo_matches(record_repo: str, name: str) -> bool:
    """Whether an instance's `repo` field names the snapshot folder `name` (schema.repo_key)."""
    return repo_key(record_repo) == name


def check_structure(inst: dict, snapshot: RepoSnapshot, suite: Iterable[str] | None) -> str | None:
    """Reason the instance is structurally unusable at `snapshot`, or None.

    `suite` is the set of node ids of the clean suite (None: skip that part, for a pre-check
    before the suite has run). Checked in order: base_commit (optional, as upstream leaves it
    out; when present it is the snapshot's commit), instance_id (SWE-smith's
    `OWNER__NAME.<commit8>.` prefix of this snapshot), FAIL_TO_PASS non-empty, FAIL_TO_PASS and
    PASS_TO_PASS disjoint, every node id collected and nameable by the reference graders'
    log parsers, the patch touches at least one file and no test file (grading.is_test_path).
    """
    commit = snapshot.commit
    base = inst.get("base_commit")
    if base and base != commit:
        return (f"base_commit {base} is not the snapshot's commit {commit}: the repository "
                f"changed since the task was made (stale task)")
    iid = inst["instance_id"]
    if not iid.startswith(snapshot.repo_name + "."):
        return (f"instance_id {iid!r} does not name repository {snapshot.name!r} at commit "
                f"{commit[:8]} (expected '{snapshot.repo_name}.<bug_type>__<hash8>')")
    f2p, p2p = inst["FAIL_TO_PASS"], inst["PASS_TO_PASS"]
    if not f2p:
        return "FAIL_TO_PASS is empty: no test shows the bug"
    both = sorted(set(f2p) & set(p2p))
    if both:
        return f"test(s) in both FAIL_TO_PASS and PASS_TO_PASS: {_listing(both)}"
    unnameable = sorted(t for t in set(f2p) | set(p2p) if not representable(t))
    if unnameable:
        return (f"test id(s) with whitespace, which the SWE-bench/SWE-smith log parsers cannot "
                f"name: {_listing(unnameable)}")
    if suite is not None:
        suite = set(suite)
        unknown = sorted(set(f2p) - suite) + sorted(set(p2p) - suite - set(f2p))
        if unknown:
            return f"test(s) not in the clean suite ({len(suite)} collected): {_listing(unknown)}"
    files = patch_files(inst["patch"])
    if not files:
        return "the patch touches no file"
    tests = [f for f in files if is_test_path(f)]
    if tests:
        return (f"the patch touches test file(s) {_listing(tests)}: the verifier restores "
                f"those, so the bug would not reach grading")
    return None


def flaky_tests(runs: Sequence[dict[str, str]]) -> list[str]:
    """Node ids whose status differs across the runs (absent from some run counts), sorted."""
    ids = set().union(*runs) if runs else set()
    return sorted(t for t in ids if len({run.get(t) for run in runs}) > 1)


def check_flaky(inst: dict, flaky: Iterable[str]) -> str | None:
    """Reason the instance depends on a flaky test (FAIL_TO_PASS or PASS_TO_PASS), or None."""
    hit = sorted(set(flaky) & (set(inst["FAIL_TO_PASS"]) | set(inst["PASS_TO_PASS"])))
    if hit:
        return f"depends on flaky test(s) (outcome differs across gold runs): {_listing(hit)}"
    return None


def check_nop(statuses: dict[str, str], fail_to_pass: Sequence[str], timed_out: bool = False,
              timeout_s: float | None = None) -> str | None:
    """Reason the bug does not show (some FAIL_TO_PASS test neither FAILED nor ERRORed), or None.

    `statuses` are those of the run of the FAIL_TO_PASS tests with the bug patch applied.
    """
    if timed_out:
        return ("the FAIL_TO_PASS run with the bug in timed out"
                + (f" after {timeout_s:g} s (sandbox.test_timeout_s)" if timeout_s else ""))
    ok = [t for t in fail_to_pass if statuses.get(t) not in NOP_FAILING]
    if ok:
        shown = [f"{t} ({statuses.get(t) or 'not run'})" for t in sorted(ok)]
        return f"FAIL_TO_PASS test(s) do not fail with the bug in: {_listing(shown)}"
    return None


def check_oracle(gold: Sequence[dict[str, str]], fail_to_pass: Sequence[str],
                 pass_to_pass: Sequence[str]) -> str | None:
    """Reason the clean snapshot (the bug reversed) does not resolve the task in every gold run.

    Grading is SWE-bench's (grading.grade). The first gold run that does not resolve is named.
    """
    for i, statuses in enumerate(gold, 1):
        g = grade(statuses, fail_to_pass, pass_to_pass)
        if not g["resolved"]:
            shown = [f"{t} ({statuses.get(t) or 'not run'})" for t in g["failing"]]
            return (f"with the bug reversed, test(s) do not pass in gold run {i}/{len(gold)}: "
                    f"{_listing(shown)}")
    return None


def check_verifier(result: dict) -> str | None:
    """Reason the verifier (sandbox.verify: a fresh environment, the bug patch, the fix filtered
    as an agent's diff, only the listed tests; the run an agent's verdict comes from) does not
    grade the gold fix resolved, or None."""
    if result["resolved"]:
        return None
    if result["stripped"]:
        return ("the verifier strips the gold fix: "
                + "; ".join(f"{s['path']} ({s['reason']})" for s in result["stripped"]))
    if not result["applied"]:
        return f"the gold fix does not apply in the verifier: {result.get('error', '')[:200]}"
    if result["timed_out"]:
        return "the verifier's run of the gold fix timed out"
    return (f"the verifier grades the gold fix unresolved (pytest exit code {result['exit_code']}): "
            f"{_listing(result['failing'])} do not pass")


# -- alignment (pure) ----------------------------------------------------------------------

# Words that are identifiers in form but carry no signal about what a test exercises.
STOPWORDS = frozenset("""
a about above after again against all also an and any are as at be because been before being
below between both but by can cannot could did do does doing done down during each else every
few for from further get gets got had has have having here how however if in instead into is it
its itself just like may might more most much must no nor not now of off on once only or other
our out over own same should since so some such than that the their them then there these they
this those through thus to too under until up upon very via was we were what when where whether
which while who whom why will with within without would yet you your
wrong bug bugs broken break breaks issue issues problem problems error errors fail fails failed
failing failure fix fixed fixes expect expected expects actual actually correct correctly incorrect
incorrectly instead result results return returns returned value values output outputs input
inputs case cases code function functions method methods class classes call calls called calling
test tests testing pytest assert raises raise raised exception exceptions behavior behaviour
should now still even though see seems seem happen happens happened given gives give using use
used uses work works working number numbers string strings list lists dict item items type types
true false none null self cls new old one two three first second last time times way thing things
when line lines file files module package data object objects argument arguments param params
parameter parameters default defaults set sets run runs running check checks version report
reports reported approx mark parametrize fixture fixtures monkeypatch capsys tmp_path
""".split())
_BUILTIN_NAMES = frozenset(n.lower() for n in dir(builtins)) | frozenset(keyword.kwlist)
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _meaningful(name: str) -> bool:
    low = name.lower()
    return (len(name) >= MIN_IDENTIFIER and low not in STOPWORDS and low not in _BUILTIN_NAMES
            and not low.startswith(("assert", "test_", "__")) and low.strip("_") != "")


def statement_identifiers(text: str) -> set[str]:
    """Identifier-like words of a problem statement, lowercased, minus stopwords and builtins.

    `Ledger.post()` yields "ledger" and "post"; words shorter than MIN_IDENTIFIER are dropped.
    """
    return {t.lower() for t in _TOKEN.findall(text) if _meaningful(t)}


def split_node_id(node_id: str) -> tuple[str, list[str], str]:
    """'tests/t.py::TestA::test_x[1-2]' -> ('tests/t.py', ['TestA'], 'test_x')."""
    base = node_id.split("[", 1)[0]
    parts = base.split("::")
    return parts[0], parts[1:-1], parts[-1] if len(parts) > 1 else ""


def _find_function(tree: ast.Module, classes: list[str], name: str) -> ast.AST | None:
    """The test function `name` inside nested `classes` (or their bases defined in the module)."""
    top = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def lookup(scope: ast.AST, seen: frozenset) -> ast.AST | None:
        for node in scope.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        if isinstance(scope, ast.ClassDef):
            for base in scope.bases:
                if isinstance(base, ast.Name) and base.id in top and base.id not in seen:
                    found = lookup(top[base.id], seen | {base.id})
                    if found is not None:
                        return found
        return None

    scope: ast.AST = tree
    for cls in classes:
        nxt = next((n for n in scope.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if nxt is None:
            return None
        scope = nxt
    return lookup(scope, frozenset(classes))


def identifiers_of_test(source: str, node_id: str) -> set[str] | None:
    """Identifiers the test `node_id` uses, lowercased, from its module's `source` text.

    Names loaded and attributes read inside the test function (its decorators included), plus
    the original names of `import ... as` aliases it uses; minus its arguments (fixtures), the
    names it binds, builtins and stopwords. None when the function cannot be found or parsed.
    """
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    _, classes, name = split_node_id(node_id)
    fn = _find_function(tree, classes, name)
    if fn is None:
        return None
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name.rsplit(".", 1)[-1]
    used: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            bound.add(node.name)
    names = used - bound
    names |= {aliases[n] for n in names if n in aliases}
    return {n.lower() for n in names if _meaningful(n)}


def check_alignment(statement: str, patch: str, test_sources: dict[str, str | None],
                    fail_to_pass: Sequence[str]) -> tuple[str | None, list[str]]:
    """(reason the statement is not about the FAIL_TO_PASS tests or leaks the fix, or None;
    the identifiers it shares with them, sorted).

    `test_sources` maps a test file path (the part of a node id before "::") to its text, or to
    None when it cannot be read. The heuristic is documented in docs/validation.md.
    """
    norm = " ".join(statement.split())
    for line in patch_code_lines(patch):
        if " ".join(line.split()) in norm:
            return f"the problem statement quotes a code line of the patch: {line!r}", []
    used: set[str] = set()
    readable = 0
    for test in fail_to_pass:
        source = test_sources.get(split_node_id(test)[0])
        ids = identifiers_of_test(source, test) if source is not None else None
        if ids is not None:
            readable += 1
            used |= ids
    if not readable:
        return ("cannot read the source of any FAIL_TO_PASS test, so alignment cannot be "
                "checked"), []
    shared = sorted(statement_identifiers(statement) & used)
    if not shared:
        return ("the problem statement names none of the identifiers the FAIL_TO_PASS tests use "
                f"({_listing(sorted(used), 8) or 'none'})"), []
    return None, shared


# -- reversal (host side, on the touched files only) ----------------------------------------

def _git(args: list[str], cwd: Path, data: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True)


def reverse_restores(snapshot: Path, patch: str) -> str | None:
    """Reason reversing `patch` after applying it does not give back the snapshot's files, or None.

    Works on a scratch copy of just the files the patch touches (cheap for any repo size):
    `git apply`, then `git apply -R`, then compare every touched path byte for byte with the
    snapshot (a file the patch creates must be gone again).
    """
    with owned_tempdir("forgeline-reverse") as tmp:
        work = Path(tmp)
        _git(["init", "-q"], work)  # so git resolves paths from here, whatever encloses /tmp
        files = patch_files(patch)
        for rel in files:
            src = snapshot / rel
            if src.is_file():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, work / rel)
        data = patch.encode()
        fwd = _git(["apply", "--whitespace=nowarn", "-"], work, data)
        if fwd.returncode:
            return "the patch does not apply to the snapshot's files: " + \
                fwd.stderr.decode(errors="replace").strip().splitlines()[0][:200]
        rev = _git(["apply", "-R", "--whitespace=nowarn", "-"], work, data)
        if rev.returncode:
            return "the reversed patch does not apply after the patch: " + \
                rev.stderr.decode(errors="replace").strip().splitlines()[0][:200]
        for rel in files:
            a, b = snapshot / rel, work / rel
            if a.is_file() != b.is_file() or (a.is_file() and a.read_bytes() != b.read_bytes()):
                return f"reversing the patch does not restore {rel} to the snapshot"
    return None


# -- the batch (runs the sandbox) -----------------------------------------------------------

@dataclass
class Outcome:
    """What happened to one instance: `check` is the failed check (None = validated)."""

    instance_id: str
    instance: dict | None
    check: str | None = None
    reason: str = ""
    passed: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    nop_s: float = 0.0


@dataclass
class BatchResult:
    validated: list[dict]
    rejections: list[dict]
    report: dict
    timings: dict[str, float]
    notes: dict


@dataclass(frozen=True)
class Options:
    gold_runs: int = 2
    alignment: bool = True
    timeout_s: float = 120.0


def check_options(section: ValidateConfig, timeout_s: float) -> Options:
    """The config's tasks.validate and sandbox.test_timeout_s -> Options; ConfigError for what
    forgeline cannot do yet."""
    if section.strong_model:
        raise ConfigError(
            "tasks.validate.strong_model is true, but the strong-model check needs a code agent "
            "and a model endpoint, which forgeline does not have yet (they land with a later "
            "issue); set tasks.validate.strong_model: false. Nothing was validated.")
    return Options(gold_runs=int(section.gold_runs), alignment=bool(section.alignment),
                   timeout_s=float(timeout_s))


def gold_suite(sandbox: Sandbox, env, runs: int, timeout_s: float, threads: int) -> list[TestRun]:
    """The clean snapshot's whole suite, `runs` times (concurrently up to `threads`)."""
    def one(_: int) -> TestRun:
        return sandbox.run_tests(env, [], None, timeout_s=timeout_s)

    with ThreadPoolExecutor(max(1, min(threads, runs))) as pool:
        results = list(pool.map(one, range(runs)))
    for i, run in enumerate(results, 1):
        if run.timed_out:
            raise ValidationError(
                f"{env.repo}: the clean suite timed out in gold run {i}/{runs} after "
                f"{timeout_s:g} s; raise sandbox.test_timeout_s or fix the repository's tests")
        if run.exit_code not in (0, 1) or not run.statuses:
            raise ValidationError(
                f"{env.repo}: the clean suite did not run in gold run {i}/{runs} (pytest exit "
                f"code {run.exit_code}, {len(run.statuses)} test(s) seen); log tail:\n"
                + "\n".join(run.log.strip().splitlines()[-15:]))
    return results


def _read_sources(root: Path, tests: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for test in tests:
        rel = split_node_id(test)[0]
        if rel in out:
            continue
        path = (root / rel)
        try:
            inside = path.resolve().is_relative_to(root.resolve())
            out[rel] = path.read_text(encoding="utf-8") if inside and path.is_file() else None
        except (OSError, UnicodeDecodeError):
            out[rel] = None
    return out


def validate_instance(inst: dict, snapshot: RepoSnapshot, sandbox: Sandbox, gold: list[dict],
                      suite: set[str], flaky: list[str], opts: Options) -> Outcome:
    """Run the checks on one (normalised) instance; stops at the first that fails."""
    out = Outcome(inst["instance_id"], inst)

    def reject(check: str, reason: str) -> Outcome:
        out.check, out.reason = check, reason
        return out

    reason = check_structure(inst, snapshot, suite)
    if reason:
        return reject("structure", reason)
    out.passed.append("structure")
    f2p, p2p = sorted(inst["FAIL_TO_PASS"]), inst["PASS_TO_PASS"]
    try:
        nop = sandbox.run_tests(snapshot.env(), [inst["patch"]], f2p, timeout_s=opts.timeout_s)
    except PatchError as exc:
        first = (exc.output.strip().splitlines() or ["(no output)"])[0]
        return reject("patch_applies", f"the bug patch does not apply at the snapshot: {first[:300]}")
    out.nop_s = nop.duration_s
    out.passed.append("patch_applies")
    reason = check_flaky(inst, flaky)
    if reason:
        return reject("flaky", reason)
    out.passed.append("flaky")
    reason = check_nop(nop.statuses, f2p, nop.timed_out, opts.timeout_s)
    if reason:
        return reject("nop", reason)
    out.passed.append("nop")
    out.facts["nop"] = dict(sorted(Counter(nop.statuses.get(t) for t in f2p).items()))
    reason = check_oracle(gold, f2p, p2p) or reverse_restores(snapshot.path, inst["patch"])
    if reason:
        return reject("oracle", reason)
    out.passed.append("oracle")
    reason = check_verifier(verify(sandbox, snapshot.env(), inst["patch"], gold_fix(inst["patch"]),
                                   f2p, p2p, timeout_s=opts.timeout_s))
    if reason:
        return reject("verifier", reason)
    out.passed.append("verifier")
    if opts.alignment:
        sources = _read_sources(snapshot.path, f2p)
        reason, shared = check_alignment(inst["problem_statement"], inst["patch"], sources, f2p)
        if reason:
            return reject("alignment", reason)
        out.passed.append("alignment")
        out.facts["alignment"] = {"identifiers": shared}
    return out


def select_instances(records: Iterable[dict], repo: str) -> tuple[list[tuple[str, dict | None, str]], int]:
    """Records of `repo` as (instance_id, normalised instance or None, reason it is not one),
    and the number of records of other repositories (skipped)."""
    mine, other = [], 0
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("repo"), str):
            iid = rec.get("instance_id") if isinstance(rec, dict) else None
            mine.append((str(iid or ""), None, "record without a repo field"))
            continue
        if not repo_matches(rec["repo"], repo):
            other += 1
            continue
        try:
            mine.append((rec["instance_id"], normalize_instance(rec), ""))
        except InstanceError as exc:
            mine.append((str(rec.get("instance_id") or ""), None, f"not a task instance: {exc}"))
    return mine, other


def validate_batch(records: Iterable[dict], snapshot: RepoSnapshot, sandbox: Sandbox, opts: Options,
                   threads: int = 1, progress: bool = True) -> BatchResult:
    """Validate every instance of `snapshot.name` among `records` (other repos are skipped).

    Returns the validated instances (each with a `validation` field of deterministic facts) and
    the rejections, both sorted by instance_id, a report, and timings for the manifest.
    """
    timings: dict[str, float] = {}
    selected, other = select_instances(records, snapshot.name)
    outcomes: list[Outcome] = []
    seen: set[str] = set()
    todo: list[dict] = []
    for iid, inst, why in selected:
        if inst is None:
            outcomes.append(Outcome(iid, None, "structure", why))
        elif iid in seen:
            outcomes.append(Outcome(iid, None, "structure", "duplicate instance_id in the input"))
        elif why := check_structure(inst, snapshot, None):
            seen.add(iid)  # decided without running anything (a stale batch costs no gold run)
            outcomes.append(Outcome(iid, inst, "structure", why))
        else:
            seen.add(iid)
            todo.append(inst)
    gold_statuses: list[dict[str, str]] = []
    gold_durations: list[float] = []
    flaky: list[str] = []
    if todo:
        t0 = time.perf_counter()
        runs = gold_suite(sandbox, snapshot.env(), opts.gold_runs, opts.timeout_s, threads)
        timings["gold_runs"] = round(time.perf_counter() - t0, 4)
        gold_statuses = [r.statuses for r in runs]
        gold_durations = [r.duration_s for r in runs]
        flaky = flaky_tests(gold_statuses)
        if flaky:
            log.warning("%s: %d flaky test(s) across %d gold runs: %s", snapshot.name, len(flaky),
                        opts.gold_runs, _listing(flaky))
    suite = set().union(*gold_statuses) if gold_statuses else set()
    t0 = time.perf_counter()
    bar = tqdm(total=len(todo), desc=f"validate {snapshot.name}", unit="task", file=sys.stderr,
               disable=not progress or not todo)
    pool = ThreadPoolExecutor(max(1, threads))
    try:
        futures = [pool.submit(validate_instance, inst, snapshot, sandbox, gold_statuses, suite,
                               flaky, opts) for inst in todo]
        for fut in as_completed(futures):
            outcomes.append(fut.result())  # results are collected here, in this thread only
            bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    timings["instances"] = round(time.perf_counter() - t0, 4)

    outcomes.sort(key=lambda o: (o.instance_id, o.check or "", o.reason))
    validated, rejections = [], []
    for o in outcomes:
        if o.check is None:
            rec = dict(o.instance)
            rec["validation"] = {"checks": o.passed, "gold_runs": opts.gold_runs,
                                 "sandbox": sandbox.name, **o.facts}
            validated.append(rec)
        else:
            rejections.append({"instance_id": o.instance_id, "check": o.check, "reason": o.reason})
    stable = Counter(s for t, s in (gold_statuses[0].items() if gold_statuses else ())
                     if t not in set(flaky))
    per_check = Counter(r["check"] for r in rejections)
    report = {
        "repo": snapshot.name,
        "commit": snapshot.commit,
        "sandbox": sandbox.name,
        "input": len(selected),
        "skipped_other_repos": other,
        "validated": len(validated),
        "rejected": {c: per_check.get(c, 0) for c in CHECKS},
        "checks": [c for c in CHECKS if c != "alignment" or opts.alignment],
        "gold_runs": opts.gold_runs,
        "clean_suite": {"tests": len(suite), "stable": dict(sorted(stable.items())),
                        "flaky": len(flaky)} if gold_statuses else None,
        "flaky_tests": flaky,
    }
    nop_times = [o.nop_s for o in outcomes if o.nop_s]
    timings["nop_total"] = round(sum(nop_times), 4)
    notes = {
        "gold_run_durations_s": gold_durations,
        "nop_runs": len(nop_times),
        "nop_total_s": round(sum(nop_times), 4),
        "threads": threads,
        "validated": len(validated),
        "rejected": report["rejected"],
    }
    return BatchResult(validated, rejections, report, timings, notes)


# -- the stage -----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="repository name (a folder in repos.root)")
    parser.add_argument("--tasks", required=True,
                        help="ingested instances (JSONL; other repositories' are skipped)")
    parser.add_argument("--out", required=True, help="validated instances (JSONL)")
    parser.add_argument("--rejections", required=True, help="{instance_id, check, reason} per line")
    parser.add_argument("--report", required=True, help="counts per check, flaky tests (JSON)")
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--threads", type=int, default=1,
                        help="instances validated at once (default 1)")


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.tasks.validate
    opts = check_options(section, cfg.sandbox.test_timeout_s)  # before any work: strong_model fails
    root = cfg.repos.root
    try:
        snapshot = RepoSnapshot.load(root, args.repo)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from None
    if not Path(args.tasks).is_file():
        raise ConfigError(f"validate: --tasks file not found: {args.tasks}")
    manifest = Manifest(stage="validate",
                        params={"repo": args.repo, "repos.root": root, "sandbox": as_dict(cfg.sandbox),
                                "tasks.validate": as_dict(section)},
                        inputs=[args.tasks, str(snapshot.path)], code=__name__)
    sandbox = get_sandbox(cfg.sandbox)
    records = read_jsonl(args.tasks)
    threads = max(1, args.threads or os.cpu_count() or 1)
    result = validate_batch(records, snapshot, sandbox, opts, threads=threads)
    manifest.timings.update(result.timings)
    with manifest.timed("write"):
        write_jsonl(args.out, result.validated)
        write_jsonl(args.rejections, result.rejections)
        write_json(args.report, result.report)
    manifest.notes = result.notes
    manifest.write(args.manifest, outputs=[args.out, args.rejections, args.report])
    rej = ", ".join(f"{c} {n}" for c, n in result.report["rejected"].items() if n)
    log.info("validate %s: %d/%d validated%s; %d flaky test(s)", args.repo,
             result.report["validated"], result.report["input"], f" (rejected: {rej})" if rej else "",
             len(result.report["flaky_tests"]))
