"""Failure attribution (pure): how each episode ended, in the experiment's words, and where
successes came from.

An episode record (forgeline.agent.episode) says how it ended twice: `exit_status` (what
stopped the loop: submitted, step_limit, token_limit, wall_time, context_exceeded,
invalid_calls) and `outcome` (resolved, failed, step_limit, timeout, context_exceeded, invalid:
the verifier's word on a submitted diff, else the limit that stopped it). `outcome_class` maps
them, here and nowhere else, to OUTCOME_CLASSES:

| class | the record |
|---|---|
| solved | outcome resolved (the verifier passed the diff) |
| wrong_fix | outcome failed: submitted, graded, not resolved |
| invalid_call | outcome invalid: `max_invalid_calls` turns in a row without a well-formed call, or `max_malformed_turns` in all |
| step_limit | outcome step_limit: `max_steps`, or the token budget (exit status token_limit) |
| timeout | outcome timeout: the episode's wall-time limit |
| context_exceeded | outcome context_exceeded: the next prompt no longer fits the context |
| sandbox_error | a submitted, unresolved episode whose grade is not the tests' word on its diff: the diff could not be read (`diff_error`), the grading run timed out or left no verdict |

sandbox_error needs the episode record (`R.episodes.jsonl`); from a results line alone (outcome
and termination) such an episode reads as wrong_fix. An episode that stopped at a limit keeps
its limit's class whatever its grading did: it was never going to be resolved.

Then: per policy the distribution over the classes, per pair of policies the transitions
(how the reference failed where the other solved, and back), and from a training log the share
of its successes carried by its top task (the original PPO run: 16 of 32 in one task).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

OUTCOME_CLASSES = ("solved", "wrong_fix", "invalid_call", "step_limit", "timeout", "context_exceeded",
                   "sandbox_error")
FAILURE_CLASSES = OUTCOME_CLASSES[1:]
_BY_OUTCOME = {"resolved": "solved", "failed": "wrong_fix", "invalid": "invalid_call", "step_limit": "step_limit",
               "timeout": "timeout", "context_exceeded": "context_exceeded"}


def outcome_class(record: Mapping[str, Any]) -> str:
    """The class (OUTCOME_CLASSES) of one episode: an episode record, or a results line of
    `evaluate` (its `outcome`; `diff_error` and `verdict` only in the episode record)."""
    outcome = record.get("outcome")
    if outcome not in _BY_OUTCOME:
        raise ValueError(f"{record.get('instance_id')} seed {record.get('seed')}: outcome {outcome!r} is not one of "
                         f"{', '.join(_BY_OUTCOME)} (a record of forgeline.agent.episode?)")
    if outcome == "failed":
        verdict = record.get("verdict")
        ungraded = verdict is not None and ("resolved" not in verdict or bool(verdict.get("timed_out")))
        if record.get("diff_error") or ungraded:
            return "sandbox_error"
    return _BY_OUTCOME[outcome]


def class_counts(classes: Iterable[str]) -> dict[str, int]:
    """{class: episodes} over every class of OUTCOME_CLASSES (0 where none), in that order."""
    seen = Counter(classes)
    unknown = set(seen) - set(OUTCOME_CLASSES)
    if unknown:
        raise ValueError(f"unknown outcome class(es) {sorted(unknown)}; expected {', '.join(OUTCOME_CLASSES)}")
    return {c: seen.get(c, 0) for c in OUTCOME_CLASSES}


def transitions(reference: Mapping[Any, str], other: Mapping[Any, str]) -> dict[str, Any]:
    """How two policies' classes move over the same pairs ({pair key: class} each, same keys).

    Output: {"matrix": [{from, to, pairs}] (reference's class -> other's, nonzero, in class
    order), "wins_from": {failure class: pairs the reference failed that way and the other
    solved}, "losses_to": {failure class: pairs the reference solved and the other failed that
    way}}. Wins and losses here are McNemar's: their totals are its discordant pairs."""
    if set(reference) != set(other):
        raise ValueError("transitions: the two policies were not run on the same pairs")
    moves = Counter((reference[k], other[k]) for k in reference)
    matrix = [{"from": a, "to": b, "pairs": moves[(a, b)]} for a in OUTCOME_CLASSES for b in OUTCOME_CLASSES
              if moves[(a, b)]]
    return {"matrix": matrix,
            "wins_from": {c: moves[(c, "solved")] for c in FAILURE_CLASSES},
            "losses_to": {c: moves[("solved", c)] for c in FAILURE_CLASSES}}


def training_concentration(log_lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where a PPO / GRPO run's training successes came from, from its train_log.jsonl lines
    (`solved`: {instance_id: resolved episodes} per step, `episodes`, `success_rate`).

    Output: {steps, episodes, successes, tasks_solved, top_task, top_successes, top_share (of the
    successes; None without any), named (every step with a success names its tasks: a log written
    before `solved` was logged cannot say)}. Ties for the top task go to the first instance_id."""
    per_task: Counter = Counter()
    successes, named = 0, True
    for line in log_lines:
        solved = line.get("solved")
        step_successes = round((line.get("success_rate") or 0) * (line.get("episodes") or 0))
        if solved is None:
            named = named and step_successes == 0
            successes += step_successes
            continue
        per_task.update({t: int(n) for t, n in solved.items()})
        successes += sum(int(n) for n in solved.values())
    top = min(per_task.items(), key=lambda kv: (-kv[1], kv[0])) if per_task else (None, 0)
    return {"steps": len(log_lines), "episodes": sum(int(x.get("episodes") or 0) for x in log_lines),
            "successes": successes, "tasks_solved": len(per_task), "top_task": top[0], "top_successes": top[1],
            "top_share": top[1] / successes if successes and named else None, "named": named}


def concentration_sentence(name: str, c: Mapping[str, Any]) -> str:
    """"ppo training: 32 successes in 160 episodes over 5 tasks; the top task (t1) carries 16 (50%)"."""
    head = f"{name} training: {c['successes']} success{'es' * (c['successes'] != 1)} in {c['episodes']} episodes"
    if not c["named"]:
        return head + "; its log does not name the solved tasks (written before `solved` was logged)"
    if not c["successes"]:
        return head + "; no task solved"
    return (head + f" over {c['tasks_solved']} task{'s' * (c['tasks_solved'] != 1)}; the top task "
            f"({c['top_task']}) carries {c['top_successes']} ({c['top_share']:.0%})")
