"""The tiny base policy: a Qwen3ForCausalLM of a few million parameters, initialised from a seed.

It has Qwen3-8B's architecture (grouped-query attention with q/k norms, SwiGLU MLP, RoPE,
RMSNorm), so the LoRA target modules of the real experiment exist in it under the same names
and the same training code runs on both. Like the small Qwen3s (0.6B-4B) it ties the input
embedding and the output head.
"""
from __future__ import annotations

from typing import Any

# The LoRA targets of the original experiment (rank 32, alpha 16, 7 modules per layer).
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_qwen3_config(vocab_size: int, hidden_size: int = 256, layers: int = 4, heads: int = 4,
                      kv_heads: int = 2, intermediate: int | None = None, head_dim: int | None = None,
                      max_position_embeddings: int = 4096, rope_theta: float = 1_000_000.0,
                      tie_word_embeddings: bool = True, bos_token_id: int | None = None,
                      eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None):
    """A Qwen3Config for a tiny model.

    Inputs: vocabulary size (= len(tokenizer)); width, depth, attention heads and key/value
    heads (heads must be a multiple of kv_heads); MLP width (default 3 x hidden, Qwen3-8B's
    ratio is 3.0); head_dim (default hidden // heads; Qwen3-8B uses 128); context length in
    tokens; RoPE base (Qwen3's 1e6); token ids of bos/eos/pad. Float32 weights.
    """
    from transformers import Qwen3Config

    if heads % kv_heads:
        raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    head_dim = head_dim or hidden_size // heads
    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate or 3 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(rope_theta)},
        tie_word_embeddings=tie_word_embeddings, hidden_act="silu", rms_norm_eps=1e-6,
        attention_bias=False, attention_dropout=0.0, use_cache=True, initializer_range=0.02,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
        dtype="float32")


def init_tiny_qwen3(config, seed: int, embedding_std: float | None = None):
    """A freshly initialised Qwen3ForCausalLM, in eval mode; the same config and seed give the
    same weights (and the same model.safetensors bytes). The global torch RNG is left as it was.

    `embedding_std` re-draws the (tied) token embeddings with that standard deviation instead
    of `initializer_range` (0.02). Why: with tied weights a token copied from the context scores
    about sqrt(hidden) x std x |embedding| above the rest; at 0.02 that margin is too small for
    copying to pay off among thousands of ids, and the model never learns to copy (measured:
    no induction in 1,200 steps at 5,120 ids with 0.02 or 0.1; formed by ~900 with 0.3).
    """
    import torch
    from transformers import Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
        if embedding_std is not None:
            with torch.no_grad():
                model.get_input_embeddings().weight.normal_(0.0, float(embedding_std))
    return model.to(torch.float32).eval()


def parameter_count(model) -> dict[str, int]:
    """Parameter counts: `total` (tied weights counted once), `embedding`, `non_embedding`,
    `lora_targets` (weights of the 7 LoRA target modules)."""
    seen: dict[int, int] = {}
    for p in model.parameters():  # parameters() yields a tied tensor once
        seen[id(p)] = p.numel()
    total = sum(seen.values())
    embedding = model.get_input_embeddings().weight.numel()
    targets = sum(m.weight.numel() for name, m in model.named_modules()
                  if name.rpartition(".")[2] in LORA_TARGET_MODULES)
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding,
            "lora_targets": targets}


def lora_target_names(model) -> list[str]:
    """Full names of the modules a LoRA with LORA_TARGET_MODULES would wrap (sorted)."""
    return sorted(name for name, _ in model.named_modules()
                  if name.rpartition(".")[2] in LORA_TARGET_MODULES)


def describe(config) -> dict[str, Any]:
    """The architecture fields worth recording in a manifest."""
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "tie_word_embeddings")
    return {k: getattr(config, k) for k in keys}


def autocast(dtype: str | None, device: str = "cpu"):
    """A context in which matmuls and attention run in `dtype` (a torch.autocast; weights,
    their gradients and the optimizer stay float32), or nothing when `dtype` is None. SFT uses
    it (`train.sft.autocast`): its steps took 0.76-0.81x the float32 time on this CPU
    (AVX512-BF16; bench/bf16_steps.py). Copy pre-training does not: under bfloat16 its match
    phase ended at 64% copied instead of 82% (attention that must tell apart many similar keys)."""
    import contextlib

    import torch

    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=getattr(torch, dtype))
