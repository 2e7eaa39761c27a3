"""Generation engines: one interface, two implementations.

    engine.generate(prompts, max_new_tokens, temperature, top_p, seed, stop) -> [Generation]

- `HFEngine`: a transformers model in this process (`forgeline.policy.decode`: batched,
  seeded, a prefix cache across calls). The tiny policy's engine, and the reference the other
  one is checked against.
- `OpenAIEngine`: an OpenAI-compatible HTTP server's /v1/completions (vLLM serving the real
  8B policy, or the tiny one). Standard library only (urllib).

`open_engine` picks one for a stage from `--engine`/`--base-url` or the config's `serving`
section; with `vllm` it starts the server (forgeline.policy.serve) for the stage's run.
`open_adapter_server` does the same for a trainer whose LoRA adapter changes every step, and
`GenerationClock` measures how long an engine was generating.

The contract both keep:
- prompts are token-id lists (what the agent loop holds) or strings (tokenized without extra
  special tokens);
- `token_ids` are the sampled tokens, including the one that ended the generation (an eos
  such as <|im_end|>, or the last token of a stop string), never padding;
- `logprobs[i]` is the log-probability of `token_ids[i]` under the distribution it was sampled
  from: softmax(logits / temperature), restricted and renormalised to the top-p nucleus when
  top_p < 1. With top_p = 1 this is exactly what the trainer recomputes from the same weights,
  so PPO runs with top_p = 1. temperature = 0 means greedy; its logprobs are at temperature 1;
- `text` is the decoded `token_ids` without a final eos token, stop strings included, special
  markup such as <tool_call> kept;
- `finish_reason` is "stop" (eos or stop string) or "length" (max_new_tokens reached);
- the same prompts, parameters and seed give the same tokens (for `HFEngine` on the same
  machine and batch size; a vLLM server is seeded per request);
- `seeds` (one per prompt) instead of `seed`: prompt i is sampled as `generate([prompts[i]],
  seed=seeds[i])` would sample it, so a batch of episodes can be generated at once while each
  stays a function of its own seed (up to the float rounding of batched arithmetic).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgeline.params import ServingConfig
from forgeline.seeds import derive_seed

log = logging.getLogger(__name__)

Prompts = Sequence[Sequence[int]] | Sequence[str]
# One generation at a time per process: threads of a rollout (seeding: episode) or an HTTP
# server share the model and its prefix cache.
_MODEL_LOCK = threading.Lock()


@dataclass(frozen=True)
class Generation:
    """One sampled continuation; see the module docstring for the meaning of each field."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    prompt_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class EngineError(RuntimeError):
    """Generation failed (a server error, a malformed response, a bad request)."""


def _check_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: expected >= 1")
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature={temperature}: expected a finite number >= 0")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p}: expected 0 < top_p <= 1")


class Engine:
    """What the agent loop and the evaluator call; see the module docstring for the contract."""

    def generate(self, prompts: Prompts, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0, stop: Sequence[str] = (),
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        raise NotImplementedError


def _check_seeds(prompts: Prompts, seeds: Sequence[int] | None) -> None:
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts: give one per prompt")


# -- transformers ---------------------------------------------------------------------------

def _first_stop(tokenizer, ids: list[int], stop: Sequence[str]) -> int | None:
    """The smallest k such that decode(ids[:k]) contains a stop string, or None."""
    if not stop or not any(s in tokenizer.decode(ids, skip_special_tokens=False) for s in stop):
        return None
    lo, hi = 1, len(ids)  # containment is monotone in the prefix length: binary search
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(ids[:mid], skip_special_tokens=False) for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return lo


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op thread count set to `n` (None: left alone) inside, then restored."""
    import torch

    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class HFEngine(Engine):
    """A causal LM in this process, sampled by `forgeline.policy.decode`.

    `eos_token_ids`: the tokens that end a turn (default: the tokenizer's eos and pad, i.e.
    <|im_end|> and <|endoftext|>). `max_batch_size`: prompts per decode batch (each
    micro-batch gets its own seed derived from `seed` and its index). `prefix_cache_bytes`: key/
    value states kept between calls, so a prompt that extends an earlier prompt and its sample
    (the agent's next turn) prefills only its new tokens (0 = none); emptied when the weights
    change. The model's own generation_config (a real Qwen3 ships top_k=20, temperature=0.6,
    ...) is never read: sampling is exactly what `generate`'s arguments say. `threads`: torch
    threads while generating (None: the process's setting). One by default: a rollout's
    containers run tests on the other cores meanwhile, and a difficulty job generating with 2
    threads beside them burned 3x the CPU (92 s vs 33 s) for the same episodes, and took longer.
    """

    def __init__(self, model, tokenizer, eos_token_ids: Sequence[int] | None = None,
                 max_batch_size: int = 64, prefix_cache_bytes: int = 512 * 2**20,
                 threads: int | None = 1):
        from forgeline.policy.decode import PrefixCache

        self.model = model.eval()
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos_token_ids = sorted({i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id)
                                    if i is not None})
        if not eos_token_ids:
            raise ValueError("no eos token: pass eos_token_ids or use a tokenizer with an eos")
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else self.eos_token_ids[0]
        self.max_batch_size = max_batch_size
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        self.threads = threads

    @classmethod
    def from_pretrained(cls, path, dtype: str = "float32", **kwargs) -> "HFEngine":
        """Load a model folder (config, weights, tokenizer) into an engine."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
        return cls(model, tokenizer, **kwargs)

    def encode(self, prompts: Prompts) -> list[list[int]]:
        out = []
        for p in prompts:
            ids = self.tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p)
            if not ids:
                raise ValueError("empty prompt")
            out.append([int(i) for i in ids])
        return out

    def generate(self, prompts: Prompts, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0, stop: Sequence[str] = (),
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        _check_sampling(max_new_tokens, temperature, top_p)
        _check_seeds(prompts, seeds)
        encoded = self.encode(prompts)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, ids in enumerate(encoded):
            if limit and len(ids) + max_new_tokens > limit:
                raise ValueError(f"prompt {i}: {len(ids)} tokens + max_new_tokens={max_new_tokens} "
                                 f"exceed the model's context of {limit} tokens")
        results: list[Generation] = []
        for b, start in enumerate(range(0, len(encoded), self.max_batch_size)):
            batch = encoded[start:start + self.max_batch_size]
            # per prompt: the seed its own one-prompt call would give its micro-batch 0
            batch_seed = derive_seed(seed, "batch", b) if seeds is None else \
                [derive_seed(s, "batch", 0) for s in seeds[start:start + self.max_batch_size]]
            results.extend(self._generate_batch(batch, max_new_tokens, temperature, top_p,
                                                batch_seed, list(stop)))
        return results

    def _stops(self, stop: list[str]):
        """Whether a row's tokens now contain a stop string: only the tail can hold a new one."""
        if not stop:
            return None
        window = 4 * max(map(len, stop)) + 4

        def contains(tokens: list[int]) -> bool:
            text = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
            return any(s in text for s in stop)
        return contains

    def _generate_batch(self, batch: list[list[int]], max_new_tokens: int, temperature: float,
                        top_p: float, seed: int | list[int], stop: list[str]) -> list[Generation]:
        import torch

        from forgeline.policy.decode import decode_batch
        from forgeline.policy.qwen3_step import weights_version

        with _MODEL_LOCK, torch.inference_mode(), torch_threads(self.threads):
            if self.prefix_cache is not None:
                version = weights_version(self.model)
                if version != self.prefix_cache.version:
                    self.prefix_cache.clear()
                    self.prefix_cache.version = version
            rows = decode_batch(self.model, batch, max_new_tokens, temperature, top_p, seed,
                                self.eos_token_ids, self.pad_token_id, self.prefix_cache,
                                self._stops(stop))
        results = []
        for ids, row in zip(batch, rows):
            toks, reason = row.token_ids, "stop" if row.stopped else "length"
            k = _first_stop(self.tokenizer, toks, stop)
            if k is not None:
                toks, reason = toks[:k], "stop"
            body = toks[:-1] if toks and toks[-1] in self.eos_token_ids else toks
            results.append(Generation(
                token_ids=toks, logprobs=row.logprobs[:len(toks)],
                text=self.tokenizer.decode(body, skip_special_tokens=False),
                finish_reason=reason, prompt_tokens=len(ids)))
        return results


# -- OpenAI-compatible HTTP (vLLM) ----------------------------------------------------------

class OpenAIEngine(Engine):
    """/v1/completions of an OpenAI-compatible server (built for vLLM's).

    One request per prompt (run `concurrency` at a time), each seeded with
    derive_seed(seed, index), so a prompt repeated in the list gets different samples, as in
    `HFEngine`. Token ids come back through vLLM's `return_token_ids` (or, on older servers,
    `return_tokens_as_token_ids`). With a `tokenizer`, text prompts are sent as token ids.
    The API key, if any, is read from the environment variable
    named by `api_key_env`, never from a file or an argument.

    vLLM returns logprobs of the raw model distribution unless the server is started with
    `--logprobs-mode processed_logprobs`; start it that way for logprobs that match this
    module's contract at temperature != 1.
    """

    def __init__(self, base_url: str, model: str, tokenizer=None, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 600.0, concurrency: int = 8, retries: int = 3,
                 eos_texts: Sequence[str] = ("<|im_end|>", "<|endoftext|>")):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.model = model
        self.tokenizer = tokenizer
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.retries = retries
        self.eos_texts = tuple(eos_texts)

    def request_body(self, prompt: list[int] | str, max_new_tokens: int, temperature: float,
                     top_p: float, seed: int, stop: Sequence[str]) -> dict[str, Any]:
        """The JSON body of one /v1/completions request (pure; the tests check it)."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt, "max_tokens": max_new_tokens,
            "temperature": temperature, "top_p": top_p, "seed": seed, "n": 1, "logprobs": 0,
            "echo": False, "stream": False,
            # vLLM extensions (an OpenAI server ignores unknown fields or rejects them loudly)
            "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "skip_special_tokens": False, "spaces_between_special_tokens": False,
            "include_stop_str_in_output": True, "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        if stop:
            body["stop"] = list(stop)
        return body

    @staticmethod
    def parse_choice(choice: dict[str, Any], prompt_tokens: int = 0,
                     eos_texts: Sequence[str] = ()) -> Generation:
        """A Generation from one `choices[i]` of a /v1/completions response (pure). A trailing
        eos marker (one of `eos_texts`) is removed from the text, as HFEngine does: with
        skip_special_tokens off, some servers keep it."""
        lp = choice.get("logprobs") or {}
        token_logprobs = lp.get("token_logprobs")
        ids = choice.get("token_ids")
        if ids is None:
            tokens = lp.get("tokens") or []
            if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                raise EngineError("the response has no token ids: start vLLM with a version that "
                                  "supports return_token_ids or return_tokens_as_token_ids")
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        if token_logprobs is None or len(token_logprobs) != len(ids):
            raise EngineError(f"the response has {0 if token_logprobs is None else len(token_logprobs)} "
                              f"logprobs for {len(ids)} tokens")
        logprobs = [float("-inf") if x is None else float(x) for x in token_logprobs]
        reason = choice.get("finish_reason") or "length"
        if reason not in ("stop", "length"):
            raise EngineError(f"generation ended with finish_reason={reason!r}")
        text = choice.get("text") or ""
        if reason == "stop":
            for eos in eos_texts:
                if eos and text.endswith(eos):
                    text = text[:-len(eos)]
                    break
        return Generation(token_ids=[int(i) for i in ids], logprobs=logprobs,
                          text=text, finish_reason=reason,
                          prompt_tokens=prompt_tokens,
                          extra={k: choice[k] for k in ("stop_reason",) if k in choice})

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    text = resp.read().decode()
                try:
                    return json.loads(text)
                except ValueError:  # vLLM's /v1/{load,unload}_lora_adapter answer in plain text
                    return {"text": text}
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:2000]
                if exc.code < 500:  # a bad request does not get better by retrying
                    raise EngineError(f"POST {path}: HTTP {exc.code}: {detail}") from None
                last = EngineError(f"POST {path}: HTTP {exc.code}: {detail}")
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = exc
            if attempt < self.retries:
                time.sleep(min(2 ** attempt, 10))
        raise EngineError(f"POST {self.base_url}{path} failed after {self.retries + 1} tries: {last}")

    def _one(self, prompt: list[int] | str, max_new_tokens: int, temperature: float, top_p: float,
             seed: int, stop: Sequence[str]) -> Generation:
        body = self.request_body(prompt, max_new_tokens, temperature, top_p, seed, stop)
        resp = self._post("/v1/completions", body)
        choices = resp.get("choices") or []
        if len(choices) != 1:
            raise EngineError(f"expected 1 choice, got {len(choices)}: {str(resp)[:500]}")
        usage = resp.get("usage") or {}
        return self.parse_choice(choices[0], int(usage.get("prompt_tokens") or 0), self.eos_texts)

    def generate(self, prompts: Prompts, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0, stop: Sequence[str] = (),
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        _check_sampling(max_new_tokens, temperature, top_p)
        _check_seeds(prompts, seeds)
        request_seeds = [derive_seed(seed, "prompt", i) for i in range(len(prompts))] if seeds is None \
            else [derive_seed(s, "prompt", 0) for s in seeds]
        # with a tokenizer, text prompts are tokenized here, so both engines see the same ids
        items = [(self.tokenizer.encode(p, add_special_tokens=False) if self.tokenizer else p)
                 if isinstance(p, str) else [int(i) for i in p] for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
            futures = [pool.submit(self._one, p, max_new_tokens, temperature, top_p, s, tuple(stop))
                       for p, s in zip(items, request_seeds)]
            return [f.result() for f in futures]

    def models(self) -> list[str]:
        """The model names the server serves (GET /v1/models)."""
        req = urllib.request.Request(self.base_url + "/v1/models", method="GET")
        key = os.environ.get(self.api_key_env)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return [m["id"] for m in json.loads(resp.read().decode()).get("data", [])]



# -- loading a policy (HF folder, PEFT adapter, or a served model) ----------------------------

ADAPTER_CONFIG = "adapter_config.json"


def adapter_base(adapter_config: Mapping[str, Any], override: str | None = None) -> str:
    """The base model path of a PEFT adapter: `override` if given, else the adapter config's
    base_model_name_or_path (an error when neither names one)."""
    base = override or adapter_config.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{ADAPTER_CONFIG} names no base_model_name_or_path: pass --base DIR")
    return str(base)


def is_adapter(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_hf_policy(path: str | Path, base: str | None = None, dtype: str = "float32") -> tuple[Engine, dict]:
    """An HFEngine for an HF model folder or a PEFT adapter folder; and what was loaded
    ({kind: model|adapter, path, base?})."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not is_adapter(path):
        if base:
            raise ValueError(f"--base given but {path} is not a PEFT adapter (no {ADAPTER_CONFIG})")
        return HFEngine.from_pretrained(path, dtype=dtype), {"kind": "model", "path": str(path)}
    from peft import PeftModel

    base_path = adapter_base(json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8")), base)
    # an adapter saved with its tokenizer (e.g. added tokens) must use that one
    tok_dir = path if (path / "tokenizer_config.json").is_file() else base_path
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=getattr(torch, dtype))
    model = PeftModel.from_pretrained(model, str(path), is_trainable=False)
    return HFEngine(model, tokenizer), {"kind": "adapter", "path": str(path), "base": base_path,
                                        "tokenizer": str(tok_dir)}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy/engine options of every stage that generates (agent-rollout, evaluate): the
    fields of `PolicySpec`."""
    parser.add_argument("--policy", help="an HF model folder or a PEFT adapter folder")
    parser.add_argument("--base", help="base model folder of a PEFT adapter (default: its base_model_name_or_path)")
    parser.add_argument("--name", help="the policy's name in the records (default: folder or model name)")
    parser.add_argument("--engine", choices=("hf", "vllm", "openai"),
                        help="hf (in-process) | vllm (a server started for this run) | openai (a "
                        "running server); default: openai with --base-url, else the config's serving.engine")
    parser.add_argument("--base-url", help="engine openai: the server (e.g. http://127.0.0.1:8000/v1)")
    parser.add_argument("--model", help="engine openai: the served model's name")
    parser.add_argument("--tokenizer", help="engine openai: the policy's tokenizer folder")


@dataclass(frozen=True)
class PolicySpec:
    """Which policy generates, and through which engine (None: the default `open_engine` picks)."""

    policy: str | None = None
    """an HF model folder or a PEFT adapter folder"""
    base: str | None = None
    """the base model folder of a PEFT adapter (default: its base_model_name_or_path)"""
    name: str | None = None
    """the policy's name in the records (default: the folder or model name)"""
    engine: str | None = None
    """hf | vllm | openai (default: openai with base_url, else the config's serving.engine)"""
    base_url: str | None = None
    """engine openai: the server"""
    model: str | None = None
    """engine openai: the served model's name"""
    tokenizer: str | None = None
    """engine openai: the policy's tokenizer folder"""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "PolicySpec":
        """The spec `add_engine_arguments`' options give."""
        return cls(policy=args.policy, base=args.base, name=args.name, engine=args.engine,
                   base_url=args.base_url, model=args.model, tokenizer=args.tokenizer)


def engine_from_spec(spec: PolicySpec, kind: str, dtype: str = "float32") -> tuple[Engine, str, dict]:
    """(engine, policy name, what was loaded) for the engines that need no server of their own
    (hf, openai)."""
    if kind == "hf":
        if not spec.policy:
            raise SystemExit("engine hf: give --policy DIR (an HF model folder or a PEFT adapter folder)")
        engine, info = load_hf_policy(spec.policy, spec.base, dtype)
        return engine, spec.name or Path(spec.policy).name, info
    if not (spec.base_url and spec.model and spec.tokenizer):
        raise SystemExit("engine openai: give --base-url URL --model NAME --tokenizer DIR")
    from transformers import AutoTokenizer

    engine = OpenAIEngine(spec.base_url, spec.model, tokenizer=AutoTokenizer.from_pretrained(spec.tokenizer))
    return engine, spec.name or spec.model, {"kind": "openai", "base_url": spec.base_url, "model": spec.model,
                                             "tokenizer": spec.tokenizer}


@contextlib.contextmanager
def open_engine(spec: PolicySpec, serving: ServingConfig, dtype: str = "float32", seed: int = 0):
    """`with open_engine(spec, cfg.serving) as (engine, name, loaded):` the engine a generating
    stage runs, chosen by `spec.engine`, else `spec.base_url` (openai), else `serving.engine`.
    Engine openai without a base_url uses the server of `serving` (the served model, the
    policy's tokenizer unless given). Engine vllm starts a server on 127.0.0.1 for the block
    (seeded with `seed`) and stops it after, also on errors; a PEFT adapter is served on its base
    with the adapter loaded at run time, as PPO does."""
    kind = spec.engine or ("openai" if spec.base_url else serving.engine)
    if kind == "openai" and not spec.base_url:
        spec = replace(spec, base_url=serving.base_url, model=spec.model or serving.served_model,
                       tokenizer=spec.tokenizer or spec.policy)
    if kind != "vllm":
        yield engine_from_spec(spec, kind, dtype)
        return
    from transformers import AutoTokenizer

    from forgeline.policy.serve import VLLMServer, load_lora_adapter, serve_options

    if not spec.policy:
        raise SystemExit("engine vllm: give --policy DIR (an HF model folder or a PEFT adapter folder)")
    adapter = is_adapter(spec.policy)
    model = adapter_base(json.loads((Path(spec.policy) / ADAPTER_CONFIG).read_text(encoding="utf-8")),
                         spec.base) if adapter else spec.policy
    name = spec.name or Path(spec.policy).name
    options = serve_options(serving.vllm, seed, enable_lora=adapter)
    server = VLLMServer(model, "base", options, startup_timeout_s=float(serving.vllm.startup_timeout_s))
    with server as url:
        engine = OpenAIEngine(url, "base", tokenizer=AutoTokenizer.from_pretrained(model))
        if adapter:
            load_lora_adapter(engine, name, spec.policy)
        yield engine, name, {"kind": "vllm-adapter" if adapter else "vllm", "path": str(spec.policy),
                             **({"base": str(model)} if adapter else {}), "startup_s": round(server.startup_s, 1)}


def open_adapter_server(stack: contextlib.ExitStack, serving: ServingConfig, base: str | Path, seed: int,
                        base_url: str | None = None, served_model: str | None = None
                        ) -> tuple[str, str | None, str | None]:
    """Where a trainer's policy (`base` + the LoRA adapter it trains) generates: (kind, url,
    model). kind "openai" (`base_url` given, or serving.engine openai): the server at `base_url`,
    else serving.base_url, serving the base as `model`; "vllm": a server of `base` on 127.0.0.1
    (seeded with `seed`, LoRA enabled), model "base", stopped when `stack` closes; "hf": url
    None, the trainer generates in its own process. The trainer loads each step's adapter into a
    server with `forgeline.policy.serve.load_lora_adapter`. (A plain function, not a decorated
    context manager: a decorator runs on import, and every stage importing this module would
    count this code as its own.)"""
    kind = "openai" if base_url else serving.engine
    if kind == "openai" and not base_url:
        base_url, served_model = serving.base_url, serving.served_model
    if kind != "vllm":
        return kind, base_url, served_model
    from forgeline.policy.serve import VLLMServer, serve_options

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SystemExit("serving.engine vllm starts one server per process; under torchrun "
                         "start one yourself and use engine openai (serving.base_url)")
    # the base policy, with the trainer's adapter loaded into it at run time
    options = serve_options(serving.vllm, seed, enable_lora=True)
    url = stack.enter_context(VLLMServer(base, "base", options,
                                         startup_timeout_s=float(serving.vllm.startup_timeout_s)))
    return kind, url, "base"


class GenerationClock:
    """An engine wrapper that records when generation was in progress: the length of the union
    of its generate() intervals is the step's generation time (threads of one rollout wait on
    each other inside the engine, so summing per-episode times would count the waits)."""

    def __init__(self, engine):
        self.engine = engine
        self._lock = threading.Lock()
        self.intervals: list[tuple[float, float]] = []

    def __getattr__(self, name):  # tokenizer, model (the context limit), ...
        return getattr(self.engine, name)

    def generate(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            with self._lock:
                self.intervals.append((t0, time.perf_counter()))

    def busy_s(self) -> float:
        """Seconds during which at least one generate() call was running."""
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals):
            if b > end:
                total += b - max(a, end)
                end = b
        return total
