"""Where a PPO/GRPO run's checkpoint series lives (pure; the Snakefile and the report read it):
checkpoints/step-NNNNNN/ of the run's artifact. Which steps it holds: forgeline.params.checkpoint_steps."""
from __future__ import annotations

import re

TRAIN_LOG = "train_log.jsonl"  # a run's log, one line per step
SERIES = "checkpoints"
SERIES_INDEX = "checkpoints.json"
STEP_DIR = re.compile(r"^step-(\d{6})$")


def series_dir(step: int) -> str:
    return f"step-{step:06d}"

