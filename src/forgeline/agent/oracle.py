"""Oracle trajectories: a scripted expert that solves a task through the agent's own tools in
the real sandbox, so every tool output in its trajectory is real. SFT data for the tiny policy.

The script (`forgeline.agent.oracle_script.oracle_actions`): grep the function the bug is in,
then the fix (straight away, or by the scan of candidate edits, each followed by the test call
that takes a wrong one back), the test call, `submit`.

The turns are fed through the same `Episode` loop as a policy's, by a `ScriptedEngine` whose
"generations" are the tokenizer's ids of the scripted text plus <|im_end|> (logprobs 0: nothing
was sampled). The record says `source: "oracle"`; only episodes that `verify()` resolves (and
whose test runs failed until the fix, `usable_oracle_episode`) are kept.

`ScriptedEngine` is also the test double for the agent loop: an Engine that replays fixed texts.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm import tqdm

from forgeline.agent.episode import run_episode, task_env
from forgeline.agent.oracle_script import TEST_COMMAND, oracle_actions, oracle_texts
from forgeline.agent.tools import IM_END
from forgeline.agent.trajectory import export_trajectories
from forgeline.config import as_dict
from forgeline.params import AgentConfig
from forgeline.policy.engine import Engine, Generation
from forgeline.provenance import Manifest, read_jsonl, write_jsonl
from forgeline.sandbox import get_sandbox
from forgeline.sandbox.base import Sandbox, TaskEnv

log = logging.getLogger(__name__)
STAGE = "agent.oracle"
_ASSISTANT = "<|im_start|>assistant\n"


# -- a replaying engine ---------------------------------------------------------------------

class ScriptedEngine(Engine):
    """An Engine whose answers come from `respond(prompt_text, turn) -> text` (turn = how many
    assistant turns the prompt already holds). Returns the tokenizer's ids of the text plus
    <|im_end|>, logprobs 0, finish "stop"; a text longer than max_new_tokens is cut there
    (finish "length"), as a real engine would. Seeds are ignored."""

    def __init__(self, tokenizer, respond: Callable[[str, int], str]):
        self.tokenizer = tokenizer
        self.respond = respond
        self.im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.calls = 0
        self.prompts = 0

    @classmethod
    def replay(cls, tokenizer, scripts: Mapping[str, Sequence[str]]) -> "ScriptedEngine":
        """Answers by script: the first key found in the prompt's text picks the script; turn t
        gets script[t] (the last entry again once the script is exhausted)."""
        def respond(prompt: str, turn: int) -> str:
            for marker, texts in scripts.items():
                if marker in prompt:
                    return texts[min(turn, len(texts) - 1)]
            raise KeyError("no script matches the prompt")
        return cls(tokenizer, respond)

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, stop=(), seeds=None):
        self.calls += 1
        out = []
        for p in prompts:
            self.prompts += 1
            text = p if isinstance(p, str) else self.tokenizer.decode(list(p), skip_special_tokens=False)
            answer = self.respond(text, max(text.count(_ASSISTANT) - 1, 0))
            ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.im_end_id]
            reason = "stop"
            if len(ids) > max_new_tokens:
                ids, reason = ids[:max_new_tokens], "length"
                answer = self.tokenizer.decode(ids, skip_special_tokens=False)
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), text=answer,
                                  finish_reason=reason, prompt_tokens=len(p)))
        return out



def oracle_episode(task: Mapping[str, Any], sandbox: Sandbox, tokenizer, cfg: AgentConfig,
                   *, env: TaskEnv | None = None, repos_root: str | Path | None = None,
                   test_timeout_s: float = 120.0) -> dict | None:
    """Run the oracle on `task` through the agent loop (the scan when `cfg`'s
    `oracle.max_guesses` > 0); returns the episode record (`source: "oracle"`, logprobs 0), or
    None when the scan does not reach the task's fix. Keep it only if
    `usable_oracle_episode(record)`."""
    env = env if env is not None else task_env(task, repos_root)
    actions = oracle_actions(task, env.source, int(cfg.oracle.max_lines), int(cfg.oracle.max_guesses))
    if actions is None:
        return None
    texts = oracle_texts(actions)
    c = replace(cfg, max_steps=max(int(cfg.max_steps), len(texts)))
    engine = ScriptedEngine(tokenizer, lambda prompt, turn: texts[min(turn, len(texts) - 1)])
    record = run_episode(task, 0, engine, sandbox, c, env=env, tokenizer=tokenizer, policy="oracle",
                         source="oracle", test_timeout_s=test_timeout_s)
    record["oracle_actions"] = [name for name, _ in actions]
    record["oracle_guesses"] = sum(1 for name, _ in actions if name == "edit") - 1
    return record


_FAILURES = re.compile(r"\b\d+ (?:failed|errors?)\b")


def usable_oracle_episode(record: Mapping[str, Any]) -> bool:
    """Resolved, and every test run but the last failed: a wrong edit that happened to pass
    the suite would teach the policy to go on past a passing fix."""
    if record["outcome"] != "resolved":
        return False
    runs = [r.get("output", "") for t in record["turns"] for call, r in zip(t["tool_calls"], t["tool_results"])
            if call["name"] == "bash" and call["arguments"].get("command") == TEST_COMMAND]
    return bool(runs) and all(_FAILURES.search(o) for o in runs[:-1]) and not _FAILURES.search(runs[-1])


# -- the stage ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", required=True, help="task JSONL file(s)")
    parser.add_argument("--tokenizer", required=True, help="the policy folder whose tokenizer to use")
    parser.add_argument("--out", required=True, help="JSONL of the resolved oracle episodes")
    parser.add_argument("--traj-dir", help="also export mini-swe-agent trajectories here")
    parser.add_argument("--manifest", help="manifest path (default: OUT with .manifest.json)")


def run(cfg, args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    section = cfg.agent
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sandbox = get_sandbox(cfg.sandbox)
    repos_root = Path(cfg.repos.root)
    tasks = sorted((t for f in args.tasks for t in read_jsonl(f)), key=lambda t: t["instance_id"])
    manifest = Manifest(stage=STAGE, params={"agent": as_dict(section)}, inputs=[*args.tasks, args.tokenizer],
                        code=__name__)
    kept, dropped, unscanned = [], [], []
    with manifest.timed("oracle"):
        for task in tqdm(tasks, desc="oracle", unit="task", dynamic_ncols=True):
            rec = oracle_episode(task, sandbox, tokenizer, section, repos_root=repos_root,
                                 test_timeout_s=float(cfg.sandbox.test_timeout_s))
            if rec is None:
                unscanned.append(task["instance_id"])
            else:
                (kept if usable_oracle_episode(rec) else dropped).append(rec)
    for rec in dropped:
        log.warning("oracle did not resolve %s: %s (%s)", rec["instance_id"], rec["outcome"],
                    json.dumps(rec["verdict"].get("failing", []))[:300])
    for rec in kept:
        rec.pop("timing", None)  # machine-dependent; the manifest has the stage's timings
    out = Path(args.out)
    write_jsonl(out, kept)
    outputs = [out]
    if args.traj_dir:
        Path(args.traj_dir).mkdir(parents=True, exist_ok=True)
        export_trajectories(kept, args.traj_dir)
        outputs.append(Path(args.traj_dir))
    manifest.notes = {"tasks": len(tasks), "episodes": len(kept) + len(dropped), "resolved": len(kept),
                      "not_scanned": len(unscanned),
                      "guesses": sum(r["oracle_guesses"] for r in kept),
                      "unresolved": sorted({r["instance_id"] for r in dropped}),
                      "mean_sequence_tokens": (sum(len(r["tokens"]) for r in kept) / len(kept)) if kept else 0}
    manifest.write(args.manifest or out.with_suffix(".manifest.json"), outputs=outputs)
