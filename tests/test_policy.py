"""The policy layer: tokenizer, tiny Qwen3, chat protocol, engines, hub resolution, init stage.

Everything runs for real on tiny sizes: a tokenizer trained on one small repository, a Qwen3
of ~50k parameters, transformers generation, a local HTTP server speaking /v1/completions,
and the hub's real on-disk cache layout read by huggingface_hub in offline mode.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline import config as config_mod  # noqa: E402
from forgeline.policy import chat, copy_pretrain, engine, hub, init_stage, model as tiny, tokenizer as tk  # noqa: E402

from forgeline.seeds import derive_seed, stage_seed  # noqa: E402
from embedded import PARAMS  # noqa: E402
from tiny_models import CORPUS_REPO, tiny_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def corpus():
    return tk.collect_corpus([CORPUS_REPO], None)


@pytest.fixture(scope="module")
def tok(corpus):
    return tk.build_tokenizer(corpus, vocab_size=512)


@pytest.fixture(scope="module")
def lm(tok):
    return tiny_lm(tok)


@pytest.fixture(scope="module")
def hf(lm, tok):
    return engine.HFEngine(lm, tok)


def _prompts(tok):
    return [chat.render_ids(tok, [{"role": "user", "content": "Fix the parser " * n}], chat.TOOLS)
            for n in (1, 4, 9)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# -- tokenizer ------------------------------------------------------------------------------

def test_tokenizer_round_trip_special_tokens_and_determinism(corpus, tok):
    assert len(tok) == 512
    text = 'def parse(row):\n    """Split a CSV row; naïve 🤖."""\n\treturn row.split(",")  # 42\n'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    special = tk.check_special_tokens(tok)
    assert special["<|endoftext|>"] == tok.pad_token_id and special["<|im_end|>"] == tok.eos_token_id
    assert len(set(special.values())) == len(tk.SPECIAL_TOKENS)
    # markup survives skip_special_tokens (the parser needs it), control tokens do not
    marked = tok.encode("<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>",
                        add_special_tokens=False)
    assert tok.decode(marked, skip_special_tokens=True) == "assistant\n<tool_call>\n{}\n</tool_call>"
    # same corpus + params => byte-identical tokenizer.json; other params => another one
    assert tk.train_bpe(corpus, 512).to_str() == tk.train_bpe(list(reversed(corpus)), 512).to_str()
    assert tk.train_bpe(corpus, 512).to_str() != tk.train_bpe(corpus, 520).to_str()
    with pytest.raises(ValueError, match="vocab_size"):
        tk.train_bpe(corpus, 100)


def test_words_split_gives_a_name_and_a_number_the_same_ids_everywhere(corpus):
    """What the agent copies (a function name from the statement into a command, a path and a
    line number from a tool output into the next call) is the same ids in every context with the
    `words` pre-split; with Qwen's, a leading dot or space changes the first token."""
    places = ["from `pkg.mod.unchanged`", 'grep -rn -A 19 "def unchanged(" pkg', "pkg/mod.py:175:def unchanged(x):",
              "pkg/mod.py-175-    return unchanged(x)", '{"path": "pkg/mod.py", "line": 175}']

    words = tk.build_tokenizer(corpus, vocab_size=512, split="words")
    qwen = tk.build_tokenizer(corpus, vocab_size=512)
    for tok, same in ((words, True), (qwen, False)):
        seen = {}
        for text in places:
            pieces = [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]
            for name in ("unchanged", "175", "pkg"):
                at = "".join(pieces).find(name)
                if at < 0:
                    continue
                # the pieces that cover `name` (and what is glued to it)
                out, pos = [], 0
                for piece in pieces:
                    if pos + len(piece) > at and pos < at + len(name):
                        out.append(piece)
                    pos += len(piece)
                seen.setdefault(name, set()).add(tuple(out))
        assert all(len(v) == 1 for v in seen.values()) == same, seen
    with pytest.raises(ValueError, match="split"):
        tk.train_bpe(corpus, 512, split="bytes")


def test_corpus_selection_is_deterministic_and_capped():
    sizes = [(f"pkg/m{i}.py", 100 + i) for i in range(50)] + [("huge.py", 10_000)]
    chosen = tk.select_by_budget(sizes, max_bytes=1_000, max_file_bytes=5_000)
    assert chosen == sorted(chosen) and "huge.py" not in chosen
    assert sum(dict(sizes)[n] for n in chosen) <= 1_000
    assert chosen == tk.select_by_budget(list(reversed(sizes)), 1_000, 5_000)


# -- chat template and tool calls -----------------------------------------------------------

def test_chat_template_tools_calls_responses_and_generation_prompt(tok):
    messages = [{"role": "system", "content": "You fix bugs."},
                {"role": "user", "content": "Tests fail."},
                chat.tool_call_message("bash", {"command": "pytest -q"}),
                chat.tool_message("1 failed"), chat.tool_message("second result"),
                {"role": "assistant", "content": "Fixed.",
                 "tool_calls": [{"type": "function", "function": {"name": "submit", "arguments": {}}}]}]
    text = chat.render(tok, messages, chat.tool_schemas(edit=True))
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools\n")
    tools_block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    # one signature per tool, optional arguments marked: what the tiny model reads
    assert tools_block == [
        "bash(command): " + chat.BASH_TOOL["function"]["description"],
        "submit(): " + chat.SUBMIT_TOOL["function"]["description"],
        "edit(path, old, new): " + chat.EDIT_TOOL["function"]["description"]]
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": '
            '{"command": "pytest -q"}}\n</tool_call><|im_end|>\n') in text
    # consecutive tool results: one user turn, each wrapped in <tool_response>
    assert ("<|im_start|>user\n<tool_response>\n1 failed\n</tool_response>\n<tool_response>\n"
            "second result\n</tool_response><|im_end|>\n") in text
    assert 'Fixed.\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>\n' in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert not chat.render(tok, messages, None, add_generation_prompt=False).count("<tools>")
    assert chat.render(tok, messages[1:2], None, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # prefix-stable: prompt + generated text + <|im_end|>\n is the render of the longer history
    prompt = chat.render(tok, messages[:2], chat.TOOLS)
    generated = "Let me look.\n" + chat.format_tool_call("bash", {"command": "ls"})
    longer = chat.render(tok, messages[:2] + [chat.assistant_message(generated)], chat.TOOLS,
                         add_generation_prompt=False)
    assert longer == prompt + generated + "<|im_end|>\n"
    ids = chat.render_ids(tok, messages[:2], chat.TOOLS)
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3


def test_parse_tool_calls_good_and_malformed():
    good = chat.parse_tool_calls(
        'I will run the tests.\n<tool_call>\n{"name": "bash", "arguments": {"command": "pytest"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "submit", "arguments": "{}"}\n</tool_call>', chat.TOOLS)
    assert [(c.name, c.arguments, c.ok) for c in good] == [("bash", {"command": "pytest"}, True),
                                                           ("submit", {}, True)]
    assert chat.parse_tool_calls("no call here") == []
    cases = {
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>': "invalid_json",
        "<tool_call>[1, 2]</tool_call>": "not_an_object",
        '<tool_call>{"arguments": {}}</tool_call>': "missing_name",
        '<tool_call>{"name": "bash", "arguments": [1]}</tool_call>': "bad_arguments",
        '<tool_call>{"name": "bash", "arguments": "{oops"}</tool_call>': "bad_arguments",
        '<tool_call>\n{"name": "bash", "arguments": {"command": "l': "unterminated",
        '<tool_call>{"name": "python", "arguments": {}}</tool_call>': "unknown_tool",
        '<tool_call>{"name": "bash", "arguments": {}}</tool_call>': "missing_argument",
        '<tool_call>{"name": "bash", "arguments": {"command": "ls", "cwd": "/"}}</tool_call>':
            "unexpected_argument",
        '<tool_call>{"name": "bash", "arguments": {"command": 3}}</tool_call>': "wrong_type",
    }
    for text, kind in cases.items():
        calls = chat.parse_tool_calls(text, chat.TOOLS)
        assert len(calls) == 1 and calls[0].error == kind, (text, calls)
        assert kind in calls[0].error_message() and calls[0].detail
    edit = chat.parse_tool_calls('<tool_call>{"name": "edit", "arguments": {"path": "a.py", '
                                 '"old": "x", "new": "y"}}</tool_call>', chat.tool_schemas(edit=True))
    assert edit[0].ok and edit[0].arguments["new"] == "y"


# -- tiny model -----------------------------------------------------------------------------

def test_tiny_model_deterministic_init_tied_and_lora_targets(tmp_path, lm):
    from peft import LoraConfig, get_peft_model

    config = lm.config
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        tiny.init_tiny_qwen3(config, seed).save_pretrained(tmp_path / name)
    a, b, c = (_files(tmp_path / n) for n in "abc")
    assert a == b and a["model.safetensors"] != c["model.safetensors"]
    # embedding_std re-draws only the (tied) embeddings, deterministically
    wide, again = tiny.init_tiny_qwen3(config, 11, 0.3), tiny.init_tiny_qwen3(config, 11, 0.3)
    assert torch.equal(wide.model.embed_tokens.weight, again.model.embed_tokens.weight)
    assert wide.lm_head.weight is wide.model.embed_tokens.weight
    assert abs(float(wide.model.embed_tokens.weight.std()) - 0.3) < 0.01
    assert abs(float(lm.model.embed_tokens.weight.std()) - 0.02) < 0.002
    plain = tiny.init_tiny_qwen3(config, 11)
    assert torch.equal(wide.model.layers[0].mlp.up_proj.weight, plain.model.layers[0].mlp.up_proj.weight)
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    counts = tiny.parameter_count(lm)
    assert counts["total"] == counts["embedding"] + counts["non_embedding"]
    assert counts["total"] == sum(p.numel() for p in lm.parameters())
    names = tiny.lora_target_names(lm)
    assert len(names) == 7 * config.num_hidden_layers
    assert {n.rpartition(".")[2] for n in names} == set(tiny.LORA_TARGET_MODULES)
    peft_model = get_peft_model(tiny.init_tiny_qwen3(config, 11), LoraConfig(
        r=4, lora_alpha=8, target_modules=list(tiny.LORA_TARGET_MODULES), task_type="CAUSAL_LM"))
    wrapped = [n for n, _ in peft_model.named_modules() if n.endswith("lora_A")]
    assert len(wrapped) == 7 * config.num_hidden_layers


# -- engines --------------------------------------------------------------------------------

def test_hf_engine_seeded_and_logprobs_match_forward(hf, lm, tok):
    prompts = _prompts(tok)
    first = hf.generate(prompts, max_new_tokens=12, temperature=0.7, seed=5)
    again = hf.generate(prompts, max_new_tokens=12, temperature=0.7, seed=5)
    other = hf.generate(prompts, max_new_tokens=12, temperature=0.7, seed=6)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in other]
    for prompt, gen in zip(prompts, first):
        assert len(gen.token_ids) == len(gen.logprobs) and gen.finish_reason in ("stop", "length")
        assert all(lp <= 0 and lp == lp and lp != float("-inf") for lp in gen.logprobs)
        with torch.no_grad():  # a separate forward pass, unpadded
            logits = lm(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1:-1]
        ref = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4)
    # the nucleus renormalises: top_p < 1 never lowers a sampled token's logprob
    for prompt, gen in zip(prompts, hf.generate(prompts, 8, temperature=1.0, top_p=0.5, seed=5)):
        with torch.no_grad():
            logits = lm(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1:-1]
        full = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
        assert (torch.tensor(gen.logprobs) >= full - 1e-5).all()


def test_hf_engine_greedy_padding_stop_and_text(hf, lm, tok):
    prompts = _prompts(tok)
    batched = hf.generate(prompts, 6, temperature=0.0)
    alone = hf.generate(prompts[:1], 6, temperature=0.0)  # no left padding at all
    assert batched[0].token_ids == alone[0].token_ids
    with torch.no_grad():
        logits = lm(torch.tensor([prompts[0] + batched[0].token_ids])).logits[0, len(prompts[0]) - 1:-1]
    assert logits.argmax(-1).tolist() == batched[0].token_ids
    text_prompt = hf.generate([tok.decode(prompts[1])], 6, temperature=0.0)[0]
    assert text_prompt.token_ids == batched[1].token_ids
    sampled = hf.generate(prompts, 40, temperature=1.0, seed=3)
    for gen in sampled:
        assert gen.text == tok.decode([t for t in gen.token_ids if t not in hf.eos_token_ids],
                                      skip_special_tokens=False)
        assert (gen.finish_reason == "stop") == (gen.token_ids[-1] in hf.eos_token_ids
                                                 or len(gen.token_ids) < 40)
    # a stop string ends the generation at the token that completes it, and stays in the text
    full = hf.generate(prompts[:1], 40, temperature=1.0, seed=3)[0]
    starts = [i for i in range(1, len(full.text) - 1) if full.text[i:i + 2].isascii()
              and full.text[i:i + 2].isalnum()]
    assert starts, full.text
    stop = full.text[starts[0]:starts[0] + 2]
    cut = hf.generate(prompts[:1], 40, temperature=1.0, seed=3, stop=[stop])[0]
    assert cut.finish_reason == "stop" and stop in cut.text
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)]  # same draws until the stop
    assert stop not in tok.decode(cut.token_ids[:-1], skip_special_tokens=False)
    with pytest.raises(ValueError):
        hf.generate(prompts, 4, top_p=0.0)
    with pytest.raises(ValueError, match="context"):
        hf.generate(prompts, lm.config.max_position_embeddings)


def test_hf_engine_prefix_cache_prefills_only_the_new_turn_and_forgets_old_weights(lm, tok):
    """A prompt that extends an earlier prompt and its sample (the agent's next turn) starts from
    the cached states: the same tokens and logprobs as an engine without a cache, only the new
    tokens prefilled; sibling prompts share their common prefix; new weights empty the cache."""
    cached, fresh = engine.HFEngine(lm, tok), engine.HFEngine(lm, tok, prefix_cache_bytes=0)
    assert fresh.prefix_cache is None
    prompts = _prompts(tok)
    turn1 = cached.generate(prompts, 8, temperature=0.0)
    assert [g.token_ids for g in turn1] == [g.token_ids for g in fresh.generate(prompts, 8, temperature=0.0)]
    pc = cached.prefix_cache
    first_prefill = pc.prefilled_tokens
    # the prompts share the system turn: later rows start from the first row's states
    assert first_prefill + pc.hits_tokens == sum(len(p) - 1 for p in prompts)
    shared = next(i for i, col in enumerate(zip(*prompts)) if len(set(col)) > 1)
    assert pc.hits_tokens >= 2 * shared > 0
    answer = chat.render_ids(tok, [{"role": "user", "content": "it still fails"}])
    turn2 = [p + g.token_ids + answer for p, g in zip(prompts, turn1)]
    again, ref = cached.generate(turn2, 10, temperature=0.0), fresh.generate(turn2, 10, temperature=0.0)
    assert [g.token_ids for g in again] == [g.token_ids for g in ref]
    for a, b in zip(again, ref):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    # only the last sampled token and the answer were new, for every row
    assert pc.prefilled_tokens - first_prefill == len(prompts) * len(answer)
    # siblings: two seeds of the same prompt in one call prefill it once
    pc.clear()
    before = pc.prefilled_tokens
    cached.generate([prompts[2], prompts[2]], 4, temperature=1.0, seed=1)
    assert pc.prefilled_tokens - before == len(prompts[2]) - 1
    # an optimizer step changes the weights: nothing cached may be reused
    assert len(pc) > 0
    with torch.no_grad():
        lm.model.norm.weight.mul_(1.0)  # in place: torch counts it as a new version
    hits = pc.hits_tokens
    cached.generate([prompts[2]], 4, temperature=0.0)
    assert pc.hits_tokens == hits and len(pc) == 1
    # a one-token prompt has no past to cache
    assert len(cached.generate([[prompts[0][0]]], 3, temperature=0.0)[0].token_ids) >= 1


def test_rows_that_end_early_leave_the_batch_and_the_rest_decode_unchanged(lm, tok):
    """A row that ends (eos) stops taking a slot once half the batch has ended; every row still
    gets what it would get alone, greedy and sampled with its own seed, and the ended rows'
    states in the prefix cache continue their conversations correctly."""
    prompts = _prompts(tok) + [_prompts(tok)[0][:-3]]
    probe = engine.HFEngine(lm, tok, prefix_cache_bytes=0).generate(prompts, 12, temperature=0.0)
    # an "eos" that ends rows 0 and 1 early: the tokens they emit at steps 1 and 2
    stop_ids = [probe[0].token_ids[1], probe[1].token_ids[2]]
    eos = sorted({*stop_ids, tok.eos_token_id})
    cached = engine.HFEngine(lm, tok, eos_token_ids=eos)
    fresh = engine.HFEngine(lm, tok, eos_token_ids=eos, prefix_cache_bytes=0)
    batch = cached.generate(prompts, 12, temperature=0.0)
    lengths = [len(g.token_ids) for g in batch]
    assert lengths[0] <= 2 and lengths[1] <= 3 and max(lengths) > 6, lengths  # ended at different steps
    for p, g in zip(prompts, batch):
        assert g.token_ids == fresh.generate([p], 12, temperature=0.0)[0].token_ids
    seeds = [3, 4, 5, 6]
    sampled = fresh.generate(prompts, 12, temperature=1.0, seeds=seeds)
    for p, s_, g in zip(prompts, seeds, sampled):
        assert g.token_ids == fresh.generate([p], 12, temperature=1.0, seed=s_)[0].token_ids
    answer = chat.render_ids(tok, [{"role": "user", "content": "again"}])
    turn2 = [p + g.token_ids + answer for p, g in zip(prompts, batch)]
    assert [g.token_ids for g in cached.generate(turn2, 6, temperature=0.0)] == \
        [g.token_ids for g in fresh.generate(turn2, 6, temperature=0.0)]
    assert cached.prefix_cache.hits_tokens >= sum(len(t) - len(answer) - 1 for t in turn2)


def _decode_logits(model, prompts, steps, lean: bool):
    """The logits of `steps` greedy decode steps after `prompts` (left-padded rows of different
    lengths), through Qwen3Step or through the model's forward; and the rows decoded."""
    from forgeline.policy import decode

    seen, sample = [], decode.sample_next

    def record(logits, *args):
        seen.append(logits.clone())
        return sample(logits, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode, "sample_next", record)
        if lean:
            assert decode.Qwen3Step.of(model) is not None
        else:
            mp.setattr(decode.Qwen3Step, "of", classmethod(lambda cls, model: None))
        with torch.inference_mode():
            rows = decode.decode_batch(model, prompts, steps, 0.0, 1.0, 0, [-1], 0)
    return torch.cat(seen), rows


def test_qwen3_step_decodes_as_the_model_forward_plain_and_with_a_lora(lm, tok):
    """The lean decode step gives the logits of transformers' forward (to float rounding) on a
    left-padded batch, for the plain model and for a PEFT LoRA around it (its delta unmerged),
    is rebuilt after the weights change, and steps aside where it would not be exact."""
    from peft import LoraConfig, get_peft_model

    from forgeline.policy.qwen3_step import Qwen3Step

    prompts = _prompts(tok)
    peft_model = get_peft_model(tiny_lm(tok, seed=3), LoraConfig(
        r=4, lora_alpha=8, target_modules=list(tiny.LORA_TARGET_MODULES), init_lora_weights=False)).eval()
    for model in (lm, peft_model):
        ref, ref_rows = _decode_logits(model, prompts, 6, lean=False)
        got, rows = _decode_logits(model, prompts, 6, lean=True)
        assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4), (got - ref).abs().max()
        assert [r.token_ids for r in rows] == [r.token_ids for r in ref_rows]
    # a change of weights rebuilds the step
    before = Qwen3Step.of(peft_model)
    assert Qwen3Step.of(peft_model) is before
    with torch.no_grad():
        next(p for n, p in peft_model.named_parameters() if "lora_B" in n).add_(0.5)
    after = Qwen3Step.of(peft_model)
    assert after is not before and not torch.equal(after.layers[0].qkv, before.layers[0].qkv)
    ref, _ = _decode_logits(peft_model, prompts, 2, lean=False)
    assert torch.allclose(_decode_logits(peft_model, prompts, 2, lean=True)[0], ref, atol=1e-4, rtol=1e-4)
    # the adapter switched off (PPO's reference policy): the step follows, without a weight change
    on = _decode_logits(peft_model, prompts, 2, lean=True)[0]
    with peft_model.disable_adapter():
        ref, _ = _decode_logits(peft_model, prompts, 2, lean=False)
        off = _decode_logits(peft_model, prompts, 2, lean=True)[0]
    assert torch.allclose(off, ref, atol=1e-4, rtol=1e-4) and not torch.allclose(off, on, atol=1e-2)
    # dropout would act in training mode, and a DoRA adapter is not a plain delta: the forward decodes
    assert Qwen3Step.of(peft_model.train()) is None
    peft_model.eval()
    dora = get_peft_model(tiny_lm(tok, seed=3), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True)).eval()
    assert Qwen3Step.of(dora) is None
    assert Qwen3Step.of(tiny_lm(tok, seed=3).to(torch.bfloat16)) is None


def test_inverse_cdf_draws_each_token_with_its_probability_and_never_a_zero_one():
    from forgeline.policy.decode import inverse_cdf

    probs = torch.tensor([[0.0, 0.5, 0.0, 0.2, 0.3, 0.0]] * 20000)
    g = torch.Generator().manual_seed(0)
    tokens = inverse_cdf(probs, torch.rand(len(probs), generator=g))
    counts = torch.bincount(tokens, minlength=6).float() / len(tokens)
    assert counts[[0, 2, 5]].sum() == 0
    assert torch.allclose(counts, probs[0], atol=0.015), counts
    # the largest uniform below 1, and a total that rounds: still the last token with mass
    edge = torch.tensor([[0.3, 0.7000001, 0.0]])
    assert inverse_cdf(edge, torch.tensor([1 - 2 ** -24])).tolist() == [1]
    assert inverse_cdf(edge, torch.tensor([0.0])).tolist() == [0]


def test_prefix_cache_evicts_least_recently_used_past_its_budget():
    from forgeline.policy.decode import PrefixCache

    def kv(n):
        return [(torch.zeros(1, 1, n, 4), torch.zeros(1, 1, n, 4))]

    cache = PrefixCache(max_bytes=2 * 2 * 10 * 4 * 4)  # two entries of 10 tokens
    a, b, c = (torch.arange(10) + 100 * k for k in range(3))
    cache.store(a, kv(10))
    cache.store(b, kv(10))
    assert cache.longest(torch.cat([a, torch.tensor([7])]))[0] == 10  # a is now the most recent
    cache.store(c, kv(10))
    assert cache.longest(torch.cat([b, torch.tensor([7])]))[0] == 0  # b went first
    n, states = cache.longest(torch.cat([a[:6], torch.tensor([5, 5])]))
    assert n == 6 and states[0][0].shape[2] == 6  # a common prefix, cut to its length
    longer = torch.cat([a, torch.tensor([1, 2])])
    cache.store(longer, kv(12))  # a is a prefix of it: replaced; 22 tokens > 20: c goes too
    assert len(cache) == 1 and cache.longest(torch.cat([longer, torch.tensor([3])]))[0] == 12


class _CompletionsServer(BaseHTTPRequestHandler):
    """A small OpenAI-compatible /v1/completions over an HFEngine, shaped like vLLM's answer."""

    hf: engine.HFEngine
    bodies: list

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        gen = self.hf.generate([body["prompt"]], body["max_tokens"], body["temperature"],
                               body["top_p"], body["seed"], body.get("stop", ()))[0]
        choice = {"index": 0, "text": gen.text, "finish_reason": gen.finish_reason,
                  "token_ids": gen.token_ids if body.get("return_token_ids") else None,
                  "logprobs": {"tokens": [f"token_id:{t}" for t in gen.token_ids],
                               "token_logprobs": gen.logprobs, "top_logprobs": None}}
        if choice["token_ids"] is None:
            del choice["token_ids"]
        data = json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [choice],
                           "usage": {"prompt_tokens": gen.prompt_tokens}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_engine_round_trip_through_http(hf, tok):
    handler = type("H", (_CompletionsServer,), {"hf": hf, "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = engine.OpenAIEngine(f"http://127.0.0.1:{server.server_port}/v1", "tiny",
                                     concurrency=2, retries=0)
        prompts = _prompts(tok)[:2]
        got = client.generate(prompts, 8, temperature=0.9, seed=7, stop=["\n\n"])
        for i, (prompt, gen) in enumerate(zip(prompts, got)):
            want = hf.generate([prompt], 8, 0.9, 1.0, derive_seed(7, "prompt", i), ["\n\n"])[0]
            assert (gen.token_ids, gen.logprobs, gen.text, gen.finish_reason) == \
                (want.token_ids, want.logprobs, want.text, want.finish_reason)
            assert gen.prompt_tokens == len(prompt)
        # per-prompt seeds: prompt i drawn as its own one-prompt call with seeds[i], on both engines
        seeds = [11, 12]
        for eng in (client, hf):
            together = eng.generate(prompts, 8, temperature=0.9, seeds=seeds)
            alone = [eng.generate([p], 8, temperature=0.9, seed=s)[0] for p, s in zip(prompts, seeds)]
            assert [g.token_ids for g in together] == [g.token_ids for g in alone]
            assert together[0].token_ids != together[1].token_ids or prompts[0] != prompts[1]
        with pytest.raises(ValueError, match="one per prompt"):
            hf.generate(prompts, 4, seeds=[1])
        body = handler.bodies[0]
        assert body["include_stop_str_in_output"] and body["skip_special_tokens"] is False
        assert body["stop"] == ["\n\n"] and body["logprobs"] == 0 and body["top_k"] == -1
        # older vLLM: ids only as "token_id:N" strings
        parsed = engine.OpenAIEngine.parse_choice({"text": "a", "finish_reason": "length",
                                                   "logprobs": {"tokens": ["token_id:5"],
                                                                "token_logprobs": [-0.5]}})
        assert parsed.token_ids == [5] and parsed.logprobs == [-0.5]
        kept_eos = engine.OpenAIEngine.parse_choice(
            {"text": "done<|im_end|>", "finish_reason": "stop", "token_ids": [7, 2],
             "logprobs": {"token_logprobs": [-0.1, -0.2]}}, 0, client.eos_texts)
        assert kept_eos.text == "done" and kept_eos.token_ids == [7, 2]
        with pytest.raises(engine.EngineError):
            engine.OpenAIEngine.parse_choice({"text": "a", "finish_reason": "length",
                                              "logprobs": {"tokens": ["a"], "token_logprobs": [-1.0]}})
    finally:
        server.shutdown()
        server.server_close()


# -- hub ------------------------------------------------------------------------------------

COMMIT = "0da97e45dbbd44278bd55b878170ec369d2934fb"


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_fake_hub_cache(cache: Path, repo_id: str, commit: str, model_dir: Path,
                        tree_extra: tuple[str, ...] = ()) -> Path:
    """The hub's on-disk layout for one snapshot: blobs named by their etag (sha256 for LFS
    files such as weights, the git blob sha1 otherwise), snapshots/<commit>/<file> as relative
    symlinks to them, refs/main holding the commit, and the tree listing of the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    tree = {}
    for path in sorted(model_dir.iterdir()):
        data = path.read_bytes()
        lfs = path.suffix == ".safetensors"
        etag = hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data)
        (repo / "blobs" / etag).write_bytes(data)
        (snap / path.name).symlink_to(Path("..") / ".." / "blobs" / etag)
        tree[path.name] = {"size": len(data), "blob_id": _git_blob_sha1(data)}
        if lfs:
            tree[path.name].update(lfs_sha256=etag, lfs_size=len(data))
    for name in tree_extra:
        tree[name] = {"size": 1, "blob_id": "0" * 40}
    (repo / "trees").mkdir()
    (repo / "trees" / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": tree}))
    return snap


def test_hub_resolution_offline_through_fake_cache(tmp_path, monkeypatch, lm, tok):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tmp_path / "made"
    lm.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    cache = tmp_path / "hub"
    snap = make_fake_hub_cache(cache, "org/tiny-agent", COMMIT, model_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    before = sorted((p.relative_to(cache).as_posix(), p.stat().st_mtime_ns) for p in cache.rglob("*"))

    folder = hub.resolve_base_model("org/tiny-agent", COMMIT)
    assert folder == snap
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()} == \
        {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_dir.iterdir()}
    assert hub.verify_lfs_blobs(folder) == 1
    assert hub.resolve_base_model("org/tiny-agent", COMMIT, cache_dir=cache,
                                  local_files_only=True) == snap
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(loaded.model.embed_tokens.weight, lm.model.embed_tokens.weight)
    assert AutoTokenizer.from_pretrained(folder).encode("def f(): pass") == tok.encode("def f(): pass")
    after = sorted((p.relative_to(cache).as_posix(), p.stat().st_mtime_ns) for p in cache.rglob("*"))
    assert after == before  # resolution wrote nothing

    with pytest.raises(hub.HubError, match="not in"):  # a commit that is not cached
        hub.resolve_base_model("org/tiny-agent", "1" * 40)
    weights = snap / "model.safetensors"
    weights.resolve().write_bytes(weights.read_bytes()[:-1] + b"\0")  # corrupt the LFS blob
    with pytest.raises(hub.HubError, match="corrupted"):
        hub.resolve_base_model("org/tiny-agent", COMMIT)
    # a snapshot that misses a file of the commit's tree listing is refused
    partial = make_fake_hub_cache(tmp_path / "hub2", "org/partial", COMMIT, model_dir,
                                  tree_extra=("model-00002-of-00002.safetensors",))
    with pytest.raises(hub.HubError, match="incomplete"):
        hub.resolve_base_model("org/partial", COMMIT, cache_dir=partial.parents[2])


def test_policy_hub_stage_writes_the_pinned_snapshot_with_every_files_sha256(tmp_path, monkeypatch, lm, tok):
    """`policy-hub` offline through the cache layout: the folder loads, its manifest names the
    repository, the commit and each file's sha256, and the token in the environment is
    written nowhere."""
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / "made"
    lm.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    make_fake_hub_cache(tmp_path / "hub", "org/tiny-agent", COMMIT, model_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_written_0123")
    base = {"source": "hub", "hub": {"repo_id": "org/tiny-agent", "revision": COMMIT, "allow_patterns": None}}
    out = tmp_path / "results" / "policy" / "hub"
    # as configs/klear-8b.yaml does: every evaluated policy on the hub base (the config check
    # refuses one that reads the tiny results/policy/sft, which a hub run never builds)
    on_hub = {name: {key: "results/policy/hub" for key in ("path", "base")
                     if getattr(p, key) == "results/policy/sft"}
              for name, p in PARAMS.evaluation.policies.items()}
    hub.run(config_mod.merged(PARAMS, {"policy": {"base": base}, "evaluation": {"policies": on_hub}}),
            argparse.Namespace(out=str(out), manifest=None, threads=2))

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "policy.hub"
    assert manifest["notes"]["repo_id"] == "org/tiny-agent" and manifest["notes"]["revision"] == COMMIT
    assert {o["path"].rpartition("/")[2]: o["sha256"] for o in manifest["outputs"]} == \
        {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_dir.iterdir()}
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(loaded.model.embed_tokens.weight, lm.model.embed_tokens.weight)
    assert not any(b"hf_secret" in p.read_bytes() for p in out.rglob("*") if p.is_file())
    with pytest.raises(SystemExit, match="policy.base.source: hub"):
        hub.run(config_mod.merged(PARAMS, {"policy": {"base": {"source": "sft"}}}),
                argparse.Namespace(out=str(tmp_path / "x"), manifest=None, threads=2))


@pytest.mark.parametrize("revision", ["main", "v1.0", COMMIT[:12], COMMIT.upper(), None])
def test_hub_rejects_non_commit_revisions(revision):
    with pytest.raises(hub.RevisionError, match="commit") as info:
        hub.resolve_base_model("Kwai-Klear/Klear-AgentForge-8B-SFT", revision)
    assert "huggingface.co/Kwai-Klear/Klear-AgentForge-8B-SFT/commits" in str(info.value)
    assert hub.check_revision("org/x", COMMIT) == COMMIT


# -- the policy-init stage ------------------------------------------------------------------

def test_repeat_batch_repeats_the_span_and_labels_only_the_repeat():
    x, y = copy_pretrain.repeat_batch(random.Random(0), list(range(10, 60)), 1, batch=8, prefix=[2, 5], span=[3, 6])
    assert x.shape == y.shape and x.shape[0] == 8
    for row, lab in zip(x.tolist(), y.tolist()):
        sep = row.index(1)
        labelled = [i for i, v in enumerate(lab) if v != -100]
        span = row[labelled[0]:labelled[-1] + 1]
        assert labelled == list(range(sep + 1, sep + 1 + len(span))) and 3 <= len(span) <= 6
        assert row[sep - len(span):sep] == span and [lab[i] for i in labelled] == span


def test_recall_sequences_label_only_what_an_earlier_stretch_predicts():
    x, y = copy_pretrain.recall_batch(random.Random(0), list(range(10, 500)), batch=6, length=80, gap=[2, 5],
                                      span=[3, 6])
    assert x.shape == y.shape == (6, 80)
    for row, lab in zip(x.tolist(), y.tolist()):
        labelled = [i for i, v in enumerate(lab) if v != -100]
        assert labelled and all(lab[i] == row[i] for i in labelled)
        # every labelled id follows, earlier in the row, the id that precedes it here
        for i in labelled:
            assert any(row[j] == row[i - 1] and row[j + 1] == row[i] for j in range(i - 1))
    # the match phase's batches: each row uses at most `pool` distinct ids
    x, _ = copy_pretrain.recall_batch(random.Random(1), list(range(10, 500)), 6, 80, [2, 5], [3, 6], pool=7)
    assert all(len(set(row)) <= 7 for row in x.tolist()) and len({tuple(sorted(set(r))) for r in x.tolist()}) > 1


def test_copy_loss_runs_the_head_on_labelled_positions_only_and_equals_the_full_loss():
    config = tiny.tiny_qwen3_config(64, hidden_size=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                                    max_position_embeddings=128)
    model = tiny.init_tiny_qwen3(config, 5)
    x, y = copy_pretrain.recall_batch(random.Random(1), list(range(2, 64)), 4, 40, [2, 6], [3, 6])
    loss, acc = copy_pretrain.copy_loss(model, x, y)
    logits = model(input_ids=x).logits[:, :-1]
    full = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), y[:, 1:].reshape(-1), ignore_index=-100)
    mask = y[:, 1:] != -100
    assert torch.allclose(loss, full, atol=1e-5)
    assert acc == float((logits.argmax(-1)[mask] == y[:, 1:][mask]).float().mean())
    loss.backward()  # the head's gradient flows through the selected positions
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


def test_copy_pretraining_teaches_a_tiny_model_to_find_and_copy_unseen_sequences():
    """Both phases on a 2-layer model (64 ids): before, next-id accuracy on recurring stretches
    (random distances) is chance (~1/62); after the repeat phase (ended early once 70% of a
    curve point's ids are copied) and 200 recall steps it copies most."""
    config = tiny.tiny_qwen3_config(64, hidden_size=64, layers=2, heads=2, kv_heads=1, head_dim=32,
                                    max_position_embeddings=128)
    model = tiny.init_tiny_qwen3(config, 3)
    ids = list(range(2, 64))
    cfg = config_mod.merged(PARAMS.policy.init.copy, {
        "repeat": {"steps": 900, "until_accuracy": 0.7, "batch": 32, "prefix": [2, 6], "span": [4, 8]},
        "recall": {"steps": 200, "batch": 16, "length": 48, "gap": [2, 8], "span": [4, 8]},
        "match": {"steps": 0}, "log_every": 100})

    def held_out_accuracy():
        x, y = copy_pretrain.recall_batch(random.Random("held out"), ids, 32, 48, [2, 8], [4, 8])
        with torch.no_grad():
            return copy_pretrain.copy_loss(model, x, y)[1]

    before = held_out_accuracy()
    curve, _ = copy_pretrain.pretrain(model, ids, 1, cfg, seed=0, progress=False)
    after = held_out_accuracy()
    assert before < 0.05 and after > 0.7, (before, after)
    repeat = [c for c in curve if c["phase"] == "repeat"]
    assert repeat[-1]["copy_accuracy"] >= 0.7 > max(c["copy_accuracy"] for c in repeat[:-1])
    assert repeat[-1]["step"] < 900 and curve[-1] == {**curve[-1], "phase": "recall", "step": repeat[-1]["step"] + 200}
    again = tiny.init_tiny_qwen3(config, 3)
    assert copy_pretrain.pretrain(again, ids, 1, cfg, seed=0, progress=False)[0] == curve  # deterministic
    with pytest.raises(ValueError, match="a stretch of"):
        copy_pretrain.pretrain(again, ids, 1, cfg, seed=0, progress=False, phases=("repeat", "match"))


def test_policy_init_stage_writes_loadable_deterministic_folder(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = config_mod.merged(PARAMS, {
        "seed": 1234, "repos": {"root": str(ROOT / "data" / "repos"), "sft": ["tinycsv"]},
        "policy": {"init": {
            "tokenizer": {"vocab_size": 640, "min_frequency": 2, "stdlib_max_bytes": 100_000,
                          "max_file_bytes": 20_000, "model_max_length": 512, "split": "qwen"},
            "model": {"hidden_size": 32, "layers": 2, "heads": 4, "kv_heads": 2,
                      "head_dim": 8, "intermediate": 64, "max_position_embeddings": 512,
                      "rope_theta": 1_000_000, "embedding_std": 0.05},
            "copy": {"repeat": {"steps": 3, "batch": 4, "until_accuracy": None},
                     "recall": {"steps": 3, "batch": 2, "length": 32},
                     "match": {"steps": 3, "batch": 2, "length": 32, "pool": 8}, "log_every": 3}}}})
    def init(name, phases=copy_pretrain.PHASES, resume=None, threads=2, config=cfg, tokenizer=None,
             tokenizer_only=False):
        init_stage.run(config, argparse.Namespace(
            out=str(tmp_path / name), manifest=None, threads=threads, phases=list(phases),
            resume=resume and str(tmp_path / resume), tokenizer=tokenizer and str(tmp_path / tokenizer),
            tokenizer_only=tokenizer_only))
        return _files(tmp_path / name)

    a, b = init("a"), init("b")
    assert set(a) >= {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                      "chat_template.jinja", "generation_config.json", "manifest.json",
                      "copy_curve.json", "copy_curve.png"}
    assert {k: v for k, v in a.items() if k != "manifest.json"} == \
        {k: v for k, v in b.items() if k != "manifest.json"}
    manifest = json.loads(a["manifest.json"])
    assert manifest["stage"] == "policy.init" and manifest["seeds"]["model_init"] == stage_seed(1234, "policy.init")
    assert manifest["notes"]["vocab_size"] == 640 and manifest["notes"]["lora_target_count"] == 14
    assert [(c["phase"], c["step"]) for c in json.loads(a["copy_curve.json"])] == \
        [("repeat", 3), ("recall", 6), ("match", 9)]
    assert manifest["notes"]["copy_pretraining"]["steps"] == 9 and "copy_pretrain" in manifest["timings"]
    assert {o["path"].rpartition("/")[2] for o in manifest["outputs"]} == set(a) - {"manifest.json"}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert model.num_parameters() == manifest["notes"]["parameters"]["total"]
    assert json.loads(a["generation_config.json"])["eos_token_id"] == [2, 0]
    loaded = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert chat.render(loaded, [{"role": "user", "content": "hi"}]).endswith("<|im_start|>assistant\n")
    assert json.loads(a["tokenizer_config.json"])["tokenizer_class"] == "PreTrainedTokenizerFast"

    # the workflow's three jobs (the tokenizer alone; the model and the repeat phase on one thread;
    # recall and match, resumed, on two) write the folder the one job writes, byte for byte
    tok = init("tok", tokenizer_only=True)
    assert set(tok) == {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "manifest.json"}
    assert all(tok[k] == a[k] for k in tok if k != "manifest.json")
    assert json.loads(tok["manifest.json"])["notes"]["corpus"] == manifest["notes"]["corpus"]
    first = init("repeat", phases=["repeat"], threads=1, tokenizer="tok")
    assert "copy_state.pt" in first and "copy_state.pt" not in a
    assert json.loads(first["manifest.json"])["notes"]["corpus"] == manifest["notes"]["corpus"]
    assert json.loads(first["manifest.json"])["notes"]["copy_phases_left"] == ["recall", "match"]
    # its manifest names the params that made it, not the later phases' (the next job's to record)
    made_with = json.loads(first["manifest.json"])["params"]
    assert set(made_with) == {"tokenizer", "model", "copy", "threads"} and made_with["copy"]["repeat"]["steps"] == 3
    assert not {"recall", "match", "threads"} & set(made_with["copy"])
    resumed = init("init", phases=["recall", "match"], resume="repeat")
    assert {k: v for k, v in resumed.items() if k != "manifest.json"} == \
        {k: v for k, v in a.items() if k != "manifest.json"}
    assert json.loads(resumed["manifest.json"])["notes"]["corpus"] == manifest["notes"]["corpus"]
    # a folder made with another model, or none at all, is refused before any work
    other = config_mod.merged(cfg, {"policy": {"init": {"model": {"embedding_std": 0.1}}}})
    with pytest.raises(SystemExit, match="other policy.init params"):
        init("x", phases=["recall", "match"], resume="repeat", config=other)
    with pytest.raises(SystemExit, match="copy_state.pt"):
        init("y", phases=["recall", "match"], resume="a")
    # a tokenizer trained with other params, or a folder that holds none, likewise
    small = config_mod.merged(cfg, {"policy": {"init": {"tokenizer": {"vocab_size": 600}}}})
    with pytest.raises(SystemExit, match="other policy.init.tokenizer params"):
        init("z", phases=["repeat"], tokenizer="tok", config=small)
    with pytest.raises(SystemExit, match="--tokenizer-only"):
        init("w", phases=["repeat"], tokenizer="nothing-here")
