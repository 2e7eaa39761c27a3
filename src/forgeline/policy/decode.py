"""Sampling a batch of continuations with a KV cache that outlives the call.

An agent's prompt at turn t+1 is its prompt at turn t, the tokens it generated and the tool's
answer. transformers' `generate` prefills the whole conversation again every turn, and its
per-token overhead doubled a step on the tiny policy (bench/hf_decode.py). Here each row
starts from the longest prefix of its prompt that an earlier call left in a `PrefixCache` (its
own previous turn, or a sibling episode of the same task that shares the system and user
turns), prefills only the rest, one row at a time, then all rows decode together from one
preallocated key/value buffer.

- `PrefixCache`: key/value states of recent token sequences, least recently used evicted past a
  byte budget, emptied when the model's weights change (`qwen3_step.weights_version`).
- `sample_next`: one token per row from softmax(logits / T), top-p nucleus, greedy at T = 0,
  and the log-probability it was drawn with (module docstring of `forgeline.policy.engine`);
  one uniform number per row, inverted through the row's cumulative distribution.
- `decode_batch`: the loop; returns each row's tokens and log-probs. Once half of the rows
  still in the batch have ended, the finished ones leave it, so a long sample does not make
  the short ones' slots compute padding to the end. A Qwen3 decodes through
  `forgeline.policy.qwen3_step` (the same arithmetic without transformers' module stack), any
  other model through its own forward.

Positions are each row's own (left padding never shifts RoPE), so a row's tokens match an
unpadded forward of the same sequence up to float rounding (tests/test_policy.py).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from forgeline.policy.qwen3_step import Qwen3Step

# per layer: (keys, values), each [1, kv_heads, tokens, head_dim]
KV = list[tuple[torch.Tensor, torch.Tensor]]


class PrefixCache:
    """Key/value states of token sequences, for prompts that extend them.

    `longest(ids)` finds the entry sharing the longest common prefix with `ids[:-1]` (the last
    prompt token is always fed, its logits start the sample); `store(ids, kv)` keeps a
    sequence's states and drops entries that are prefixes of it. Least recently used entries
    go first once the states exceed `max_bytes`.
    """

    def __init__(self, max_bytes: int = 512 * 2**20):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[torch.Tensor, KV]] = OrderedDict()
        self._next = 0
        self.version: tuple | None = None
        self.hits_tokens = 0
        self.prefilled_tokens = 0

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for _, kv in self._entries.values() for k, v in kv)

    def longest(self, ids: torch.Tensor) -> tuple[int, KV | None]:
        """(n, states of ids[:n]) for the largest n <= len(ids) - 1 an entry covers; (0, None)."""
        limit = len(ids) - 1
        best, best_key = 0, None
        for key, (tokens, _) in self._entries.items():
            n = min(len(tokens), limit)
            if n <= best:
                continue
            diff = (tokens[:n] != ids[:n]).nonzero()
            common = int(diff[0]) if len(diff) else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        kv = self._entries[best_key][1]
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in kv]

    def store(self, ids: torch.Tensor, kv: KV) -> None:
        n = len(ids)
        for key in [k for k, (tokens, _) in self._entries.items()
                    if len(tokens) <= n and torch.equal(tokens, ids[:len(tokens)])]:
            del self._entries[key]
        self._entries[self._next] = (ids.clone(), kv)
        self._next += 1
        total = self.nbytes()
        while total > self.max_bytes and len(self._entries) > 1:
            _, (_, old) = self._entries.popitem(last=False)
            total -= sum(k.nbytes + v.nbytes for k, v in old)


class _BufferLayer(DynamicLayer):
    """A cache layer over a preallocated [batch, kv_heads, capacity, head_dim] buffer: a decode
    step writes its one column in place instead of concatenating the whole past again."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        b, h, n, d = keys.shape
        self._k = keys.new_zeros(b, h, capacity, d)
        self._v = values.new_zeros(b, h, capacity, d)
        self._k[:, :, :n] = keys
        self._v[:, :, :n] = values
        self.n = n
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]
        self.device, self.dtype, self.is_initialized = keys.device, keys.dtype, True

    def update(self, key_states, value_states, *args, **kwargs):
        m = key_states.shape[-2]
        self._k[:, :, self.n:self.n + m] = key_states
        self._v[:, :, self.n:self.n + m] = value_states
        self.n += m
        self.keys, self.values = self._k[:, :, :self.n], self._v[:, :, :self.n]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` of the batch (the others finished)."""
        self._k, self._v = self._k.index_select(0, rows), self._v.index_select(0, rows)
        self.keys, self.values = self._k[:, :, :self.n], self._v[:, :, :self.n]


def _forward(model, ids: torch.Tensor, positions: torch.Tensor, cache: Cache,
             mask: torch.Tensor | None = None) -> torch.Tensor:
    """The last position's logits of `ids` (batch, new tokens) after `cache`, which grows."""
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1].float()


def prefill(model, ids: torch.Tensor, cache: PrefixCache | None) -> KV:
    """The states of ids[:-1] for one row: the cached prefix and a forward pass over the rest."""
    n, kv = cache.longest(ids) if cache is not None else (0, None)
    past = DynamicCache(ddp_cache_data=kv) if kv is not None else DynamicCache()
    rest = ids[n:-1]
    if len(rest):
        _forward(model, rest[None].to(model.device),
                 torch.arange(n, len(ids) - 1, device=model.device)[None], past)
    states = [(layer.keys, layer.values) for layer in past.layers if layer.is_initialized]
    if not states:  # a one-token prompt: an empty past of the model's shape
        cfg = model.config
        heads, dim = cfg.num_key_value_heads, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        empty = torch.zeros(1, heads, 0, dim, dtype=model.dtype, device=model.device)
        return [(empty, empty)] * cfg.num_hidden_layers
    if cache is not None:
        cache.hits_tokens += n
        cache.prefilled_tokens += len(rest)
        if len(rest):
            cache.store(ids[:-1], states)
    return states


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | Sequence[torch.Generator] | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(token [rows], logprob [rows]) from logits [rows, vocab]: greedy at temperature 0 (its
    logprob at temperature 1), else softmax(logits / T) restricted to the smallest set of
    top tokens holding `top_p` of the mass (at least one), renormalised. `generator`: one for
    all rows, or one per row (a row then draws as it would alone)."""
    if temperature == 0:
        token = logits.argmax(-1)
        return token, torch.log_softmax(logits, -1).gather(-1, token[:, None])[:, 0]
    scores = logits / temperature
    if top_p < 1.0:
        ordered, order = scores.sort(-1, descending=True)
        mass = ordered.softmax(-1).cumsum(-1)
        drop = mass - ordered.softmax(-1) >= top_p  # the mass before a token already suffices
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    logp = torch.log_softmax(scores, -1)
    if isinstance(generator, (list, tuple)):
        u = torch.cat([torch.rand(1, generator=g, device=logits.device) for g in generator])
    else:
        u = torch.rand(len(logits), generator=generator, device=logits.device)
    token = inverse_cdf(logp.exp(), u)
    return token, logp.gather(-1, token[:, None])[:, 0]


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose cumulative probability exceeds u x the row's total (u in
    [0, 1)): a draw from the row's distribution with one uniform number. torch.multinomial
    draws an exponential number per vocabulary entry instead: 1.7 ms of a 7-9 ms decode step
    of 8 rows on the tiny policy, against 0.3 ms. A zero-probability token is never chosen."""
    cdf = probs.cumsum(-1)
    token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    # u x total can round up to the total: the last token with probability left
    over = token >= probs.shape[-1]
    if bool(over.any()):
        token = torch.where(over, (probs > 0).long().cumsum(-1).argmax(-1), token)
    return token


@dataclass
class Sampled:
    """One row's continuation: the tokens (the ending eos or stop included) and their logprobs."""

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool


def decode_batch(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                 top_p: float, seed: int | Sequence[int], eos_token_ids: Sequence[int], pad_token_id: int,
                 cache: PrefixCache | None = None,
                 stops: Callable[[list[int]], bool] | None = None) -> list[Sampled]:
    """Sample up to `max_new_tokens` per prompt; a row ends at an eos token or when
    `stops(its tokens)` says so. `seed`: one int, one torch.Generator for the whole batch (a
    row's sample depends on the rows beside it, as in transformers' batched `generate`); or one
    seed per row, a generator each (a row draws as it would alone, up to the float rounding of
    batched arithmetic). With `cache`, each row's prefill starts from its longest cached prefix
    and each row's final states are stored for the next call."""
    device = model.device
    rows = [torch.tensor(list(p), dtype=torch.long) for p in prompts]
    states = [prefill(model, ids, cache) for ids in rows]
    b, width = len(rows), max(len(ids) - 1 for ids in rows)
    # one buffer per layer: row i's past right-aligned, then the columns decode will write
    layers = []
    for layer in range(len(states[0])):
        k0, v0 = states[0][layer]
        keys = k0.new_zeros(b, k0.shape[1], width, k0.shape[3])
        values = v0.new_zeros(b, v0.shape[1], width, v0.shape[3])
        for i, ids in enumerate(rows):
            k, v = states[i][layer]
            keys[i, :, width - k.shape[2]:] = k[0]
            values[i, :, width - v.shape[2]:] = v[0]
        layers.append(_BufferLayer(keys, values, width + max_new_tokens))
    buffer = Cache(layers=layers)
    mask = torch.zeros(b, width + max_new_tokens, dtype=torch.long, device=device)
    for i, ids in enumerate(rows):
        mask[i, width - (len(ids) - 1):width + 1] = 1
    positions = torch.tensor([len(ids) - 1 for ids in rows], device=device)[:, None]
    x = torch.stack([ids[-1] for ids in rows])[:, None].to(device)
    if isinstance(seed, int):
        generator = torch.Generator(device=device).manual_seed(seed % 2**63)
    else:
        generator = [torch.Generator(device=device).manual_seed(int(s) % 2**63) for s in seed]
    eos = torch.tensor(sorted(set(eos_token_ids)), device=device)
    tokens: list[list[int]] = [[] for _ in rows]
    logps: list[list[float]] = [[] for _ in rows]
    done = [False] * b
    stopped = [False] * b
    live = list(range(b))  # the rows still in the buffer, in buffer order

    def keep_states(at: list[int]) -> None:
        """Store rows `at` (buffer positions): each row's prompt and tokens but the last."""
        for j in at:
            i = live[j]
            n = len(rows[i]) - 1 + len(tokens[i])
            start = width - (len(rows[i]) - 1)
            kv = [(layer._k[j:j + 1, :, start:start + n].clone(), layer._v[j:j + 1, :, start:start + n].clone())
                  for layer in layers]
            cache.store(torch.cat([rows[i], torch.tensor(tokens[i][:-1], dtype=torch.long)]), kv)

    step = Qwen3Step.of(model)
    for t in range(max_new_tokens):
        if step is not None:
            logits = step(x[:, 0], positions[:, 0], layers, mask[:, :width + t + 1].bool())
        else:
            logits = _forward(model, x, positions, buffer, mask[:, :width + t + 1])
        token, logp = sample_next(logits, temperature, top_p,
                                  generator if isinstance(generator, torch.Generator) else [generator[i] for i in live])
        ended = torch.isin(token, eos).tolist()
        for j, (tok, lp) in enumerate(zip(token.tolist(), logp.tolist())):
            i = live[j]
            if done[i]:
                continue
            tokens[i].append(tok)
            logps[i].append(lp)
            if ended[j] or (stops is not None and stops(tokens[i])):
                done[i] = stopped[i] = True
        if all(done) or t == max_new_tokens - 1:
            break
        finished = [j for j, i in enumerate(live) if done[i]]
        if 2 * len(finished) >= len(live):  # half the batch idles: decode the others alone
            if cache is not None:
                keep_states(finished)
            keep = torch.tensor([j for j, i in enumerate(live) if not done[i]], device=device)
            for layer in layers:
                layer.select(keep)
            mask, positions, token = mask[keep], positions[keep], token[keep]
            live = [live[j] for j in keep.tolist()]
        x = torch.where(torch.tensor([done[i] for i in live], device=device), pad_token_id, token)[:, None]
        mask[:, width + t + 1] = 1
        positions = positions + 1
    if cache is not None:
        keep_states(list(range(len(live))))
    return [Sampled(tokens[i], logps[i], stopped[i]) for i in range(b)]
