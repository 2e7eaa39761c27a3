"""Seeds: every seed of the pipeline is derived from the config's root seed and names, one way.

`derive_seed(seed, *names)` hashes "<seed>:<name>:<name>..." with sha256, so a seed is the same
on every machine and Python (no hash randomization) and does not depend on what else ran
before it: adding a task, a sample or a stage never moves the seeds of the others.
"""
from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(seed: int, *names: Any, bits: int = 31) -> int:
    """A `bits`-bit seed from a base seed and names (a stage, a repository, a sample's index...):
    the low `bits` bits of the first ceil(bits/8) bytes (big-endian) of
    sha256(":".join(seed, *names)). 31 bits (the default) is a valid seed for every RNG used here
    (random, numpy, torch, vLLM)."""
    text = ":".join(map(str, (seed, *names)))
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[: (bits + 7) // 8], "big") & ((1 << bits) - 1)


def stage_seed(root_seed: int, stage: str) -> int:
    """A stage's own seed: derive_seed(the config's root seed, the stage's name)."""
    return derive_seed(root_seed, stage)
