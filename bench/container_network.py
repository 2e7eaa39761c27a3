"""A task container's network, two ways: `network_mode: none` alone vs NetworkDisabled as well.

    .venv/bin/python bench/container_network.py [--repo semver] [--n 10] [--repeats 3] \
        [--json bench/out/container_network.json]

Both give the container a network namespace of its own with loopback only. With `none` alone
the engine builds a libnetwork sandbox for it (a namespace made and bind-mounted by dockerd,
then torn down); with NetworkDisabled the engine attaches no network and runc makes the
namespace with the container. Per way, alternating within each repeat, `--n` times each:
  - bare: containers.create(image, "true"), start, wait, remove;
  - session: DockerSandbox(warm=0).session(env), exec("true"), close(): what an episode pays;
  - graded run: DockerSandbox(warm=0).run_tests(env): what a verdict pays (the whole suite).
Wall ms and the machine's CPU ms (/proc/stat: the engine, runc, the kernel, the container) per
call, medians over the repeats. The "none" way is the sandbox with NetworkDisabled taken out of
its create call. Needs the repository's image (`snakemake results/images/REPO.json`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_cpu_s() -> float:
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def timed(fn, n: int) -> tuple[float, float]:
    fn()  # warm the path (image layers in the page cache)
    c0, t0 = machine_cpu_s(), time.perf_counter()
    for _ in range(n):
        fn()
    return 1000 * (time.perf_counter() - t0) / n, 1000 * (machine_cpu_s() - c0) / n


def main() -> int:
    from docker.models.containers import ContainerCollection
    from forgeline.sandbox.docker import DockerSandbox
    from forgeline.sandbox.base import TaskEnv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default="semver")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    record_path = ROOT / "results" / "images" / f"{args.repo}.json"
    if not record_path.exists():
        print(f"{record_path} is missing: build it first (snakemake {record_path.relative_to(ROOT)})")
        return 2
    record = json.loads(record_path.read_text())
    env = TaskEnv(args.repo, ROOT / "data" / "repos" / args.repo, record["commit"], record["tag"])

    create = ContainerCollection.create
    ways = {"none": False, "none + NetworkDisabled": True}
    current = {"disabled": True}

    def create_as_configured(self, image, command=None, **kwargs):
        if not current["disabled"]:
            kwargs.pop("network_disabled", None)
        return create(self, image, command, **kwargs)

    ContainerCollection.create = create_as_configured
    sandbox = DockerSandbox(warm=0)
    client = sandbox.client

    def bare():
        kw = {"network_mode": "none"}
        if current["disabled"]:
            kw["network_disabled"] = True
        c = client.containers.create(record["tag"], ["true"], **kw)
        c.start()
        c.wait()
        c.remove(force=True)

    def session():
        s = sandbox.session(env)
        s.exec("true", 5)
        s.close()

    def graded():
        sandbox.run_tests(env, [], None, 30)
        sandbox.close()  # the background removal on the clock too

    def interfaces_of_a_session() -> list[str]:
        s = sandbox.session(env)
        try:
            return s.exec("ls /sys/class/net", 5).output.split()
        finally:
            s.close()

    results: dict[str, dict[str, list]] = {w: {"bare": [], "session": [], "graded run": []} for w in ways}
    interfaces = {}
    for repeat in range(args.repeats):
        for way, disabled in ways.items():
            current["disabled"] = disabled
            interfaces[way] = interfaces_of_a_session()
            for what, fn in (("bare", bare), ("session", session), ("graded run", graded)):
                results[way][what].append(timed(fn, args.n))
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    sandbox.shutdown()
    ContainerCollection.create = create

    print(f"{args.repo}, {args.n} calls x {args.repeats} repeats per cell, load average "
          f"{os.getloadavg()[0]:.2f} after; interfaces seen in a session: "
          + ", ".join(f"{w}: {' '.join(i)}" for w, i in interfaces.items()))
    print("| call | none: wall ms | CPU ms | + NetworkDisabled: wall ms | CPU ms | CPU saved |")
    print("|---|---|---|---|---|---|")
    table = {}
    for what in ("bare", "session", "graded run"):
        a = [statistics.median(v[i] for v in results["none"][what]) for i in (0, 1)]
        b = [statistics.median(v[i] for v in results["none + NetworkDisabled"][what]) for i in (0, 1)]
        table[what] = {"none": a, "network_disabled": b}
        print(f"| {what} | {a[0]:.0f} | {a[1]:.0f} | {b[0]:.0f} | {b[1]:.0f} | {a[1] - b[1]:.0f} ms |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"repo": args.repo, "n": args.n, "repeats": args.repeats,
                                         "interfaces": interfaces, "medians": table,
                                         "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
