"""Stage `difficulty`: keep the pool tasks the base (SFT) policy solves sometimes.

For each validated candidate task of the RL pool, `k` episodes of the policy (the config's
`serving` engine) with fixed seeds through `forgeline.agent.rollout.run_policy_on_tasks`
(resumable partial record);
c = resolved episodes of n = k. A task is kept when its success fraction c/n lies inside the
band [lo, hi] (inclusive; params.yaml: 1/4..3/4): a task the policy always or never solves gives
PPO no signal (GRPO-style advantages are zero). pass@k is reported with the unbiased
estimator 1 - C(n-c, k)/C(n, k).

With `screen` = s (0 < s < k) every task first gets the first s seeds' episodes and only the
tasks one of them solved get the other k - s: most pool tasks are never solved by the tiny base
policy, and their last k - s episodes were ~45% of the stage's episodes. A task with 1 or 2
successes of k whose successes all fall after the screen is lost to the band; the report lists
the stopped tasks (`screened_out`) apart from the histogram of c over the tasks that got all k.

Outputs: the pool JSONL (the kept tasks, unchanged, sorted by instance_id), the episodes
JSONL, a JSON report (histogram of c, per repository counts, kept/dropped tasks, outcome
counts, well-formed tool-call rate), then the manifest (which also gets the machine-dependent
time per episode: the other outputs are functions of tasks, policy, seeds and config).

Tasks whose `base_commit` differs from the repository snapshot (stale validation output) are
skipped and listed in the report; a task of a non-pool repository is an error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.agent.rewards import summarize
from forgeline.agent.rollout import run_policy_on_tasks, sample_seeds
from forgeline.config import as_dict
from forgeline.params import RewardConfig
from forgeline.policy.engine import PolicySpec
from forgeline.provenance import Manifest, read_jsonl, write_json, write_jsonl
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import repo_key

log = logging.getLogger(__name__)
STAGE = "tasks.difficulty"

# -- pure -----------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c succeeded (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k). Requires 0 <= c <= n and 1 <= k <= n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k(n={n}, c={c}, k={k}): need 0 <= c <= n and 1 <= k <= n")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def in_band(n: int, c: int, band: Sequence[float]) -> bool:
    """lo <= c/n <= hi, compared exactly (fractions: 1/4 is inside [0.25, 0.75])."""
    if n <= 0:
        return False
    frac = Fraction(c, n)
    lo, hi = (Fraction(str(x)) for x in band)
    return lo <= frac <= hi


def cap_per_repo(tasks: Sequence[Mapping[str, Any]], max_per_repo: int, seed: int) -> list[dict]:
    """At most `max_per_repo` tasks of each repository (0 = all), chosen by the hash rank
    sha256('<seed>:<instance_id>') (stable under adding/removing other tasks); sorted by id."""
    by_repo: dict[str, list] = {}
    for t in tasks:
        by_repo.setdefault(repo_key(t["repo"]), []).append(t)
    out = []
    for repo in sorted(by_repo):
        group = sorted(by_repo[repo], key=lambda t: hashlib.sha256(f"{seed}:{t['instance_id']}".encode()).hexdigest())
        out += group[:max_per_repo] if max_per_repo > 0 else group
    return sorted(out, key=lambda t: t["instance_id"])


def task_stats(episodes: Sequence[Mapping[str, Any]], k: int) -> dict[str, dict]:
    """{instance_id: {repo, n, c, pass@1, pass@k}} from episode records; pass@k is None for a
    task with fewer than k episodes (one the screen stopped: no unbiased estimate)."""
    acc: dict[str, dict] = {}
    for ep in episodes:
        s = acc.setdefault(ep["instance_id"], {"repo": repo_key(ep["repo"]), "n": 0, "c": 0})
        s["n"] += 1
        s["c"] += ep["outcome"] == "resolved"
    for s in acc.values():
        s["pass@1"] = pass_at_k(s["n"], s["c"], 1)
        s[f"pass@{k}"] = pass_at_k(s["n"], s["c"], k) if s["n"] >= k else None
    return dict(sorted(acc.items()))


def report(episodes: Sequence[Mapping[str, Any]], k: int, band: Sequence[float], reward_cfg: RewardConfig,
           skipped: Mapping[str, str] | None = None) -> dict:
    """The difficulty report: per task stats and kept flag, histogram of c over the tasks that
    got all k episodes, the tasks the screen stopped (fewer than k, none solved: out of the
    band), per repository counts, outcomes, well-formed tool-call rate (turns), time per
    episode (s)."""
    stats = task_stats(episodes, k)
    for s in stats.values():
        s["kept"] = s["n"] >= k and in_band(s["n"], s["c"], band)
    full = [s for s in stats.values() if s["n"] >= k]
    hist = {str(c): 0 for c in range(k + 1)}
    for s in full:
        hist[str(s["c"])] = hist.get(str(s["c"]), 0) + 1
    repos: dict[str, dict] = {}
    for s in stats.values():
        r = repos.setdefault(s["repo"], {"evaluated": 0, "kept": 0, "resolved_episodes": 0, "episodes": 0})
        r["evaluated"] += 1
        r["kept"] += s["kept"]
        r["resolved_episodes"] += s["c"]
        r["episodes"] += s["n"]
    turns = [t for ep in episodes for t in ep["turns"]]
    well = sum(bool(t["labels"]["well_formed_call"]) for t in turns)
    walls = [ep["timing"]["wall_s"] for ep in episodes if ep.get("timing", {}).get("wall_s") is not None]
    return {
        "k": k, "band": list(band),
        "tasks": stats,
        "kept": sorted(i for i, s in stats.items() if s["kept"]),
        "dropped": sorted(i for i, s in stats.items() if not s["kept"]),
        "c_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
        "screened_out": sorted(i for i, s in stats.items() if s["n"] < k),
        "repos": dict(sorted(repos.items())),
        "skipped": dict(sorted((skipped or {}).items())),
        "episodes": summarize(episodes, reward_cfg),
        "exit_status": {s: sum(ep["exit_status"] == s for ep in episodes)
                        for s in sorted({ep["exit_status"] for ep in episodes})},
        "turns": len(turns),
        "well_formed_call_rate": well / len(turns) if turns else 0.0,
        "mean_pass@1": (sum(s["pass@1"] for s in stats.values()) / len(stats)) if stats else 0.0,
        f"mean_pass@{k}": (sum(s[f"pass@{k}"] for s in full) / len(full)) if full else None,
        "mean_episode_wall_s": (sum(walls) / len(walls)) if walls else None,
        "mean_episode_generate_s": (sum(ep["timing"]["generate_s"] for ep in episodes if "timing" in ep)
                                    / len(episodes)) if episodes else None,
    }


# -- the stage ------------------------------------------------------------------------------

def fresh_tasks(tasks: Sequence[Mapping[str, Any]], repos_root: str | Path) -> tuple[list[dict], dict[str, str]]:
    """(tasks whose base_commit matches their snapshot, {instance_id: reason} of the others)."""
    commits: dict[str, str | None] = {}
    ok, skipped = [], {}
    for t in tasks:
        repo = repo_key(t["repo"])
        if repo not in commits:
            try:
                commits[repo] = RepoSnapshot.load(repos_root, repo).commit
            except (OSError, ValueError) as exc:
                commits[repo] = None
                log.warning("no snapshot of %s: %s", repo, exc)
        base = t.get("base_commit")
        if commits[repo] is None:
            skipped[t["instance_id"]] = "no repository snapshot"
        elif base and base != commits[repo]:
            skipped[t["instance_id"]] = f"stale: base_commit {base[:12]} != snapshot {commits[repo][:12]}"
        else:
            ok.append(dict(t))
    return ok, skipped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, help="validated task JSONL file(s) of the pool")
    parser.add_argument("--policy", required=True, help="the policy folder (the SFT policy)")
    parser.add_argument("--out", required=True, help="the pool JSONL (kept tasks)")
    parser.add_argument("--report", required=True, help="the report JSON")
    parser.add_argument("--episodes", help="episode JSONL (default: OUT with .episodes.jsonl)")
    parser.add_argument("--partial", help="resumable episode record (default: OUT.partial)")
    parser.add_argument("--manifest", help="manifest path (default: OUT with .manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    # `threads` is the job's share of the machine: the engine generates on one thread
    # (HFEngine's default), the containers use the rest
    d, a = cfg.tasks.difficulty, cfg.agent
    k = int(d.k)
    seeds = [int(s) for s in d.seeds] if d.seeds is not None else sample_seeds(cfg.seed, k)
    pool = set(cfg.repos.pool)
    repos_root = Path(cfg.repos.root)
    tasks = sorted((t for f in args.tasks for t in read_jsonl(f)), key=lambda t: t["instance_id"])
    foreign = sorted({repo_key(t["repo"]) for t in tasks} - pool)
    if foreign:
        raise ValueError(f"tasks of non-pool repositories {foreign}: the difficulty filter is for repos.pool")
    tasks, skipped = fresh_tasks(tasks, repos_root)
    if skipped:
        log.warning("skipping %d stale task(s), e.g. %s", len(skipped), next(iter(sorted(skipped))))
    tasks = cap_per_repo(tasks, int(d.max_tasks_per_repo), cfg.seed)
    out = Path(args.out)
    episodes_path = Path(args.episodes) if args.episodes else out.with_name(out.stem + ".episodes.jsonl")
    partial = Path(args.partial) if args.partial else out.with_name(out.name + ".partial")
    manifest = Manifest(stage=STAGE, params={"tasks.difficulty": as_dict(d), "agent": as_dict(a),
                                             "serving": as_dict(cfg.serving)},
                        seeds={"episodes": seeds}, inputs=[*args.tasks, args.policy], code=__name__)
    done = run_policy_on_tasks(cfg, STAGE, PolicySpec(policy=args.policy), tasks, seeds, partial, manifest=manifest,
                               screen=int(d.screen))
    episodes, name = done.episodes, done.name
    rep = report(episodes, k, d.band, a.reward, skipped)
    timing = {key: rep.pop(key) for key in ("mean_episode_wall_s", "mean_episode_generate_s")}
    kept = set(rep["kept"])
    write_jsonl(out, [t for t in tasks if t["instance_id"] in kept])
    write_jsonl(episodes_path, [{kk: v for kk, v in ep.items() if kk != "timing"} for ep in episodes])
    write_json(args.report, rep)
    manifest.notes = {"policy": name, "tasks": len(tasks), "skipped": len(skipped), "kept": len(kept),
                      "screened_out": len(rep["screened_out"]), "c_histogram": rep["c_histogram"],
                      "outcomes": rep["episodes"]["outcomes"],
                      "well_formed_call_rate": rep["well_formed_call_rate"], **timing}
    manifest.write(args.manifest or out.with_suffix(".manifest.json"),
                   outputs=[out, episodes_path, Path(args.report)])
    partial.unlink(missing_ok=True)
    log.info("difficulty: %d tasks, kept %d (c histogram %s; %d stopped by the screen)", len(tasks), len(kept),
             json.dumps(rep["c_histogram"]), len(rep["screened_out"]))
