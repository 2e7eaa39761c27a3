"""Stage `generate`: bug candidates for one repository, as SWE-smith task instances.

Each candidate is one procedural mutation (forgeline.tasks.mutations) of a library function.
Every field that matters comes from running the real test suite in the sandbox: the clean
suite once (the baseline), then the whole suite once per mutation with the bug patched in.
FAIL_TO_PASS = tests that pass clean and FAIL/ERROR with the bug; PASS_TO_PASS = tests that
pass in both. A mutation that breaks nothing, times out, or breaks collection is discarded.
The problem statement is written from the failing test's pytest output, the way a user
reports a bug: what was called, what came back, what was expected; never the fix
(`forgeline.tasks.statement`).

    forgeline generate --repo ledgerkit --out results/candidates/ledgerkit.jsonl \\
        --manifest results/candidates/ledgerkit.manifest.json --threads 2
"""
from __future__ import annotations

import argparse
import difflib
import logging
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

from tqdm import tqdm

from forgeline.config import Config, as_dict
from forgeline.provenance import Manifest, sha256_bytes, write_jsonl
from forgeline.sandbox import PatchError, SandboxError, TestRun, get_sandbox
from forgeline.sandbox.grading import representable
from forgeline.sandbox.verify import admissible, package_layout
from forgeline.seeds import derive_seed
from forgeline.tasks.mutations import Site, apply_mutation, enumerate_mutation_sites, select_sites
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import instance_id
from forgeline.tasks.statement import parse_failures, read_failure, write_problem_statement

log = logging.getLogger(__name__)

# `created_at` is a constant: a wall-clock time would make two runs of the same inputs differ.
CREATED_AT = "2026-01-01T00:00:00Z"
# A mutation can turn a loop infinite; such a run is cut at this multiple of the clean suite's
# duration (at least MIN_MUTATION_TIMEOUT_S, at most sandbox.test_timeout_s) and discarded. A
# loop burns a core until then: 5 of session 30's run T mutations did, 10 s each, beside copy
# pre-training. The clean suites here take 0.5-0.9 s; 3 s kept the same candidates.
TIMEOUT_FACTOR = 10
MIN_MUTATION_TIMEOUT_S = 3.0


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
    # a pool repository's tasks only feed difficulty, which evaluates max_tasks_per_repo of them:
    # validating many more costs test runs and changes nothing downstream; a panel repository's
    # are the heldout panel, whose size is chosen (the original's Verified subset: 27 tasks)
    role = "pool" if args.repo in cfg.repos.pool else "panel" if args.repo in cfg.repos.panel else "other"
    cap = {"pool": gen.max_per_pool_repo, "panel": gen.max_per_panel_repo}.get(role)
    max_keep = int(cap if cap is not None else gen.max_per_repo)
    max_tries = int(gen.max_tries_per_repo)
    snapshot = RepoSnapshot.load(root, args.repo)
    env = snapshot.env()
    seed = derive_seed(cfg.seed, "generate", snapshot.name, bits=64)  # one per repository
    manifest = Manifest(
        stage="generate",
        params={"seed": cfg.seed, "repos.root": root, "sandbox": as_dict(cfg.sandbox),
                "tasks.generate": as_dict(gen), "role": role, "max_kept": max_keep},
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
