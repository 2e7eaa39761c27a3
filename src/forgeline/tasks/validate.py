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

The checks themselves are pure functions in `forgeline.tasks.checks`; this module runs the
suites, reverses patches on the host, and writes the outputs.

Outputs hold only deterministic facts (no durations, no temp paths): same inputs + params =>
byte-identical files. Timings go to the manifest.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from forgeline.config import ConfigError, as_dict
from forgeline.params import ValidateConfig
from forgeline.provenance import Manifest, owned_tempdir, read_jsonl, write_json, write_jsonl
from forgeline.sandbox import PatchError, Sandbox, TestRun, get_sandbox
from forgeline.sandbox.verify import gold_fix, verify
from forgeline.tasks.checks import (check_alignment, check_flaky, check_nop, check_oracle, check_structure,
                                    check_verifier, flaky_tests, listing, patch_files, repo_matches,
                                    split_node_id)
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import InstanceError, normalize_instance

log = logging.getLogger(__name__)

# Rejection keys, in the order the checks run (every key is in the report, even at 0).
CHECKS = ("structure", "patch_applies", "flaky", "nop", "oracle", "verifier", "alignment")


class ValidationError(RuntimeError):
    """The batch cannot be validated at all (e.g. the clean suite does not run)."""


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
        # the gold runs, then per instance a NOP run and the verifier's (at most)
        sandbox.expect(snapshot.env(), opts.gold_runs + 2 * len(todo))
        t0 = time.perf_counter()
        runs = gold_suite(sandbox, snapshot.env(), opts.gold_runs, opts.timeout_s, threads)
        timings["gold_runs"] = round(time.perf_counter() - t0, 4)
        gold_statuses = [r.statuses for r in runs]
        gold_durations = [r.duration_s for r in runs]
        flaky = flaky_tests(gold_statuses)
        if flaky:
            log.warning("%s: %d flaky test(s) across %d gold runs: %s", snapshot.name, len(flaky),
                        opts.gold_runs, listing(flaky))
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
