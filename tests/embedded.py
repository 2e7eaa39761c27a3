"""The embedded run's config (params.yaml), loaded and typed as every stage gets it. A test
states only what it changes: `config.merged(PARAMS, {...})` for a whole config,
`config.merged(PARAMS.agent, {...})` for one section."""
from __future__ import annotations

from pathlib import Path

from forgeline import config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = config.load([ROOT / "params.yaml"])
