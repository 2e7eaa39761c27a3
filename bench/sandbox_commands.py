"""What one command in a docker session costs the machine: `docker exec` vs the session's INIT,
side by side in one run, in the same container:

    .venv/bin/python bench/sandbox_commands.py [--repo ledgerkit] [--n 20] [--repeats 3]
        [--json bench/out/sandbox_commands.json]

For each command an episode's turns are made of (a no-op, a `cat`, an `edit` call's
`python3 -c`, `import pytest`, the repository's whole test suite, the session's `git diff`),
the two ways run --n times each, alternating per repeat: "docker exec" is what DockerSession did
before (exec_create + exec_start + exec_inspect, a runc process per command), "INIT" is what it
does now (the request on the container's attached stdin, INIT forks the command). Reported:
median over the repeats of wall ms per command, the machine's busy CPU ms per command
(/proc/stat: this process, the container, the kernel, containerd and dockerd) and the ratio.
Then the whole suite through INIT, `python3 -m pytest` with the pytest zygote turned off
(FORGELINE_PYTEST_ZYGOTE=0) and on (src/forgeline/sandbox/container/), and what a whole session
(create, start, copy the snapshot, remove) and a fresh-container test run (`run_tests`) cost now. The repository's image must be built (`forgeline image`).
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


def busy_s() -> float:
    """All CPUs' non-idle time so far, in seconds."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def docker_exec(session, command: str) -> int:
    """One command the way DockerSession ran it before INIT took commands: an exec per command."""
    from docker.utils.socket import frames_iter
    api = session._sandbox.client.api
    exec_id = api.exec_create(session.container.id, ["bash", "-c", command], user="forgeline",
                              workdir="/testbed")["Id"]
    sock = api.exec_start(exec_id, socket=True)
    for _ in frames_iter(sock, tty=False):
        pass
    sock.close()
    while (info := api.exec_inspect(exec_id)).get("Running"):
        time.sleep(0.02)
    return int(info["ExitCode"])


def per_call(fn, n: int) -> tuple[float, float]:
    """(wall ms, machine CPU ms) per call of fn, over n calls after one warm-up call."""
    fn()
    b0, t0 = busy_s(), time.perf_counter()
    for _ in range(n):
        fn()
    return 1000 * (time.perf_counter() - t0) / n, 1000 * (busy_s() - b0) / n


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from forgeline import config
    from forgeline.agent.tools import edit_command
    from forgeline.sandbox.docker import DockerSandbox
    from forgeline.tasks.repos import RepoSnapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default="ledgerkit")
    ap.add_argument("--n", type=int, default=20, help="calls per command, way and repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="bench/out/sandbox_commands.json")
    args = ap.parse_args()

    cfg = config.load([ROOT / "params.yaml"])
    env = RepoSnapshot.load(ROOT / cfg.section("repos.root"), args.repo).env()
    module = next((env.source / args.repo).glob("*.py")).relative_to(env.source).as_posix()
    commands = {
        "true": "true",
        "cat a module": f"cat {module}",
        "edit (python3 -c, fails: no match)": edit_command(module, "no such text anywhere", "x"),
        "python3 -c 'import pytest'": "python3 -c 'import pytest'",
        "the whole test suite": "FORGELINE_PYTEST_ZYGOTE=0 python3 -m pytest -q -p no:cacheprovider",
        "git diff (the session's)": "git add -A && git diff --cached --no-color --binary",
    }
    suite = "python3 -m pytest -q -p no:cacheprovider"
    sandbox = DockerSandbox(warm=0)
    rows: dict[str, dict[str, list]] = {c: {"exec": [], "init": []} for c in commands}
    zygote: dict[str, list] = {"plain": [], "zygote": []}
    with sandbox.session(env) as s:
        for rep in range(args.repeats):
            for name, command in commands.items():
                ways = [("exec", lambda: docker_exec(s, command)), ("init", lambda: s.exec(command, 60))]
                for way, fn in ways if rep % 2 == 0 else ways[::-1]:
                    rows[name][way].append(per_call(fn, args.n))
            ways = [("plain", lambda: s.exec("FORGELINE_PYTEST_ZYGOTE=0 " + suite, 60)),
                    ("zygote", lambda: s.exec(suite, 60))]
            for way, fn in ways if rep % 2 == 0 else ways[::-1]:
                zygote[way].append(per_call(fn, args.n))
            print(f"repeat {rep + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    whole = {"session (create, start, copy, remove)": lambda: sandbox.session(env).close(),
             "run_tests (fresh container, the whole suite)": lambda: sandbox.run_tests(env, [], None, 60)}
    totals = {name: [per_call(fn, max(args.n // 2, 1)) for _ in range(args.repeats)] for name, fn in whole.items()}
    sandbox.close()

    def med(values, i):
        return statistics.median(v[i] for v in values)

    print(f"\n{args.repo}, {args.n} calls x {args.repeats} repeats, medians; load average after: "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| command | docker exec: wall ms | CPU ms | INIT: wall ms | CPU ms | CPU ratio |")
    print("|---|---|---|---|---|---|")
    table = {}
    for name, r in rows.items():
        e, i = (med(r["exec"], 0), med(r["exec"], 1)), (med(r["init"], 0), med(r["init"], 1))
        table[name] = {"exec_wall_ms": e[0], "exec_cpu_ms": e[1], "init_wall_ms": i[0], "init_cpu_ms": i[1]}
        print(f"| {name} | {e[0]:.1f} | {e[1]:.1f} | {i[0]:.1f} | {i[1]:.1f} | {i[1] / e[1]:.2f}x |")
    p, z = (med(zygote["plain"], 0), med(zygote["plain"], 1)), (med(zygote["zygote"], 0), med(zygote["zygote"], 1))
    table["suite: plain vs zygote"] = {"plain_wall_ms": p[0], "plain_cpu_ms": p[1], "zygote_wall_ms": z[0],
                                       "zygote_cpu_ms": z[1]}
    print("\n| the whole suite through INIT | wall ms | CPU ms |\n|---|---|---|")
    print(f"| python3 -m pytest, FORGELINE_PYTEST_ZYGOTE=0 | {p[0]:.1f} | {p[1]:.1f} |")
    print(f"| python3 -m pytest (the zygote) | {z[0]:.1f} | {z[1]:.1f} ({z[1] / p[1]:.2f}x) |")
    print("\n| whole | wall ms | CPU ms |\n|---|---|---|")
    for name, r in totals.items():
        table[name] = {"wall_ms": med(r, 0), "cpu_ms": med(r, 1)}
        print(f"| {name} | {med(r, 0):.0f} | {med(r, 1):.0f} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"repo": args.repo, "n": args.n, "repeats": args.repeats, "rows": table,
                               "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
