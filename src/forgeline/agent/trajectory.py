"""Export episodes the way mini-swe-agent saves them: `<iid>/<iid>.traj.json` plus `preds.json`.

mini-swe-agent's trajectory (format `mini-swe-agent-1`) holds `messages` (system, user,
assistant; tool results are user turns), `info.exit_status`, `info.submission` (the diff) and
`info.model_stats` (`instance_cost`, `api_calls`). Ours adds the token counts, steps, outcome
and verdict under `info`, and keeps each tool result's text as the chat template wraps it
(`<tool_response>...</tool_response>`), so the file reads like what the model saw.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.provenance import write_json

TRAJECTORY_FORMAT = "mini-swe-agent-1"


def to_messages(episode: Mapping[str, Any]) -> list[dict]:
    """The episode's messages with mini-swe-agent's roles: a `tool` message becomes a `user`
    message whose content is wrapped in <tool_response> tags."""
    out = []
    for m in episode["messages"]:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def to_trajectory(episode: Mapping[str, Any]) -> dict:
    """One episode as a mini-swe-agent trajectory dict."""
    stats = episode.get("stats") or {}
    verdict = episode.get("verdict") or {}
    return {
        "trajectory_format": TRAJECTORY_FORMAT,
        "instance_id": episode["instance_id"],
        "messages": to_messages(episode),
        "info": {
            "exit_status": episode["exit_status"],
            "submission": episode.get("submission", ""),
            "model_stats": {
                "instance_cost": 0.0,
                "api_calls": int(stats.get("steps", 0)),
                "input_tokens": int(stats.get("input_tokens", 0)),
                "output_tokens": int(stats.get("output_tokens", 0)),
                "steps": int(stats.get("steps", 0)),
            },
            "outcome": episode["outcome"],
            "resolved": bool(verdict.get("resolved")),
            "verdict": {k: verdict.get(k) for k in ("fail_to_pass", "pass_to_pass", "failing", "stripped")},
            "policy": episode.get("policy"),
            "source": episode.get("source"),
            "seed": episode.get("seed"),
        },
    }


def write_trajectory(episode: Mapping[str, Any], root: str | Path) -> Path:
    """Write `root/<iid>/<iid>.traj.json` (atomically); returns its path."""
    iid = episode["instance_id"]
    return write_json(Path(root) / iid / f"{iid}.traj.json", to_trajectory(episode))


def predictions(episodes: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    """SWE-bench predictions: {iid: {instance_id, model_name_or_path, model_patch}}."""
    return {ep["instance_id"]: {"instance_id": ep["instance_id"],
                                "model_name_or_path": ep.get("policy") or "policy",
                                "model_patch": ep.get("submission", "")}
            for ep in sorted(episodes, key=lambda e: e["instance_id"])}


def export_trajectories(episodes: Sequence[Mapping[str, Any]], root: str | Path) -> list[Path]:
    """Write every episode's trajectory and a `preds.json` per seed. With one seed everything
    goes directly under `root` (mini-swe-agent's layout); with several, under `root/seed-<s>/`."""
    root = Path(root)
    seeds = sorted({ep.get("seed", 0) for ep in episodes})
    paths = []
    for seed in seeds:
        group = [ep for ep in episodes if ep.get("seed", 0) == seed]
        where = root if len(seeds) == 1 else root / f"seed-{seed}"
        paths.extend(write_trajectory(ep, where) for ep in sorted(group, key=lambda e: e["instance_id"]))
        paths.append(write_json(where / "preds.json", predictions(group)))
    return paths
