"""Scale benchmark of the task front: ingest -> structural checks -> split -> digest.

Generates a synthetic SWE-smith-format JSONL at upstream scale (default 60,000 instances over
128 repositories, uneven repo sizes; patches ~1-3 KB, 1-5 FAIL_TO_PASS and 10-80 PASS_TO_PASS
node ids, ~500 B problem statements; 10% of records store their test lists as JSON-encoded
strings, as SWE-bench does; a few malformed lines of every kind), then runs each step of the
task front through the same functions the stages use, each in its own process so that its peak
RSS is its own (read with os.wait4), and once more through the CLI (`forgeline ingest`,
`forgeline split`) as the pipeline runs them. Prints a table: step, seconds, peak RSS.

    .venv/bin/python bench/task_front_scale.py [--n 60000] [--repos 128] [--seed 0]
        [--out bench/out/task_front]

Goal: the whole task front well under a minute and under 2 GB RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("value", "index", "parse", "token", "buffer", "record", "schema", "window", "offset",
         "config", "stream", "cache", "queue", "merge", "split", "format", "encode", "decode",
         "render", "filter", "group", "order", "limit", "range", "field", "frame", "table",
         "column", "header", "payload", "client", "server", "session", "request", "handler")
MAX_RECORD_BYTES = 5_000_000  # params.yaml tasks.ingest.max_record_bytes


# -- the synthetic data set ----------------------------------------------------------------

def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _repo_pool(rng: random.Random, r: int) -> dict:
    owner, name = f"owner{r:03d}", f"{rng.choice(WORDS)}{rng.choice(WORDS)}{r:03d}"
    commit = f"{rng.getrandbits(32):08x}"
    tests = [f"tests/test_{rng.choice(WORDS)}.py::Test{rng.choice(WORDS).title()}::"
             f"test_{rng.choice(WORDS)}_{rng.choice(WORDS)}[{k}]" for k in range(400)]
    code = [f"    {rng.choice(WORDS)} = {rng.choice(WORDS)}({rng.choice(WORDS)}, "
            f"{rng.choice(WORDS)}={rng.randint(0, 99)})" for _ in range(300)]
    return {"repo": f"{owner}__{name}", "commit": commit, "tests": tests, "code": code,
            "image": f"swebench/swesmith.x86_64.{owner}_1776_{name}.{commit}"}


def _patch(rng: random.Random, pool: dict) -> str:
    path = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"
    out = [f"diff --git a/{path} b/{path}", "index 1234567..89abcde 100644",
           f"--- a/{path}", f"+++ b/{path}"]
    for _ in range(rng.randint(1, 3)):
        start = rng.randint(1, 900)
        out.append(f"@@ -{start},9 +{start},9 @@ def {rng.choice(WORDS)}(self):")
        for line in rng.sample(pool["code"], 8):
            out.append(" " + line)
        out += ["-" + rng.choice(pool["code"]), "+" + rng.choice(pool["code"])]
    return "\n".join(out) + "\n"


def generate(path: Path, n: int, repos: int, seed: int) -> dict:
    """Write the synthetic JSONL; returns what it holds (good records, malformed lines)."""
    rng = random.Random(seed)
    pools = [_repo_pool(rng, r) for r in range(repos)]
    weights = [rng.lognormvariate(0, 1) for _ in pools]  # uneven repository sizes, as upstream
    kinds = ("func_pm_op_swap", "func_pm_remove_cond", "lm_modify", "lm_rewrite",
             "combine_file", "pr_1234")
    first = None
    with open(path, "w", encoding="utf-8") as f:
        for k in range(n):
            pool = rng.choices(pools, weights)[0]
            kind = rng.choice(kinds)
            n_f2p = rng.randint(1, 5)
            tests = rng.sample(pool["tests"], n_f2p + rng.randint(10, 80))  # disjoint lists
            rec = {
                "instance_id": f"{pool['repo']}.{pool['commit']}.{kind}__{k:08x}",
                "repo": pool["repo"], "base_commit": pool["commit"] * 5,
                "patch": _patch(rng, pool),
                "FAIL_TO_PASS": tests[:n_f2p], "PASS_TO_PASS": tests[n_f2p:],
                "problem_statement": _sentence(rng, 70).capitalize() + ".",
                "image_name": pool["image"], "created_at": "2025-01-01T00:00:00",
                "bug_type": kind,
            }
            if k % 10 == 3:
                rec["FAIL_TO_PASS"] = json.dumps(rec["FAIL_TO_PASS"])
                rec["PASS_TO_PASS"] = json.dumps(rec["PASS_TO_PASS"])
            first = first or rec
            f.write(json.dumps(rec) + "\n")
        # malformed lines, one of each kind (+ the truncated last line)
        bad = [
            '{"instance_id": "broken", "repo": \n',
            json.dumps({k: v for k, v in first.items() if k != "patch"}
                       | {"instance_id": "nopatch"}) + "\n",
            json.dumps(first) + "\n",  # duplicate
            json.dumps(first | {"instance_id": "emptyps", "problem_statement": ""}) + "\n",
            json.dumps(first | {"instance_id": "emptyf2p", "FAIL_TO_PASS": []}) + "\n",
            json.dumps(first | {"instance_id": "wrongtype", "repo": 17}) + "\n",
            json.dumps(first | {"instance_id": "huge",
                                "patch": "x" * (MAX_RECORD_BYTES + 10)}) + "\n",
            "\n",
        ]
        f.writelines(bad)
    with open(path, "ab") as f:
        latin1 = json.dumps(first | {"instance_id": "latin1"}).encode()
        f.write(latin1.replace(b"diff", b"d\xe9ff") + b"\n")
        f.write(json.dumps(first | {"instance_id": "cut"}).encode()[:100])
    return {"records": n, "malformed": len(bad) - 1 + 2}


# -- the steps (each runs in its own process) ----------------------------------------------

def step(name: str, work: Path) -> str:
    """Run one step in this process; returns a short note for the table."""
    from forgeline.provenance import read_jsonl, write_json, write_jsonl
    from forgeline.tasks import ingest, split
    from forgeline.tasks.schema import normalize_instance

    fractions, seed = {"train": 0.7, "val": 0.15, "test": 0.15}, 7
    if name == "ingest":
        result = ingest.ingest_files([work / "swesmith.jsonl"], MAX_RECORD_BYTES)
        write_jsonl(work / "ingested.jsonl", result.accepted)
        write_jsonl(work / "rejections.jsonl", result.rejections)
        write_json(work / "ingest-report.json", result.report)
        return (f"{result.report['accepted']:,} accepted, {result.report['rejected']} rejected "
                f"{dict(result.report['rejected_by_category'])}")
    if name == "checks":  # the validate stage's structural pre-check (no test suite run)
        import gc
        from forgeline.tasks.checks import check_structure
        gc.disable()  # as the stages do while loading (see ingest._gc_paused)
        rows = [normalize_instance(r) for r in read_jsonl(work / "ingested.jsonl")]
        assert len({r["instance_id"] for r in rows}) == len(rows), "duplicate ids after ingest"
        bad = [reason for r in rows
               if (reason := check_structure(r, r["repo"], r["base_commit"], None))]
        assert not bad, bad[:3]
        return (f"{len(rows):,} instances: normalize_instance + checks.check_structure, "
                f"{len({r['repo'] for r in rows})} repos")
    if name == "split":
        rows = split.load_instances([work / "ingested.jsonl"])
        parts = split.repo_disjoint_split(rows, fractions, seed)
        summary = split.split_summary(parts, fractions, seed)
        for part, insts in parts.items():
            write_jsonl(work / "split" / f"{part}.jsonl", insts)
        write_json(work / "split" / "split.json", summary)
        return " ".join(f"{k}={v:,}({summary['shares'][k]:.1%},{len(summary['repos'][k])}r)"
                        for k, v in summary["counts"].items())
    if name == "digest":
        parts = {p: split.load_instances([work / "split" / f"{p}.jsonl"]) for p in fractions}
        digest = split.frozen_split_digest(parts)
        summary = json.loads((work / "split" / "split.json").read_text())
        assert digest == summary["digest"] == split.digest_of_split_json(summary)
        return f"digest {digest[:16]}..."
    raise SystemExit(f"unknown step {name}")


def measure(cmd: list[str], **kw) -> tuple[float, float, float, str, int]:
    """(wall seconds, CPU seconds, peak RSS in MiB, last output line, exit status) of a child.

    CPU seconds (user + system) are reported besides wall time because on a shared machine
    the wall time of a CPU-bound step grows with the load; CPU time much less so.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read(), proc.stderr.read()
    if proc.returncode:
        sys.stderr.write(err[-3000:])
    lines = out.strip().splitlines() or err.strip().splitlines()
    return (seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
            lines[-1] if lines else "", proc.returncode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60_000)
    ap.add_argument("--repos", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "task_front")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = args.out.resolve()
    if args.step:
        print(step(args.step, work))
        return 0

    work.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve()), "--out", str(work)]
    rows: list[tuple[str, float, float, float, str]] = []
    t0 = time.perf_counter()
    info = generate(work / "swesmith.jsonl", args.n, args.repos, args.seed)
    size = (work / "swesmith.jsonl").stat().st_size
    rows.append(("generate (not part of the front)", time.perf_counter() - t0, float("nan"),
                 float("nan"),
                 f"{info['records']:,} records + {info['malformed']} malformed lines, "
                 f"{size / 2**20:.0f} MiB"))
    failed = False
    for name in ("ingest", "checks", "split", "digest"):
        sec, cpu, rss, note, rc = measure([*me, "--step", name])
        failed |= rc != 0
        rows.append((name, sec, cpu, rss, note if rc == 0 else f"FAILED ({rc})"))
    front = rows[1:5]

    import yaml  # the CLI run reads a params file like the pipeline's, with nothing else changed
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # the pipeline's path at scale: the external file is read once and sharded by repository
    names = sorted({json.loads(line)["repo"] for line in (work / "ingested.jsonl").open()})
    params["repos"] = {"root": "data/repos", "pool": names, "sft": [], "panel": []}
    params["tasks"]["ingest"]["extra_sources"] = [str(work / "swesmith.jsonl")]
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    cli = [sys.executable, "-m", "forgeline.cli"]
    cfg = ["--config", str(work / "params.yaml")]
    shards = work / "cli" / "extra"
    cli_steps = {
        "cli: forgeline ingest-extra": [*cli, "ingest-extra", *cfg, "--out-dir", str(shards),
                                        "--manifest", str(shards / "manifest.json")],
        "cli: forgeline split": [*cli, "split", *cfg,
                                 "--tasks", *[str(shards / f"{n}.jsonl") for n in names],
                                 "--out-dir", str(work / "cli" / "split"),
                                 "--manifest", str(work / "cli" / "split" / "manifest.json")],
    }
    for name, cmd in cli_steps.items():
        sec, cpu, rss, note, rc = measure(cmd, cwd=ROOT)
        failed |= rc != 0
        rows.append((name, sec, cpu, rss,
                     note.split(": ", 1)[-1][:90] if rc == 0 else f"FAILED ({rc})"))
    same = (json.loads((work / "cli" / "split" / "split.json").read_text())["digest"]
            == json.loads((work / "split" / "split.json").read_text())["digest"])

    width = max(len(r[0]) for r in rows) + 2
    print(f"{'step':<{width}}{'wall s':>8}{'CPU s':>8}{'peak RSS MiB':>14}  note")
    for name, sec, cpu, rss, note in rows:
        cpu_s = "-" if cpu != cpu else f"{cpu:.2f}"
        rss_s = "-" if rss != rss else f"{rss:,.0f}"
        print(f"{name:<{width}}{sec:>8.2f}{cpu_s:>8}{rss_s:>14}  {note}")
    total, cpu = sum(r[1] for r in front), sum(r[2] for r in front)
    peak = max(r[3] for r in front)
    print(f"{'task front (ingest..digest)':<{width}}{total:>8.2f}{cpu:>8.2f}{peak:>14,.0f}  "
          f"goal: < 60 s and < 2048 MiB -> {'OK' if total < 60 and peak < 2048 else 'MISSED'}")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    print(f"CLI split digest equals the in-process one: {same}")
    return 1 if failed or not same else 0


if __name__ == "__main__":
    sys.exit(main())
