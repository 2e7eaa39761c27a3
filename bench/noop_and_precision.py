"""No-op cost of the pipeline next to the tools' own floor, and incremental precision.

    .venv/bin/python bench/noop_and_precision.py [--repeats 3] [--out bench/out/noop]

1. Builds the workflow over the tiny repositories of tests/tiny_project.py (process backend),
   records it in DVC (`dvc commit`), and builds a bare workflow with the same number of jobs
   and stages (each job copies one small file). Times `snakemake -n`, a no-op `snakemake`,
   `dvc status` and a no-op `dvc repro` on both, side by side, as ratios (median of repeats).
2. For edit scenarios (one repository's source, a split / PPO / evaluation param), compares the
   jobs `snakemake -n` plans with the minimal set: the jobs whose inputs or params the edit
   touches, and everything downstream of their outputs (computed from the DAG's own file
   lists, as exported to dvc.yaml). They must be equal. Code edits are bench/code_precision.py's
   (its truth is what each job executed, not what the DAG declares).
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import tiny_project as tp  # noqa: E402

from forgeline.workflow.dvc_export import snakemake_jobs, stage_name  # noqa: E402

def timed(project: Path, *cmd: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tp.run(project, *cmd)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bare_workflow(dest: Path, n: int) -> Path:
    """n chained jobs that copy a tiny file: what Snakemake and DVC cost with no work at all."""
    dest.mkdir(parents=True)
    (dest / "seed.txt").write_text("0\n")
    rules, stages, prev = [], {}, "seed.txt"
    for i in range(n):
        out = f"results/step{i}.txt"
        rules.append(f"rule step{i}:\n    input: '{prev}'\n    output: '{out}'\n"
                     f"    shell: 'cp {{input}} {{output}}'\n")
        stages[f"step{i}"] = {"cmd": f"mkdir -p results && cp {prev} {out}", "deps": [prev],
                              "outs": [out]}
        prev = out
    (dest / "Snakefile").write_text(f"rule all:\n    input: '{prev}'\n\n" + "\n".join(rules))
    (dest / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    return dest


def planned(project: Path) -> set[str]:
    """Planned jobs named like dvc.yaml stages ("validate-alpha"), `all` aside."""
    return {re.sub(r"\w+=", "", j).replace(", ", "-") for j in tp.planned_jobs(project, sep="-{}")} - {"all"}


def minimal(jobs: list[dict], touched_file: str | None = None, touched_param: str | None = None,
            ) -> set[str]:
    """Jobs that read the touched file or param, and everything downstream of their outputs."""
    def reads(job: dict) -> bool:  # stage sources may be listed by absolute path
        return any(d == touched_file or d.endswith("/" + touched_file) for d in job["deps"])

    hit = {stage_name(j) for j in jobs
           if (touched_file and reads(j))
           or (touched_param and any(touched_param.startswith(k) or k.startswith(touched_param)
                                     for k in j["params"]))}
    changed = {o for j in jobs if stage_name(j) in hit for o in j["outs"]}
    grew = True
    while grew:
        grew = False
        for j in jobs:
            if stage_name(j) not in hit and changed & set(j["deps"]):
                hit.add(stage_name(j))
                changed |= set(j["outs"])
                grew = True
    return hit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "noop")
    args = ap.parse_args()
    if args.out.exists():
        import shutil
        shutil.rmtree(args.out)
    project = tp.make_project(args.out / "pipeline")
    print("building the tiny pipeline ...", file=sys.stderr)
    tp.run(project, "snakemake", "--cores", "2")
    tp.run(project, "forgeline", "export-dvc")
    for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "commit", "-f", "-q")):
        tp.run(project, *cmd)
    jobs = snakemake_jobs(project / "Snakefile", ["params.yaml"])
    bare = bare_workflow(args.out / "bare", len(jobs))
    tp.run(bare, "snakemake", "--cores", "2", "-q")
    for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "repro", "-q")):
        tp.run(bare, *cmd)

    print(f"\nno-op cost: forgeline's pipeline ({len(jobs)} jobs/stages) vs a bare workflow of "
          f"the same size (median of {args.repeats})")
    print(f"{'command':<22}{'forgeline s':>12}{'bare s':>9}{'ratio':>8}")
    for cmd in (("snakemake", "-n", "--cores", "2"), ("snakemake", "--cores", "2"),
                ("dvc", "status"), ("dvc", "repro")):
        a = timed(project, *cmd, repeats=args.repeats)
        b = timed(bare, *cmd, repeats=args.repeats)
        label = " ".join(cmd[:2]) if cmd[1] == "-n" else cmd[0] + " " + (
            "(no-op)" if cmd[0] == "snakemake" else cmd[1])
        print(f"{label:<22}{a:>12.2f}{b:>9.2f}{a / b:>8.2f}")

    def bump(*keys):
        def edit(data):
            node = data
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = node[keys[-1]] + 1 if isinstance(node[keys[-1]], int) else node[keys[-1]] / 2
        return edit

    # (file edited, param edited, how); a params.yaml edit also touches the file itself, which
    # the DAG picture (rule rulegraph) reads
    scenarios = {
        "one repository's source": ("data/repos/beta/beta/__init__.py", None, None),
        "a split param": ("params.yaml", "tasks.split", bump("tasks", "split", "seed")),
        "a PPO param": ("params.yaml", "train.ppo", bump("train", "ppo", "clip_ratio")),
        "an eval param": ("params.yaml", "evaluation", bump("evaluation", "alpha")),
    }
    print("\nincremental precision: jobs snakemake plans vs the minimal set")
    print(f"{'edit':<30}{'planned':>8}{'minimal':>8}  equal")
    ok = True
    for name, (path, param, edit) in scenarios.items():
        target = project / path
        original = target.read_text()
        if edit is None:
            target.write_text(original + "\n# an edit\n")
        else:
            data = yaml.safe_load(original)
            edit(data)
            target.write_text(yaml.safe_dump(data, sort_keys=False))
        try:
            got, want = planned(project), minimal(jobs, path, param)
        finally:
            target.write_text(original)
        ok &= got == want
        print(f"{name:<30}{len(got):>8}{len(want):>8}  {got == want}"
              + ("" if got == want else f"  extra {sorted(got - want)} missing {sorted(want - got)}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
