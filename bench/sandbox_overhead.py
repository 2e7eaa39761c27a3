"""What the docker sandbox costs: one median task's tests run in a container vs run bare.

    .venv/bin/python bench/sandbox_overhead.py [--repo NAME] [--runs 5] [--json bench/out/sandbox_overhead.json]

The "median task" is the pool repository (params.yaml repos.pool) with the median number of
test functions (the lower median), with one real patch applied (as a bug patch is). Runs alternate between backends, back to back (as in a
validation loop), so that load from other processes on the machine hits all alike. Reported, as medians of --runs runs:
  - process: the process backend's run_tests (a temp copy + pytest, on this machine)
  - docker warm: DockerSandbox.run_tests with a started spare container ready (the default)
  - docker cold: DockerSandbox(warm=0): create + start + copy + pytest + remove, all on the clock
  - pytest's own time (its "in N s" line), so per-run overhead = wall - pytest time
and the image build: cold (a unique ENV line forces every step to run) and cached (the label
lookup that `forgeline image` does when nothing changed). Goal: docker overhead < 0.5 s a run.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def median_repo(root: Path, pool: list[str]) -> str:
    counts = sorted((sum(p.read_text().count("\ndef test_") for p in (root / r / "tests").glob("*.py")), r)
                    for r in pool)
    return counts[(len(counts) - 1) // 2][1]


def comment_patch(snapshot) -> str:
    """A real patch, as a task's bug patch is: a comment appended to the first source file."""
    import difflib
    path = snapshot.source_files()[0]
    rel = path.relative_to(snapshot.path).as_posix()
    old = path.read_text().splitlines(keepends=True)
    body = "".join(difflib.unified_diff(old, old + ["# benchmark patch\n"], f"a/{rel}", f"b/{rel}"))
    return f"diff --git a/{rel} b/{rel}\n{body}"


def pytest_seconds(log: str) -> float | None:
    m = re.search(r" in ([0-9.]+)s", log.strip().splitlines()[-1]) if log.strip() else None
    return float(m.group(1)) if m else None


def main() -> int:
    from forgeline import config
    from forgeline.sandbox import engine, images
    from forgeline.sandbox.docker import DockerSandbox
    from forgeline.sandbox.process import ProcessSandbox
    from forgeline.tasks.repos import RepoSnapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--config", default=str(ROOT / "params.yaml"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    cfg = config.load([args.config])
    repos_root = ROOT / cfg.section("repos.root")
    repo = args.repo or median_repo(repos_root, cfg.section("repos.pool"))
    snapshot = RepoSnapshot.load(repos_root, repo)
    env = snapshot.env()
    dockerfile = (ROOT / "envs" / "repo.Dockerfile").read_text()
    client = engine.connect()

    t0 = time.perf_counter()
    base_section = cfg.sandbox.docker.base_image
    base = images.ensure_base_image(client, base_section, ROOT / ".forgeline")
    base_s = time.perf_counter() - t0

    # image: cold (every step runs: a unique ENV line right after FROM), then cached
    entries = images.context_entries(snapshot.path)
    cold_text = dockerfile.replace("\nENV ", f"\nENV FORGELINE_BENCH_NONCE={uuid.uuid4().hex}\nENV ", 1)
    t0 = time.perf_counter()
    image, _ = client.images.build(fileobj=io.BytesIO(images.context_tar(cold_text, entries)),
                                   custom_context=True, tag=f"forgeline-bench/{repo}:cold",
                                   buildargs={"BASE_IMAGE": base[0]}, network_mode="none", rm=True,
                                   forcerm=True)
    cold_build_s = time.perf_counter() - t0
    client.images.remove(image.id, force=True)
    images.build_repo_image(client, env, dockerfile, base, base_section=base_section)  # the real one exists
    t0 = time.perf_counter()
    _, built = images.build_repo_image(client, env, dockerfile, base, base_section=base_section)
    cached_build_s = time.perf_counter() - t0
    assert not built

    process = ProcessSandbox()
    warm = DockerSandbox(client=client, warm=1)
    cold = DockerSandbox(client=client, warm=0)
    backends = {"process": process, "docker warm": warm, "docker cold": cold}
    walls: dict[str, list[float]] = {k: [] for k in backends}
    inner: dict[str, list[float]] = {k: [] for k in backends}
    counts: dict[str, set[int]] = {k: set() for k in backends}
    patches = [comment_patch(snapshot)]
    warm.run_tests(env, patches)  # first call: nothing warm yet; starts the spare
    process.run_tests(env, patches)
    for i in range(args.runs):
        for name, sb in backends.items():
            t0 = time.perf_counter()
            run = sb.run_tests(env, patches, timeout_s=300)
            assert run.exit_code == 0, run.log[-2000:]
            walls[name].append(time.perf_counter() - t0)
            inner[name].append(pytest_seconds(run.log) or float("nan"))
            counts[name].add(len(run.statuses))
    warm.shutdown()
    cold.shutdown()

    med = {k: statistics.median(v) for k, v in walls.items()}
    med_inner = {k: statistics.median(v) for k, v in inner.items()}
    rows = [(k, med[k], med_inner[k], med[k] - med_inner[k], med[k] - med["process"]) for k in backends]
    print(f"\nsandbox overhead: repo {repo} ({sorted(counts['process'])[0]} tests), "
          f"median of {args.runs} runs, alternating backends")
    print(f"{'backend':<13} {'wall s':>8} {'pytest s':>9} {'wall-pytest':>12} {'vs process':>11}")
    for name, w, p, o, d in rows:
        print(f"{name:<13} {w:8.3f} {p:9.3f} {o:12.3f} {d:+11.3f}")
    print(f"\nimage build ({repo}): cold {cold_build_s:.2f} s, cached (label lookup) {cached_build_s:.3f} s; "
          f"base image ready in {base_s:.2f} s ({base[0]})")
    goal = med["docker warm"] - med["process"]
    print(f"goal: docker overhead < 0.5 s per run -> {goal:+.3f} s: {'met' if goal < 0.5 else 'NOT met'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "repo": repo, "runs": args.runs, "wall_s": walls, "pytest_s": inner,
            "image_build_cold_s": cold_build_s, "image_build_cached_s": cached_build_s,
            "base_ready_s": base_s}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
