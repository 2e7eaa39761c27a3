"""Many episodes at once: step-synchronous generation, parallel tools, a resumable record.

`rollout(pairs, engine, sandbox, cfg, ...)` runs (task, seed) pairs, at most
`rollout.concurrency` at a time, split into `rollout.lanes` groups that take turns. A group's
round:

1. its episodes' next prompts are collected (episodes that hit a limit leave here);
2. generation: ONE `engine.generate` call for the group's prompts (one batch in HFEngine,
   concurrent requests to a server); with `rollout.seeding: batch` seeded with derive_seed(0,
   "batch", <instance:seed:turn of every prompt, in order>), with `seeding: episode` each prompt
   with its episode's own `turn_seed()` (the engine's per-prompt `seeds`);
3. the group's tool calls run in parallel threads, each in its own sandbox session, while the
   next group generates (with one lane, before anything else happens): the sandbox's tests
   use the CPU the engine leaves, instead of taking turns with it;
4. finished episodes are verified in background threads (overlapping the next rounds'
   generation; episodes with equal filtered diffs, such as the empty one, share one test run:
   `verify.Verdicts`) and each record is appended to the JSONL record file (flush + fsync) as soon as
   it is ready. New episodes start as others finish.

Reproducibility. `seeding: episode`: an episode is a function of (task, seed, policy, config)
alone - the same whatever else runs, whether the rollout was restarted, and equal to
`run_episode` - up to the float rounding of batched arithmetic, which can flip a draw that
falls within ~1e-7 of a token's boundary. `seeding: batch`: HFEngine seeds one RNG per
micro-batch, so a sample depends on which prompts share its batch; a rerun
with the same pairs, concurrency and engine gives the same episodes, but a RESUMED rollout
batches the remaining episodes differently (they are still valid samples of the policy, not the
ones an uninterrupted run would have drawn). Wall-time limits, command time limits and
process-backend paths can make any run differ; tool outputs have pytest's durations masked.

Resuming: the record file holds one JSON line per finished episode, keyed by (instance_id,
seed); a restarted rollout reloads it (a torn last line is dropped), checks that the records
were made with the same agent config and policy, and runs only what is missing. Records of
pairs the call does not ask for stay in the file (a screen's second round, resumed, reruns
its first round's call first).

`run_policy_on_tasks` is what every stage that runs a policy on tasks calls (this module's
`agent-rollout`, `difficulty`, `evaluate`): the engine opened from a `PolicySpec`, every task x
every seed (or, with a screen, the rest of the seeds only where the first ones solved the
task), the config's sandbox, agent config and repositories, a resumable record.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.episode import Episode, config_digest, effective_context_limit, task_env
from forgeline.agent.rewards import summarize
from forgeline.config import as_dict
from forgeline.params import AgentConfig
from forgeline.policy.engine import Engine, PolicySpec, add_engine_arguments, open_engine
from forgeline.provenance import Manifest, canonical_json, read_jsonl, write_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.base import Sandbox, TaskEnv
from forgeline.sandbox.verify import Verdicts
from forgeline.seeds import derive_seed, stage_seed

log = logging.getLogger(__name__)
STAGE = "agent.rollout"


def episode_key(record: Mapping[str, Any]) -> tuple[str, int]:
    return (record["instance_id"], int(record["seed"]))


def load_records(path: str | Path) -> list[dict]:
    """The complete records of a (possibly interrupted) record file; a torn or unreadable line
    is dropped with a warning. A missing file gives []."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: dropping an incomplete record (an interrupted write)", path, n)
                continue
            if isinstance(rec, dict) and "instance_id" in rec and "seed" in rec:
                records.append(rec)
    return records


class RecordFile:
    """Append-only JSONL of finished episodes: one line each, flushed and fsynced."""

    def __init__(self, path: str | Path, keep: Sequence[Mapping[str, Any]]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # rewrite without a torn tail, so new lines never glue onto half a line
        write_jsonl(self.path, keep)
        self._lock = threading.Lock()
        self._f = open(self.path, "a", encoding="utf-8")

    def append(self, record: Mapping[str, Any]) -> None:
        line = canonical_json(record) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def rollout_key(cfg: AgentConfig, policy: str) -> str:
    """What a record file's records must agree on: the agent config and the policy name."""
    return f"{policy}:{config_digest(cfg)}"


def rollout(pairs: Sequence[tuple[Mapping[str, Any], int]], engine: Engine, sandbox: Sandbox,
            cfg: AgentConfig, *, repos_root: str | Path | None = None,
            envs: Mapping[str, TaskEnv] | None = None, record_path: str | Path | None = None,
            tokenizer=None, policy: str = "policy", test_timeout_s: float = 120.0,
            progress: bool = True, verdicts: Verdicts | None = None) -> list[dict]:
    """Run every (task, seed) pair; returns all records (resumed ones included), sorted by
    (instance_id, seed). `envs` ({repo: TaskEnv}) or `repos_root` locates the snapshots;
    `record_path` is the resumable JSONL (None: keep nothing on disk). `verdicts`: test runs
    shared with other calls (an RL run's steps); None: this call's equal submissions only."""
    c = cfg
    tok = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
    if tok is None:
        raise ValueError("rollout needs the policy's tokenizer (tokenizer=, or an engine that has one)")
    keys = [(t["instance_id"], int(s)) for t, s in pairs]
    keyset = set(keys)
    if len(keyset) != len(keys):
        raise ValueError("duplicate (instance_id, seed) pairs")
    done: dict[tuple[str, int], dict] = {}
    others: list[dict] = []  # this run's records of other pairs: kept for the call that wants them
    run_key = rollout_key(c, policy)
    if record_path is not None:
        for rec in load_records(record_path):
            if rec.get("rollout_key") != run_key:
                raise ValueError(f"{record_path}: record {episode_key(rec)} was made with another "
                                 f"policy or agent config ({rec.get('rollout_key')} != {run_key}); "
                                 f"delete the file or use a new one")
            if episode_key(rec) in keyset:
                done[episode_key(rec)] = rec
            else:
                others.append(rec)
    todo = sorted(((t, int(s)) for t, s in pairs if (t["instance_id"], int(s)) not in done),
                  key=lambda ts: (ts[0]["instance_id"], ts[1]))
    env_cache: dict[str, TaskEnv] = dict(envs or {})

    def env_of(task) -> TaskEnv:
        repo = task["repo"]
        if repo not in env_cache:
            if repos_root is None:
                raise ValueError(f"no environment for {repo}: pass envs= or repos_root=")
            env_cache[repo] = task_env(task, repos_root)
        return env_cache[repo]

    for env, n in Counter(env_of(t) for t, _ in todo).items():
        sandbox.expect(env, 2 * n)  # each episode: a session and a graded test run, at most
    context_limit = effective_context_limit(engine, c.context_limit)
    concurrency = max(1, int(c.rollout.concurrency))
    per_episode = c.rollout.seeding == "episode"
    records = dict(done)
    sink = RecordFile(record_path, [*others, *done.values()]) if record_path is not None else None
    bar = tqdm(total=len(keys), initial=len(done), desc=f"rollout {policy}", unit="ep",
               dynamic_ncols=True, disable=not progress, leave=False)
    started: dict[tuple[str, int], Episode] = {}  # until their record is in
    if verdicts is None:
        verdicts = Verdicts()  # equal submissions of this rollout share one test run
    finishing: list[concurrent.futures.Future] = []
    queue = list(todo)

    def collect(block: bool) -> None:
        ready = list(finishing) if block else [f for f in finishing if f.done()]
        for fut in ready:
            rec = fut.result()
            rec["rollout_key"] = run_key
            records[episode_key(rec)] = rec
            started.pop(episode_key(rec), None)
            if sink is not None:
                sink.append(rec)
            bar.update(1)
            n_res = sum(r["outcome"] == "resolved" for r in records.values())
            bar.set_postfix(resolved=n_res, active=sum(map(len, groups)))
        for fut in ready:
            finishing.remove(fut)

    # lanes: episodes are split into groups that take turns, so one group generates while the
    # others' tool calls run (the sandbox's CPU beside the engine's, not after it)
    lanes = max(1, min(int(c.rollout.lanes), concurrency))
    share = [concurrency // lanes + (g < concurrency % lanes) for g in range(lanes)]
    groups: list[list[Episode]] = [[] for _ in range(lanes)]
    advancing: list[list[concurrent.futures.Future]] = [[] for _ in range(lanes)]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2 * concurrency,
                                                 thread_name_prefix="rollout")

    def to_verification(group: list[Episode], ep: Episode) -> None:
        group.remove(ep)
        finishing.append(pool.submit(ep.finish))

    try:
        while queue or any(groups):
            for g, group in enumerate(groups):
                for fut in advancing[g]:
                    fut.result()
                advancing[g] = []
                for ep in [ep for ep in group if ep.done]:
                    to_verification(group, ep)
                # start new episodes (each opens its session at its first tool call, in a tool thread)
                fresh = []
                while queue and len(group) + len(fresh) < share[g]:
                    task, seed = queue.pop(0)
                    fresh.append(Episode(task, seed, tok, sandbox, env_of(task), c, policy=policy,
                                         test_timeout_s=test_timeout_s, context_limit=context_limit,
                                         verdicts=verdicts))
                started.update((ep.key, ep) for ep in fresh)
                for ep in fresh:
                    ep.start()
                group.extend(fresh)
                group.sort(key=lambda e: e.key)
                # prompts; episodes stopped by a limit go to verification
                prompts = []
                for ep in list(group):
                    prompt = ep.next_prompt()
                    if prompt is None:
                        to_verification(group, ep)
                    else:
                        prompts.append((ep, prompt))
                if prompts:
                    t0 = time.monotonic()
                    if per_episode:  # one call, each prompt drawn with its episode's own turn seed
                        gens = engine.generate([p for _, p in prompts], int(c.max_new_tokens), float(c.temperature),
                                               float(c.top_p), seeds=[ep.turn_seed() for ep, _ in prompts])
                    else:
                        seed = derive_seed(0, "batch", *[f"{ep.key[0]}:{ep.key[1]}:{ep.steps}" for ep, _ in prompts])
                        gens = engine.generate([p for _, p in prompts], int(c.max_new_tokens),
                                               float(c.temperature), float(c.top_p), seed=seed)
                    dt = (time.monotonic() - t0) / len(prompts)
                    for ep, _ in prompts:
                        ep.timing["generate_s"] += dt
                    # the tool calls run while the next group generates
                    advancing[g] = [pool.submit(ep.advance, gen) for (ep, _), gen in zip(prompts, gens)]
                if lanes == 1:
                    for fut in advancing[g]:
                        fut.result()
                collect(block=False)
        collect(block=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for ep in started.values():  # what an error left open
            ep.close()
        bar.close()
        if sink is not None:
            sink.close()
    return [records[k] for k in sorted(records) if k in keyset]


# -- a policy on tasks (what the generating stages share) ------------------------------------

def sample_seeds(root_seed: int, n: int) -> list[int]:
    """The episode seeds of samples 0..n-1: derive_seed(root, "agent.sample", k). Two policies
    evaluated with the same root seed get the same seeds (paired evaluation)."""
    return [derive_seed(root_seed, "agent.sample", k) for k in range(n)]


@dataclass
class PolicyRun:
    """What `run_policy_on_tasks` ran: the episode records (sorted by (instance_id, seed)), the
    policy's name in them, what the engine loaded (`open_engine`'s `loaded`) and the engine's
    class name."""

    episodes: list[dict]
    name: str
    loaded: dict
    engine: str


def run_policy_on_tasks(cfg, stage: str, policy: PolicySpec, tasks: Sequence[Mapping[str, Any]],
                        seeds: Sequence[int], record_path: str | Path, *, dtype: str = "float32",
                        manifest: Manifest | None = None, screen: int = 0) -> PolicyRun:
    """Episodes of `policy` on every task x every seed (the pairs (task, seed), task-major), with
    the config's agent section, sandbox and repositories (`cfg`: the typed config). The engine
    comes from `open_engine` (seeded with stage_seed(cfg.seed, `stage`); a vLLM server lives
    for this call only); `record_path` is the resumable record (`rollout`); `manifest`, if given,
    times the rollout under "rollout". `screen` (0 < screen < len(seeds)): the first `screen`
    seeds run on every task first, the others only on the tasks one of those solved (one
    engine, one record: a resumed run skips the screen's finished episodes)."""
    with open_engine(policy, cfg.serving, dtype, seed=stage_seed(cfg.seed, stage)) as (engine, name, loaded):
        sandbox = get_sandbox(cfg.sandbox)
        verdicts = Verdicts()  # the screen's graded submissions, for the episodes after it

        def run(pairs):
            return rollout(pairs, engine, sandbox, cfg.agent, repos_root=cfg.repos.root,
                           record_path=record_path, policy=name,
                           test_timeout_s=float(cfg.sandbox.test_timeout_s), verdicts=verdicts)

        log.info("%s: %s (%s) on %d tasks x %d seed(s)", stage, name, loaded["kind"], len(tasks), len(seeds))
        with manifest.timed("rollout") if manifest is not None else contextlib.nullcontext():
            pairs = [(t, s) for t in tasks for s in seeds]
            if 0 < screen < len(seeds):
                pairs = [(t, s) for t in tasks for s in seeds[:screen]]
                solved = {ep["instance_id"] for ep in run(pairs) if ep["outcome"] == "resolved"}
                log.info("%s: %d of %d tasks solved in their first %d episode(s) go on to %d", stage,
                         len(solved), len(tasks), screen, len(seeds))
                pairs += [(t, s) for t in tasks if t["instance_id"] in solved for s in seeds[screen:]]
            episodes = run(pairs)
    return PolicyRun(episodes, name, loaded, type(engine).__name__)


# -- the stage ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, help="task JSONL file(s)")
    add_engine_arguments(parser)
    parser.add_argument("--samples", type=int, default=1, help="episodes per task (seeds 0..n-1 derived)")
    parser.add_argument("--out", required=True, help="the sorted episode JSONL")
    parser.add_argument("--partial", help="the resumable record (default: OUT.partial)")
    parser.add_argument("--manifest", help="manifest path (default: OUT with .manifest.json)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared, loaded machine more OpenMP "
                             "threads than free cores made generation ~8x slower)")


def run(cfg, args: argparse.Namespace) -> None:
    import torch

    c = cfg.agent
    torch.set_num_threads(max(1, args.threads))
    tasks = sorted((t for f in args.tasks for t in read_jsonl(f)), key=lambda t: t["instance_id"])
    seeds = sample_seeds(cfg.seed, args.samples)
    out = Path(args.out)
    partial = Path(args.partial) if args.partial else out.with_name(out.name + ".partial")
    inputs = [*args.tasks] + ([args.policy] if args.policy else [])
    manifest = Manifest(stage=STAGE, params={"agent": as_dict(c), "serving": as_dict(cfg.serving)},
                        seeds={"samples": seeds}, inputs=inputs, code=__name__)
    done = run_policy_on_tasks(cfg, STAGE, PolicySpec.from_args(args), tasks, seeds, partial, manifest=manifest)
    records = done.episodes
    write_jsonl(out, records)
    manifest.notes = {"policy": done.name, "engine": done.engine, "loaded": done.loaded,
                      "pairs": len(tasks) * len(seeds), "summary": summarize(records, c.reward),
                      "ppo_valid": sum(r["ppo_valid"] for r in records)}
    manifest.write(args.manifest or out.with_suffix(".manifest.json"), outputs=[out])
    partial.unlink(missing_ok=True)
