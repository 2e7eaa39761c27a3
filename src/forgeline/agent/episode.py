"""One agent episode: policy (an Engine) <-> tools in the task's sandbox session <-> verifier.

The conversation is Qwen3's tool-call chat format (`forgeline.policy.chat`), the same for the
tiny and the real policy. Tools (short schemas: every prompt pays for them):

- `bash(command)`: one command in the task's session (per-command time limit);
- `edit(path, old, new[, line])`: replace the single occurrence of `old` in `path` (or, with
  `line`, its occurrence in the nearest line that holds it once);
- `submit()`: end the episode; the repository as it is now is the answer.

Their schemas, the prompts and the reading of tool outputs are `forgeline.agent.tools`.

An `Episode` is a small state machine, so a rollout can drive many of them step-synchronously:
`start()` renders the first prompt, `next_prompt()` returns the token ids of the next prompt (or
None when a limit ends the episode), `advance(generation)` records the turn, executes its tool
calls in the session (opened, the bug patch applied, at the first call: a fifth of the base policy's
episodes end without one, and their answer is the unchanged repository) and appends the results,
`finish()` takes the session's diff, closes it, and asks `forgeline.sandbox.verify.verify` (a
fresh environment, tests restored; `verdicts` shares the runs of equal submissions) for the
verdict. `run_episode` does all of it for one episode.

Token alignment (what PPO needs): `tokens` is the exact sequence the policy saw, built
incrementally: the rendered non-generated parts (system/user/tool turns, generation prompts),
tokenized, and the engine's generated ids appended AS-IS. `action_mask` is 1 on generated
tokens, `logprobs` holds their sampling logprobs (0 elsewhere). At the end the sequence is
checked against the chat template's rendering of the recorded messages: `ids_match` (the same
ids), `text_match` (the same text) and `template_prefix_ok` (each prompt was a prefix of the
next rendering). See `alignment_valid`.

The record (`Episode.finish()`) is a JSON-serialisable dict; see docs/agent.md for its fields.
"""
from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.agent.rewards import process_reward
from forgeline.agent.tools import (IM_END, NO_CALL_MESSAGE, edit_command, f2p_passing, looks_like_error,
                                   normalize_pytest, system_prompt, tool_schemas, truncate, user_prompt)
from forgeline.config import as_dict
from forgeline.params import AgentConfig
from forgeline.policy.chat import assistant_message, parse_tool_calls, render, tool_message
from forgeline.policy.engine import Engine, Generation
from forgeline.sandbox.base import Sandbox, SandboxError, TaskEnv
from forgeline.sandbox.verify import Verdicts, verify
from forgeline.seeds import derive_seed
from forgeline.tasks.repos import RepoSnapshot
from forgeline.tasks.schema import repo_key

log = logging.getLogger(__name__)

RECORD_VERSION = 1

# -- config ---------------------------------------------------------------------------------

def config_digest(cfg: AgentConfig) -> str:
    """sha256 (16 hex) of the canonical JSON of an agent config (the config's `agent`)."""
    text = json.dumps(as_dict(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the episode ----------------------------------------------------------------------------

def task_env(task: Mapping[str, Any], repos_root: str | Path) -> TaskEnv:
    """The task's environment: its repository snapshot under `repos_root`. A task that pins a
    `base_commit` must match the snapshot (a stale snapshot would make every verdict wrong)."""
    snap = RepoSnapshot.load(repos_root, repo_key(task["repo"]))
    base = task.get("base_commit")
    if base and base != snap.commit:
        raise ValueError(f"{task['instance_id']}: base_commit {base[:12]} != snapshot {snap.commit[:12]} "
                         f"of {snap.path}: the repository changed since the task was made")
    return snap.env()


class Episode:
    """One task, one seed, one policy: see the module docstring for the protocol.

    `tokenizer`: the policy's tokenizer (its chat template renders the prompts). `cfg`: the
    config's `agent`. `test_timeout_s`: the verifier's time limit (sandbox.test_timeout_s).
    `source`: "policy" or "oracle" (recorded). The session is opened by the first tool call and
    closed by `finish()` or `close()`. `verdicts`: the job's verify.Verdicts (None: each episode
    runs its own).
    """

    def __init__(self, task: Mapping[str, Any], seed: int, tokenizer, sandbox: Sandbox, env: TaskEnv,
                 cfg: AgentConfig, policy: str = "policy", source: str = "policy",
                 test_timeout_s: float = 120.0, context_limit: int | None = None,
                 verdicts: Verdicts | None = None):
        self.task = task
        self.verdicts = verdicts
        self.seed = int(seed)
        self.tok = tokenizer
        self.sandbox = sandbox
        self.env = env
        self.cfg = cfg
        self.policy = policy
        self.source = source
        self.test_timeout_s = float(test_timeout_s)
        self.context_limit = int(context_limit or self.cfg.context_limit)
        self.tools = tool_schemas(self.cfg.tools)
        self.im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.session = None
        self.messages: list[dict] = []
        self.turns: list[dict] = []
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.exit_status: str | None = None
        self.prefix_ok = True
        self.steps = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.invalid_run = 0
        self.malformed = 0  # turns without a well-formed call, in all
        self.f2p_best = 0  # FAIL_TO_PASS tests passing: the most any of the agent's runs showed
        self.f2p_last = 0  # ... and what its last run showed
        self.timing = {"generate_s": 0.0, "tools_s": 0.0, "verify_s": 0.0, "wall_s": 0.0}
        self._t0: float | None = None
        self._rendered = ""
        self._gen_prompt = ""
        self._prompt: list[int] | None = None
        self.record: dict | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.task["instance_id"], self.seed)

    @property
    def done(self) -> bool:
        return self.exit_status is not None

    # -- tokens ---------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False) if text else []

    def _append(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] = ()) -> None:
        self.tokens.extend(int(i) for i in ids)
        self.mask.extend([1 if generated else 0] * len(ids))
        if generated:
            self.logprobs.extend(float(x) for x in logprobs)
        else:
            self.logprobs.extend([0.0] * len(ids))

    def start(self) -> "Episode":
        """Render the first prompt (the session opens at the first tool call)."""
        self._t0 = time.monotonic()
        self.messages = [{"role": "system", "content": system_prompt(self.task)},
                         {"role": "user", "content": user_prompt(self.task)}]
        self._rendered = render(self.tok, self.messages, self.tools, add_generation_prompt=False)
        self._append(self._encode(self._rendered), generated=False)
        return self

    def _elapsed(self) -> float:
        return time.monotonic() - (self._t0 or time.monotonic())

    def next_prompt(self) -> list[int] | None:
        """The next prompt's token ids, or None when the episode is over. Checks, in order: the
        wall-time limit (-> timeout), the step limit, the context guard (the prompt plus
        max_new_tokens must fit in context_limit), the total token budget (input + output
        tokens so far plus this prompt must stay within max_total_tokens; 0 = none)."""
        if self.done:
            return None
        if self._prompt is not None:
            return self._prompt
        c = self.cfg
        full = render(self.tok, self.messages, self.tools, add_generation_prompt=True)
        if not full.startswith(self._rendered):
            self.prefix_ok = False
        self._gen_prompt = full[len(self._rendered):] if full.startswith(self._rendered) else \
            "<|im_start|>assistant\n"
        prompt = self.tokens + self._encode(self._gen_prompt)
        if self._elapsed() > float(c.wall_time_s):
            self.exit_status = "wall_time"
        elif self.steps >= int(c.max_steps):
            self.exit_status = "step_limit"
        elif len(prompt) + int(c.max_new_tokens) > self.context_limit:
            self.exit_status = "context_exceeded"
        elif c.max_total_tokens and \
                self.input_tokens + self.output_tokens + len(prompt) > int(c.max_total_tokens):
            self.exit_status = "token_limit"
        if self.done:
            return None
        self._prompt = prompt
        return prompt

    def turn_seed(self) -> int:
        """The seed of this episode's next turn when it is generated on its own."""
        return derive_seed(self.seed, "episode", self.task["instance_id"], "turn", self.steps)

    def generate(self, engine: Engine) -> Generation:
        """Generate this episode's next turn alone (seeded by `turn_seed`)."""
        prompt = self.next_prompt()
        if prompt is None:
            raise RuntimeError("the episode is over")
        c = self.cfg
        t0 = time.monotonic()
        gen = engine.generate([prompt], int(c.max_new_tokens), float(c.temperature),
                              float(c.top_p), seed=self.turn_seed())[0]
        self.timing["generate_s"] += time.monotonic() - t0
        return gen

    # -- one turn -------------------------------------------------------------------------

    def _run_call(self, call) -> dict:
        c = self.cfg
        if self.session is None:
            self.session = self.sandbox.session(self.env, [self.task["patch"]])
        timeout = float(c.command_timeout_s)
        if call.name == "bash":
            command = call.arguments["command"]
            res = self.session.exec(command, timeout, cpu_time=True)
            body = normalize_pytest(res.output) if c.normalize_pytest else res.output
            head = f"exit code: {res.exit_code}" + (f" (timed out after {timeout:g} s)" if res.timed_out else "")
            text = truncate(f"{head}\n{body}" if body else head, int(c.max_tool_output_chars))
            f2p = f2p_passing(command, res.output, self.task["FAIL_TO_PASS"])
            return {"name": "bash", "exit_code": res.exit_code, "timed_out": res.timed_out,
                    "ok": res.exit_code == 0 and not res.timed_out, "output": text,
                    "chars": len(res.output), "error": looks_like_error(res.output), "f2p_passing": f2p}
        if call.name == "edit":
            a = call.arguments
            res = self.session.exec(edit_command(a["path"], a["old"], a["new"], a.get("line")), timeout,
                                    cpu_time=True)
            out = res.output.strip()
            ok = res.exit_code == 0 and not res.timed_out
            if not out:
                out = f"edit failed (exit code {res.exit_code})" if not ok else f"edited {a['path']}"
            return {"name": "edit", "exit_code": res.exit_code, "timed_out": res.timed_out, "ok": ok,
                    "output": truncate(out, int(c.max_tool_output_chars)), "chars": len(res.output),
                    "error": not ok or looks_like_error(out), "f2p_passing": None}
        raise AssertionError(call.name)

    def advance(self, gen: Generation) -> None:
        """Record one generated turn, run its tool calls (in order; a submit ends the episode
        and later calls are not run), append the results, update the token alignment."""
        if self._prompt is None:
            raise RuntimeError("advance() without a pending prompt (call next_prompt() first)")
        prompt, self._prompt = self._prompt, None
        gp_ids = prompt[len(self.tokens):]
        self._append(gp_ids, generated=False)
        start = len(self.tokens)
        self._append(gen.token_ids, generated=True, logprobs=gen.logprobs)
        if len(gen.logprobs) != len(gen.token_ids):
            raise ValueError(f"engine returned {len(gen.logprobs)} logprobs for {len(gen.token_ids)} tokens")
        self.steps += 1
        self.input_tokens += len(prompt)
        self.output_tokens += len(gen.token_ids)
        content = gen.text
        self.messages.append(assistant_message(content))

        t0 = time.monotonic()
        calls = parse_tool_calls(content, self.tools)
        results: list[dict] = []
        submitted = False
        for call in calls:
            if not call.ok:
                msg = call.error_message()
                results.append({"name": call.name, "ok": False, "output": msg, "error": True,
                                "exit_code": None, "timed_out": False, "chars": len(msg), "f2p_passing": None})
                self.messages.append(tool_message(msg))
                continue
            if call.name == "submit":
                submitted = True
                results.append({"name": "submit", "ok": True, "output": "", "error": False,
                                "exit_code": None, "timed_out": False, "chars": 0, "f2p_passing": None})
                break
            res = self._run_call(call)
            results.append(res)
            self.messages.append(tool_message(res["output"]))
        if not calls:
            self.messages.append({"role": "user", "content": NO_CALL_MESSAGE})
        self.timing["tools_s"] += time.monotonic() - t0

        labels = self._labels(calls, results)
        well_formed = labels["well_formed_call"]
        self.invalid_run = 0 if well_formed else self.invalid_run + 1
        self.malformed += not well_formed
        self.turns.append({
            "step": self.steps - 1,
            "prompt_tokens": len(prompt),
            "span": [start, start + len(gen.token_ids)],
            "token_ids": [int(i) for i in gen.token_ids],
            "logprobs": [float(x) for x in gen.logprobs],
            "finish_reason": gen.finish_reason,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "error": c.error, "detail": c.detail}
                           for c in calls],
            "tool_results": results,
            "labels": labels,
            "process_reward": process_reward(labels, self.cfg.reward.process_weights),
        })
        if submitted:
            self.exit_status = "submitted"
        elif self.invalid_run >= int(self.cfg.max_invalid_calls) or (
                0 < int(self.cfg.max_malformed_turns) <= self.malformed):
            self.exit_status = "invalid_calls"

        # the non-generated text up to the end of this turn's tool results
        expected = self._rendered + self._gen_prompt + content
        rendered = render(self.tok, self.messages, self.tools, add_generation_prompt=False)
        if not rendered.startswith(expected):
            self.prefix_ok = False
        tail = rendered[len(expected):]
        if gen.token_ids and gen.token_ids[-1] == self.im_end_id and tail.startswith(IM_END):
            tail = tail[len(IM_END):]
        self._append(self._encode(tail), generated=False)
        self._rendered = rendered

    def _labels(self, calls, results) -> dict[str, bool | None]:
        well_formed = bool(calls) and all(c.ok for c in calls)
        ran = [r for r in results if r["exit_code"] is not None or r["name"] == "submit"]
        executed = [r for r in ran if r["name"] != "submit"]
        counts = [r["f2p_passing"] for r in results if r.get("f2p_passing") is not None]
        improved: bool | None = None
        if counts:  # True: more FAIL_TO_PASS tests pass than ever before; False: fewer than last run
            if counts[-1] > self.f2p_best:
                improved = True
            elif counts[-1] < self.f2p_last:
                improved = False
            self.f2p_best = max(self.f2p_best, counts[-1])
            self.f2p_last = counts[-1]
        return {
            "well_formed_call": well_formed,
            "command_ran": bool(ran) and all(r["ok"] for r in ran),
            "no_error": None if not executed else not any(r["error"] for r in executed),
            "tests_improved": improved,
        }

    # -- the end --------------------------------------------------------------------------

    def close(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            finally:
                self.session = None

    def alignment(self) -> dict[str, Any]:
        """Compare `tokens` with the chat template's rendering of the recorded messages."""
        rendered = render(self.tok, self.messages, self.tools, add_generation_prompt=False)
        ref = self._encode(rendered)
        ids_match = ref == self.tokens
        text_match = self.tok.decode(self.tokens, skip_special_tokens=False) == rendered
        first = next((i for i, (a, b) in enumerate(zip(ref, self.tokens)) if a != b),
                     None if ids_match else min(len(ref), len(self.tokens)))
        drift = []
        for t in self.turns:
            ids = t["token_ids"][:-1] if t["token_ids"] and t["token_ids"][-1] == self.im_end_id \
                else t["token_ids"]
            if self._encode(self.messages_text(t["step"])) != ids:
                drift.append(t["step"])
        # turns that ended on another stop token (e.g. <|endoftext|>): the template closes every
        # assistant turn with <|im_end|>, so such a turn can never match it
        foreign_eos = [t["step"] for t in self.turns if t["finish_reason"] == "stop" and t["token_ids"]
                       and t["token_ids"][-1] != self.im_end_id
                       and t["token_ids"][-1] in self.tok.all_special_ids]
        lengths_ok = len(self.tokens) == len(self.mask) == len(self.logprobs)
        if self.cfg.alignment == "ids":
            valid = ids_match and lengths_ok
        else:
            valid = text_match and self.prefix_ok and lengths_ok
        return {"valid": valid, "check": self.cfg.alignment, "ids_match": ids_match,
                "text_match": text_match, "template_prefix_ok": self.prefix_ok,
                "first_mismatch": first, "drift_turns": drift, "foreign_eos_turns": foreign_eos,
                "lengths_ok": lengths_ok}

    def messages_text(self, step: int) -> str:
        """The content of the assistant message of turn `step`."""
        assistant = [m for m in self.messages if m["role"] == "assistant"]
        return assistant[step]["content"]

    def outcome(self, verdict: Mapping[str, Any]) -> str:
        """resolved | failed | timeout | context_exceeded | invalid | step_limit (see docs)."""
        resolved = bool(verdict.get("resolved"))
        status = self.exit_status
        if status == "submitted":
            return "resolved" if resolved else "failed"
        if resolved and self.cfg.credit_unsubmitted:
            return "resolved"
        return {"wall_time": "timeout", "context_exceeded": "context_exceeded",
                "invalid_calls": "invalid", "step_limit": "step_limit",
                "token_limit": "step_limit"}[status]

    def finish(self) -> dict:
        """Take the diff, close the session, verify in a fresh environment, build the record."""
        if self.record is not None:
            return self.record
        if not self.done:
            raise RuntimeError("finish() before the episode ended")
        diff_error = None
        try:
            submission = self.session.diff() if self.session is not None else ""
        except (SandboxError, subprocess.CalledProcessError, OSError) as exc:
            # e.g. the agent removed .git: its answer cannot be read, so it is an empty one
            submission, diff_error = "", f"{type(exc).__name__}: {str(exc)[:500]}"
            log.warning("%s seed %d: no diff (%s)", self.task["instance_id"], self.seed, diff_error)
        finally:
            self.close()
        t0 = time.monotonic()
        verdict = verify(self.sandbox, self.env, self.task["patch"], submission,
                         self.task["FAIL_TO_PASS"], self.task["PASS_TO_PASS"], self.test_timeout_s,
                         self.verdicts)
        self.timing["verify_s"] = time.monotonic() - t0
        verdict = dict(verdict)
        self.timing["verify_tests_s"] = float(verdict.pop("duration_s", 0.0) or 0.0)  # timings apart
        self.timing["verify_cached"] = bool(verdict.pop("cached", False))  # and whose run it was
        self.timing["wall_s"] = self._elapsed()
        outcome = self.outcome(verdict)
        align = self.alignment()
        labels_ok = all(isinstance(t["labels"]["well_formed_call"], bool)
                        and isinstance(t["labels"]["command_ran"], bool) for t in self.turns)
        last_gen = max((t["span"][1] for t in self.turns), default=0)
        trajectory_ok = bool(self.turns) and last_gen <= self.context_limit and align["lengths_ok"]
        validity = {"outcome": outcome in ("resolved", "failed", "timeout", "context_exceeded",
                                           "invalid", "step_limit") and "resolved" in verdict,
                    "labels": labels_ok, "trajectory": trajectory_ok, "alignment": align["valid"]}
        self.record = {
            "record_version": RECORD_VERSION,
            "instance_id": self.task["instance_id"],
            "repo": self.task["repo"],
            "seed": self.seed,
            "policy": self.policy,
            "source": self.source,
            "env_commit": self.env.commit,
            "tools": self.tools,
            "config_digest": config_digest(self.cfg),
            "messages": self.messages,
            "turns": self.turns,
            "tokens": self.tokens,
            "action_mask": self.mask,
            "logprobs": self.logprobs,
            "alignment": align,
            "alignment_valid": align["valid"],
            "exit_status": self.exit_status,
            "outcome": outcome,
            "submission": submission,
            "diff_error": diff_error,
            "verdict": verdict,
            "stats": {"steps": self.steps, "input_tokens": self.input_tokens,
                      "output_tokens": self.output_tokens, "sequence_tokens": len(self.tokens),
                      "generated_tokens": sum(self.mask), "tool_calls": sum(len(t["tool_calls"]) for t in self.turns),
                      "malformed_turns": sum(not t["labels"]["well_formed_call"] for t in self.turns),
                      "process_return": round(sum(t["process_reward"] for t in self.turns), 10)},
            "validity": validity,
            "ppo_valid": all(validity.values()),
            "timing": {k: round(v, 4) for k, v in self.timing.items()},
        }
        return self.record


def run_episode(task: Mapping[str, Any], seed: int, engine: Engine, sandbox: Sandbox,
                cfg: AgentConfig, *, env: TaskEnv | None = None,
                repos_root: str | Path | None = None, tokenizer=None, policy: str = "policy",
                source: str = "policy", test_timeout_s: float = 120.0) -> dict:
    """Run one episode to its end and return its record. Each turn is generated alone, seeded
    derive_seed(seed, "episode", instance_id, "turn", t): the same as a rollout with
    `rollout.seeding: episode`. `env` or `repos_root` locates the repository snapshot;
    `tokenizer` defaults to `engine.tokenizer`."""
    if env is None:
        if repos_root is None:
            raise ValueError("run_episode needs env= or repos_root=")
        env = task_env(task, repos_root)
    tok = tokenizer if tokenizer is not None else engine.tokenizer
    ep = Episode(task, seed, tok, sandbox, env, cfg, policy=policy, source=source,
                 test_timeout_s=test_timeout_s,
                 context_limit=effective_context_limit(engine, cfg.context_limit))
    try:
        ep.start()
        while ep.next_prompt() is not None:
            ep.advance(ep.generate(engine))
        return ep.finish()
    finally:
        ep.close()


def effective_context_limit(engine: Engine, context_limit: int) -> int:
    """context_limit, lowered to the model's max_position_embeddings when the engine knows it."""
    model = getattr(engine, "model", None)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return min(int(context_limit), int(limit)) if isinstance(limit, int) else int(context_limit)
