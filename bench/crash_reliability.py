"""Crash reliability: SIGKILL each kind of write of the real workflow, restart, count what survived.

    .venv/bin/python bench/crash_reliability.py [--repeats 1] [--only POINT] [--json bench/out/crash.json]

Builds the workflow over the tiny repositories of tests/tiny_project.py (process backend) up to
TARGETS (generate, ingest-extra, ingest and validate of one repository: file outputs and a
sandbox; copy_pretrain's results/policy/init: a directory output), takes the digests of that
clean build and writes its dvc.yaml (what `forgeline verify` checks stages against), then for
each fault of FAULTS:

1. reruns the stage that holds the fault point (`snakemake TARGETS --forcerun RULE`) with
   FORGELINE_FAULT set (provenance.fault_point): the job SIGKILLs itself at that point
   (scope "job": an OOM kill, a node's job killer; Snakemake sees a failed job) or SIGKILLs its
   whole process group (scope "run": Snakemake and every job at once, a power loss);
2. restarts the way docs/running.md says: `snakemake --unlock` when Snakemake itself was
   killed, then the same command again;
3. counts as survived only when the restart succeeds, every artifact equals the clean build's
   (tiny_project.reproducible_digests: bytes, wall-clock fields aside), no temp is left under
   results/ or in the runs' private TMPDIR, and `forgeline verify --no-touch --partial`
   passes.

Prints one row per fault point: faults injected, survived, artifacts lost, the temps the kill
left (under results/ and in TMPDIR), and the leftovers after the restart. tests/test_crash.py
runs the same FAULTS and asserts every row is all survived.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import tiny_project as tp  # noqa: E402

from forgeline.provenance import FAULT_ENV  # noqa: E402
from forgeline.workflow.verify import scan  # noqa: E402

TARGETS = ("results/validated/alpha.jsonl", "results/policy/init")
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Fault:
    """Where a run is killed: `point` of provenance.fault_point for the output (or sandbox)
    `name`, in a job of `rule`; scope "job" kills that job, "run" Snakemake and all its jobs."""

    kind: str   # what is being written: file (atomic_path), dir (atomic_dir), sandbox (a temp copy)
    point: str
    name: str
    scope: str
    rule: str

    @property
    def spec(self) -> str:
        return f"{self.point}:{self.name}" + (":run" if self.scope == "run" else "")


FAULTS = (
    # a file output: temp created, temp complete, renamed (its manifest not yet written),
    # and the manifest itself complete under its temp name
    Fault("file", "file.open", "validated/alpha.jsonl", "job", "validate"),
    Fault("file", "file.written", "validated/alpha.jsonl", "run", "validate"),
    Fault("file", "file.renamed", "validated/alpha.jsonl", "job", "validate"),
    Fault("file", "file.written", "validated/alpha.manifest.json", "run", "validate"),
    # a directory output: temp folder made, built, renamed into place (Snakemake not told yet)
    Fault("dir", "dir.open", "policy/init", "job", "copy_pretrain"),
    Fault("dir", "dir.built", "policy/init", "run", "copy_pretrain"),
    Fault("dir", "dir.replaced", "policy/init", "run", "copy_pretrain"),
    # a sandbox: the process backend's temp copy of the repository made, tests not yet run
    Fault("sandbox", "sandbox.ready", "alpha", "job", "validate"),
    Fault("sandbox", "sandbox.ready", "alpha", "run", "validate"),
)


@dataclass
class Outcome:
    fault: Fault
    fired: bool = False           # the faulted run was killed where asked
    left_by_kill: list[str] = field(default_factory=list)  # temps right after the kill
    restarted: bool = False       # the restart exited 0
    lost: list[str] = field(default_factory=list)       # artifacts missing or not the clean ones
    leftovers: list[str] = field(default_factory=list)  # temps after the restart
    verified: bool = False        # forgeline verify passed after the restart
    seconds: float = 0.0

    @property
    def survived(self) -> bool:
        return self.fired and self.restarted and not self.lost and not self.leftovers and self.verified


def run_tmp(project: Path) -> Path:
    """The runs' TMPDIR: private to the project, and outside it (a sandbox copy below a folder
    with a pyproject.toml, such as this checkout, runs pytest with that file's settings)."""
    digest = hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"crash-reliability-{digest}"


def run_env(project: Path, fault: Fault | None = None) -> dict[str, str]:
    env = {**tp.env(project), "TMPDIR": str(run_tmp(project))}
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = fault.spec
    return env


def snakemake(project: Path, *args: str, fault: Fault | None = None) -> subprocess.CompletedProcess:
    """One Snakemake call in its own session, so that a "run" fault kills it and its jobs only."""
    run_tmp(project).mkdir(exist_ok=True)
    proc = subprocess.Popen(["snakemake", "--cores", "2", *args], cwd=project, env=run_env(project, fault),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def build(project: Path) -> dict[str, str]:
    """The clean build of TARGETS; returns its reproducible digests."""
    tp.make_project(project)
    shutil.rmtree(run_tmp(project), ignore_errors=True)
    proc = snakemake(project, *TARGETS)
    if proc.returncode != 0:
        raise RuntimeError(f"the clean build failed:\n{proc.stdout[-6000:]}")
    if not (project / TARGETS[0]).read_text().strip():  # else no sandbox fault can fire
        raise RuntimeError(f"the clean build validated no task ({TARGETS[0]} is empty): see "
                           f"{project}/logs/generate and logs/validate")
    tp.run(project, "forgeline", "export-dvc")  # verify's list of every stage's outputs
    return tp.reproducible_digests(project)


def temps_left(project: Path) -> list[str]:
    """Temps of interrupted writes under results/ and forgeline temp dirs in the run's TMPDIR."""
    found = [p.relative_to(project).as_posix() for p in scan(project / "results")[1]]
    tmp = run_tmp(project)
    found += sorted(f"$TMPDIR/{n}" for n in os.listdir(tmp) if n.startswith("forgeline-")) if tmp.is_dir() else []
    return found


def inject(project: Path, fault: Fault, clean: dict[str, str]) -> Outcome:
    """Kill a rerun of fault.rule at the fault's point, restart as docs/running.md says, and
    compare the tree with the clean build."""
    out, t0 = Outcome(fault), time.monotonic()
    command = (*TARGETS, "--forcerun", fault.rule)  # --forcerun takes every word after it
    killed = snakemake(project, *command, fault=fault)
    if fault.scope == "run":
        out.fired = killed.returncode == -signal.SIGKILL
        snakemake(project, "--unlock")  # Snakemake was killed: its lock stays (docs/running.md)
    else:
        out.fired = killed.returncode != 0 and "died with <Signals.SIGKILL: 9>" in killed.stdout
    out.left_by_kill = temps_left(project)
    restart = snakemake(project, *command)
    out.restarted = restart.returncode == 0
    now = tp.reproducible_digests(project) if out.restarted else {}
    out.lost = sorted(name for name in set(clean) | set(now) if clean.get(name) != now.get(name))
    out.leftovers = temps_left(project)
    verify = subprocess.run(["forgeline", "verify", "--no-touch", "--partial"], cwd=project,
                            env=run_env(project), capture_output=True, text=True)
    out.verified = verify.returncode == 0
    out.seconds = round(time.monotonic() - t0, 1)
    if not out.survived:
        sys.stderr.write(f"--- {fault.spec} (rule {fault.rule}): {out}\n--- killed run:\n"
                         f"{killed.stdout[-3000:]}\n--- restart:\n{restart.stdout[-3000:]}\n"
                         f"--- verify:\n{verify.stdout[-2000:]}{verify.stderr[-2000:]}\n")
    return out


def table(outcomes: list[Outcome]) -> str:
    rows = ["| fault point | kind | killed | faults injected | survived | artifacts lost | "
            "temps left by the kill | leftovers after restart |", "|---|---|---|---|---|---|---|---|"]
    for fault in dict.fromkeys(o.fault for o in outcomes):
        mine = [o for o in outcomes if o.fault == fault]
        rows.append(f"| `{fault.point}` {fault.name} | {fault.kind} | "
                    f"{'the job' if fault.scope == 'job' else 'Snakemake + jobs'} | {len(mine)} | "
                    f"{sum(o.survived for o in mine)} | {sum(len(o.lost) for o in mine)} | "
                    f"{sum(len(o.left_by_kill) for o in mine)} | {sum(len(o.leftovers) for o in mine)} |")
    total = len(outcomes)
    rows.append(f"| **all** | | | {total} | {sum(o.survived for o in outcomes)} | "
                f"{sum(len(o.lost) for o in outcomes)} | {sum(len(o.left_by_kill) for o in outcomes)} | "
                f"{sum(len(o.leftovers) for o in outcomes)} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1, help="times each fault is injected")
    ap.add_argument("--only", help="only the faults whose point contains this")
    ap.add_argument("--dir", type=Path, default=ROOT / "bench" / "out" / "crash",
                    help="where the project is built (replaced)")
    ap.add_argument("--json", type=Path, help="also write the outcomes as JSON")
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    t0 = time.monotonic()
    clean = build(args.dir)
    print(f"clean build of {len(TARGETS)} targets: {len(clean)} artifacts, "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    outcomes = []
    for _ in range(args.repeats):
        for fault in FAULTS:
            if args.only and args.only not in fault.point:
                continue
            outcomes.append(inject(args.dir, fault, clean))
            print(f"{fault.spec:<45} {fault.rule:<12} survived={outcomes[-1].survived} "
                  f"{outcomes[-1].seconds} s", file=sys.stderr)
    shutil.rmtree(run_tmp(args.dir), ignore_errors=True)
    print(table(outcomes))
    print(f"\n{len(clean)} artifacts compared per restart; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.monotonic() - t0:.0f} s in all")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([{**asdict(o), "survived": o.survived} for o in outcomes],
                                        indent=1) + "\n")
    return 0 if all(o.survived for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
