"""One decode step of a Qwen3 causal LM, without transformers' module stack.

A decode step of the tiny policy is a few hundred small tensor ops on 8 rows; their arithmetic
is well under a millisecond, and transformers' per-module calls, mask building and config
lookups around them took most of the 6.6-8.9 ms a step cost (bench/hf_decode.py). `Qwen3Step`
reads the weights once per weights version (a PEFT LoRA's delta added in), fuses q/k/v and
gate/up into one matmul each, and runs the same arithmetic: RMSNorm, q/k norms, RoPE,
grouped-query attention over the decode buffer, SwiGLU, the tied head. Its logits equal the
model's own forward up to float rounding (tests/test_policy.py).

`Qwen3Step.of(model)` returns None for what it does not reproduce exactly (another
architecture, weights not float32, RoPE scaling, sliding-window layers, biases, an adapter
other than plain LoRA, a model in training mode); `decode_batch` then decodes through the
model's forward as before.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def weights_version(model) -> tuple:
    """Changes whenever a parameter is replaced or modified in place (an optimizer step,
    load_state_dict): the identity and torch's version counter of every parameter; and
    whenever a PEFT adapter is switched off or on, merged or swapped, which changes what a
    forward computes without touching a parameter (`disable_adapter()`)."""
    adapters = tuple((m.disable_adapters, m.merged, tuple(m.active_adapters))
                     for m in model.modules() if hasattr(m, "lora_A"))
    return tuple((id(p), p._version) for p in model.parameters()), adapters


class Unsupported(Exception):
    """The model has something `Qwen3Step` does not reproduce."""


def linear_weight(module) -> torch.Tensor:
    """The weight a bias-free Linear (or a PEFT LoRA layer around one) applies: W, or
    W + the active adapters' scaled B @ A when they are not merged into W."""
    if type(module) is torch.nn.Linear:
        if module.bias is not None:
            raise Unsupported("a linear layer with a bias")
        return module.weight
    base = getattr(module, "base_layer", None)
    if base is None or not hasattr(module, "lora_A") or type(base) is not torch.nn.Linear:
        raise Unsupported(f"a {type(module).__name__} layer")
    weight = linear_weight(base)
    if module.merged or module.disable_adapters:
        return weight
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if module.use_dora.get(name) or getattr(module, "lora_bias", {}).get(name):
            raise Unsupported("a DoRA adapter or a LoRA bias")
        weight = weight + module.get_delta_weight(name)
    return weight


@dataclass
class _Layer:
    ln1: torch.Tensor
    qkv: torch.Tensor     # [q; k; v] rows
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o: torch.Tensor
    ln2: torch.Tensor
    gate_up: torch.Tensor  # [gate; up] rows
    down: torch.Tensor


class Qwen3Step:
    """The logits [rows, vocab] of one new token per row, its keys and values appended to the
    decode buffer's layers (each with `update(keys, values) -> (all keys, all values)`)."""

    _cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def __init__(self, lm) -> None:
        cfg = lm.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.scale = self.head_dim ** -0.5
        decoder = lm.model
        rotary = decoder.rotary_emb
        if getattr(rotary, "rope_type", "default") != "default" or float(rotary.attention_scaling) != 1.0:
            raise Unsupported("RoPE scaling")
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            raise Unsupported("sliding-window layers")
        embed = lm.get_input_embeddings()
        if type(embed) is not torch.nn.Embedding:
            raise Unsupported(f"a {type(embed).__name__} embedding")
        # first, before any fused copy is made (a bf16 8B model has no business here)
        if any(p.dtype != torch.float32 for p in lm.parameters()):
            raise Unsupported("weights that are not float32")
        self.embed = embed.weight
        self.head = linear_weight(lm.get_output_embeddings())
        self.norm = decoder.norm.weight
        # the same products as transformers' rotary embedding, for every position at once
        positions = torch.arange(cfg.max_position_embeddings, device=self.embed.device).float()
        freqs = positions[:, None] * rotary.inv_freq.float()[None]
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = angles.cos().to(self.embed.dtype), angles.sin().to(self.embed.dtype)
        self.layers = []
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise Unsupported(f"activation {cfg.hidden_act}")
        for layer in decoder.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(_Layer(
                ln1=layer.input_layernorm.weight,
                qkv=torch.cat([linear_weight(a.q_proj), linear_weight(a.k_proj), linear_weight(a.v_proj)]),
                q_norm=a.q_norm.weight, k_norm=a.k_norm.weight, o=linear_weight(a.o_proj),
                ln2=layer.post_attention_layernorm.weight,
                gate_up=torch.cat([linear_weight(m.gate_proj), linear_weight(m.up_proj)]),
                down=linear_weight(m.down_proj)))

    @classmethod
    def of(cls, model) -> "Qwen3Step | None":
        """The step for `model` (a Qwen3ForCausalLM, or a PEFT model around one) at its current
        weights, built again after an optimizer step; None where it would not be exact."""
        from transformers import Qwen3ForCausalLM

        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        if type(lm) is not Qwen3ForCausalLM or model.training:
            return None
        version = weights_version(model)
        held = cls._cache.get(model)
        if held is not None and held[0] == version:
            return held[1]
        try:
            with torch.no_grad():
                step = cls(lm)
        except Unsupported:
            step = None
        cls._cache[model] = (version, step)
        return step

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, layers, allowed: torch.Tensor) -> torch.Tensor:
        """ids, positions: [rows]; allowed: [rows, past + 1] bool, the buffer columns each row
        attends to (left padding is False)."""
        rows, h, kv, d = ids.shape[0], self.heads, self.kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        blocked = ~allowed[:, None, None, :]
        for w, buffer in zip(self.layers, layers):
            q, k, v = F.linear(self._norm(x, w.ln1), w.qkv).split([h * d, kv * d, kv * d], dim=-1)
            q = self._rope(self._norm(q.view(rows, h, d), w.q_norm), cos, sin)
            k = self._rope(self._norm(k.view(rows, kv, d), w.k_norm), cos, sin)
            keys, values = buffer.update(k[:, :, None], v.view(rows, kv, 1, d))
            # grouped-query attention: each kv head serves heads // kv_heads query heads
            scores = torch.matmul(q.view(rows, kv, h // kv, d), keys.transpose(-1, -2)) * self.scale
            probs = scores.masked_fill(blocked, float("-inf")).softmax(dim=-1)
            x = x + F.linear(torch.matmul(probs, values).reshape(rows, h * d), w.o)
            gate, up = F.linear(self._norm(x, w.ln2), w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        return F.linear(self._norm(x, self.norm), self.head).float()
