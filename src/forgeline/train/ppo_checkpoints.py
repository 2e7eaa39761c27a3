"""What outlives a PPO run's process: resume state and the adapter it exports.

- Checkpoints: `<checkpoints>/<fingerprint>/step-NNNNNN/state.pt` (the trainer's tensors and
  optimizer states, every RNG state, the train log so far), written atomically, the newest
  `keep` kept; `run_fingerprint` is what a checkpoint must agree on to be resumed.
- The adapter: PEFT's files with sorted target modules and a base model PEFT's Auto classes
  find from any directory (`base_reference`), and `checkpoint-summary.json` of the folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.config import as_dict
from forgeline.params import AgentConfig, BasePolicyConfig, PPOConfig
from forgeline.provenance import MANIFEST_NAME, atomic_dir, canonical_json, sha256_file

SUMMARY = "checkpoint-summary.json"

_STEP_DIR = re.compile(r"^step-(\d{6})$")


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint folder (step-NNNNNN with a state.pt), or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in root.iterdir()
                   if (m := _STEP_DIR.match(p.name)) and (p / "state.pt").is_file())
    return found[-1][1] if found else None


def rng_state() -> dict:
    import torch
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
        state["numpy"] = np.random.get_state()
    except ImportError:  # numpy is optional here
        pass
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import torch
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np
        np.random.set_state(state["numpy"])


def save_checkpoint(root: Path, step: int, trainer, rows: Sequence[Mapping[str, Any]],
                    fingerprint: str, keep: int) -> Path:
    """Write root/step-NNNNNN/state.pt atomically (`trainer`: a PPOTrainer, its
    state_dict()); keep the newest `keep` (0 = all)."""
    import shutil

    import torch

    path = root / f"step-{step:06d}"
    with atomic_dir(path, owned=("state.pt",)) as tmp:
        torch.save({"step": step, "fingerprint": fingerprint, "trainer": trainer.state_dict(),
                    "rng": rng_state(), "log": list(rows)}, tmp / "state.pt")
    if keep > 0:
        old = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name))[:-keep]
        for p in old:
            shutil.rmtree(p)
    return path


def run_fingerprint(c: PPOConfig, agent: AgentConfig, task_ids: Sequence[str],
                    inputs: Mapping[str, str]) -> str:
    """What a checkpoint must agree on to be resumed: the config (except steps and the
    checkpoint schedule), the agent config, the task pool and the input digests."""
    free = ("steps", "checkpoint_every", "keep_checkpoints", "threads")
    text = canonical_json({"ppo": {k: v for k, v in as_dict(c).items() if k not in free}, "agent": as_dict(agent),
                           "tasks": sorted(task_ids), "inputs": inputs})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def folder_digest(path: str | Path) -> str:
    """sha256 over the weight/config files of a model folder (what a resumed run must match)."""
    path = Path(path)
    parts = [f"{p.name}:{sha256_file(p)}" for p in sorted(path.iterdir())
             if p.is_file() and p.suffix in (".json", ".safetensors")
             and p.name not in (MANIFEST_NAME, "metrics.json", "loss_curve.json")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def checkpoint_summary(folder: Path, step: int) -> dict[str, Any]:
    """{step, tensors, tensor_bytes, files: {name: {bytes, sha256}}} of an adapter folder."""
    from safetensors import safe_open

    weights = folder / "adapter_model.safetensors"
    tensors = nbytes = 0
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            t = f.get_tensor(key)
            tensors += 1
            nbytes += t.numel() * t.element_size()
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name not in (SUMMARY, MANIFEST_NAME)}
    return {"step": step, "tensors": tensors, "tensor_bytes": nbytes,
            "bytes": sum(f["bytes"] for f in files.values()), "files": files}


def base_reference(policy: str | Path, base: BasePolicyConfig) -> dict[str, Any]:
    """What the adapter's config names as its base, so that PEFT's Auto classes
    (`AutoPeftModelForCausalLM.from_pretrained(adapter)`) find it from any working directory.

    PEFT hands `base_model_name_or_path` to transformers, which resolves a path against the
    CURRENT directory (not the adapter's folder) and takes anything else for a hub id. So a hub
    base (`policy.base.source: hub`) is named by its repository id at its pinned commit
    (`revision`, which PEFT passes on): the same bytes in every checkout. A local base (the tiny
    policy) is named by its absolute path in the checkout the stage ran in; elsewhere (a `dvc
    pull` into another folder) give the base explicitly (docs/ppo.md, "Loading the adapter").
    """
    if base.source == "hub" and base.hub.repo_id:
        return {"base_model_name_or_path": base.hub.repo_id, "revision": base.hub.revision}
    return {"base_model_name_or_path": os.path.abspath(policy), "revision": None}


def save_adapter(actor, folder: str | Path, base: Mapping[str, Any] | None = None) -> None:
    """The adapter in PEFT's format; target_modules sorted (PEFT writes a set: its order would
    change with the interpreter's hash seed, and with it the file's bytes); `base` (see
    `base_reference`) replaces the base model PEFT recorded (the path the stage was given)."""
    folder = Path(folder)
    actor.save_pretrained(folder)
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config.update(base or {})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")



def resume(root: Path, fingerprint: str, trainer) -> tuple[list[dict], int, Path | None]:
    """Restore `trainer` (a PPOTrainer) and every RNG from the newest checkpoint under `root`:
    (the train log so far, the step it ends with, the checkpoint folder), or ([], 0, None) where
    there is none. A checkpoint of another fingerprint stops the run."""
    import torch

    latest = latest_checkpoint(root)
    if latest is None:
        return [], 0, None
    state = torch.load(latest / "state.pt", map_location="cpu", weights_only=False)
    if state["fingerprint"] != fingerprint:
        raise SystemExit(f"{latest}: made with another config, pool or inputs (fingerprint "
                         f"{state['fingerprint']} != {fingerprint}); delete {root} to start over")
    trainer.load_state_dict(state["trainer"])
    set_rng_state(state["rng"])
    return list(state["log"]), int(state["step"]), latest
