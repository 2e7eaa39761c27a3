"""Tiny tokenizers and Qwen3 models shared by the tests, and the fixtures that several test modules
use by name (import them into the module: `from tiny_models import direct_python, tok`).

The defaults are the sizes most tests use: a byte-level BPE of 512 tokens trained on
data/repos/tinycsv and a Qwen3 of hidden 32, 2 layers, 4 heads (2 kv), MLP 64, seed 11.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable

import pytest

from forgeline.policy import model as tiny, tokenizer as tk

ROOT = Path(__file__).resolve().parents[1]
CORPUS_REPO = ROOT / "data" / "repos" / "tinycsv"


def tiny_tokenizer(repos: Iterable[Path] = (CORPUS_REPO,), vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on the repositories `repos` (no stdlib sample)."""
    return tk.build_tokenizer(tk.collect_corpus(list(repos), None), vocab_size=vocab_size)


def tiny_lm(tok, seed: int = 11, hidden_size: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
            intermediate: int = 64, max_position_embeddings: int = 2048):
    """A randomly initialised tiny Qwen3ForCausalLM for `tok` (its vocabulary, eos and pad ids)."""
    config = tiny.tiny_qwen3_config(len(tok), hidden_size=hidden_size, layers=layers, heads=heads,
                                    kv_heads=kv_heads, intermediate=intermediate,
                                    max_position_embeddings=max_position_embeddings,
                                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return tiny.init_tiny_qwen3(config, seed=seed)


@pytest.fixture(scope="module", autouse=True)
def direct_python():
    """`python3` in the sandbox = this interpreter (skips a slow pyenv shim; has pytest)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def tok():
    """The default tiny tokenizer (512 tokens, trained on data/repos/tinycsv)."""
    return tiny_tokenizer()
