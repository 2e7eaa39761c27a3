"""The SFT stage: conversation tokens and masks, synthetic trajectories (checked against the real
tools in the process sandbox), batching, the masked loss, the schedule, training (the loss goes
down, two runs give identical weights) and the stage end to end on a tiny model."""
from __future__ import annotations

import argparse
import json
import random

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline import config  # noqa: E402
from forgeline.agent.episode import run_episode  # noqa: E402
from forgeline.agent.oracle import ScriptedEngine, oracle_episode  # noqa: E402
from forgeline.agent.oracle_script import REVERTED, apply_hunks, oracle_texts, parse_patch  # noqa: E402
from forgeline.agent.tools import tool_schemas  # noqa: E402
from forgeline.policy import model as tiny  # noqa: E402
from forgeline.policy.chat import render_ids  # noqa: E402
from forgeline.sandbox.process import ProcessSandbox  # noqa: E402
from forgeline.tasks.mutations import apply_mutation, enumerate_mutation_sites  # noqa: E402
from forgeline.tasks.generate import make_patch  # noqa: E402
from forgeline.tasks.repos import RepoSnapshot  # noqa: E402
from forgeline.train import sft, synthetic  # noqa: E402

from embedded import PARAMS  # noqa: E402
from tiny_models import direct_python, tiny_lm, tok  # noqa: E402
from tiny_project import TINY_REPOS, write_repo  # noqa: E402

__all__ = ["direct_python", "tok"]  # fixtures from tiny_models: pytest finds them by these names

torch.set_num_threads(1)
TOOLS = tool_schemas(PARAMS.agent.tools)
# replayed scripts: room for long turns and many steps, the ids check, the oracle's fix right after its grep
AGENT = config.merged(PARAMS.agent, {"max_new_tokens": 256, "context_limit": 4096, "max_steps": 30,
                                     "command_timeout_s": 30, "temperature": 1.0, "alignment": "ids",
                                     "oracle": {"max_lines": 30, "max_guesses": 0}})
SUBMIT = oracle_texts([("submit", {})])[0]
PATH = "alpha/__init__.py"
CLEAN = TINY_REPOS["alpha"][0]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("repos")
    for name in ("alpha", "beta"):
        write_repo(root, name, *TINY_REPOS[name])
    return root


def assert_same_but_test_counts(real: list[dict], synth: list[dict]) -> None:
    """The replayed conversation is the synthetic one, but for the passing test run's counts
    (that output is synthesised: there is no suite behind a synthetic conversation)."""
    assert [m["role"] for m in real] == [m["role"] for m in synth]
    for a, b in zip(real, synth):
        if a["content"] != b["content"]:
            assert a["role"] == "tool" and a["content"].startswith("exit code: 0\n") \
                and b["content"].startswith("exit code: 0\n") and " passed" in a["content"]


def _site(kind="op_swap"):
    return next(s for s in enumerate_mutation_sites(CLEAN, [kind], PATH) if s.function == "add")


def test_conversation_tokens_equal_the_rendering_and_mask_only_assistant_turns(tok):
    msgs = synthetic.synthetic_messages(CLEAN, PATH, _site())
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                         "assistant", "tool", "assistant"]
    assert msgs[-1]["content"] == SUBMIT and msgs[-2]["content"].startswith("exit code: 0\n")
    tokens, mask = sft.conversation_tokens(tok, msgs, TOOLS)
    assert tokens == render_ids(tok, msgs, TOOLS, add_generation_prompt=False)
    # the masked tokens are exactly the assistant contents, each closed by <|im_end|>
    runs, cur = [], []
    for t, m in zip(tokens, mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    texts = [tok.decode(r, skip_special_tokens=False) for r in runs]
    assert texts == [m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"]


def _tokens_turn_by_turn(tok, msgs, tools):
    """conversation_tokens as written before it found the turns in one rendering: each
    assistant turn's prompt rendered on its own."""
    from forgeline.policy.chat import render

    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    enc = lambda text: tok.encode(text, add_special_tokens=False) if text else []  # noqa: E731
    tokens, mask, pos = [], [], 0
    for k, msg in enumerate(msgs):
        if msg["role"] == "assistant":
            prompt = render(tok, msgs[:k], tools, add_generation_prompt=True)
            part, action = enc(prompt[pos:]), enc(msg["content"]) + [im_end]
            tokens += part + action
            mask += [0] * len(part) + [int(msg.get("train", True))] * len(action)
            pos = len(prompt) + len(msg["content"]) + len("<|im_end|>")
    tail = enc(render(tok, msgs, tools, add_generation_prompt=False)[pos:])
    return tokens + tail, mask + [0] * len(tail)


def test_conversation_tokens_are_the_turn_by_turn_ones_for_any_template(tok):
    """Found in one rendering or, where the template rewrites earlier turns (here: an
    assistant turn that is not the last gets a mark, as Qwen3's drops earlier reasoning),
    rendered turn by turn: the tokens and mask of rendering each turn's prompt alone."""
    import copy

    msgs = synthetic.synthetic_messages(CLEAN, PATH, _site())
    msgs[4] = {**msgs[4], "train": False}
    assert sft.conversation_tokens(tok, msgs, TOOLS) == _tokens_turn_by_turn(tok, msgs, TOOLS)
    marking = copy.deepcopy(tok)
    marking.chat_template = tok.chat_template.replace(
        "{{- '<|im_end|>\\n' }}\n    {%- elif message.role == 'tool' %}",
        "{{- '' if loop.last else ' (seen)' }}{{- '<|im_end|>\\n' }}\n    {%- elif message.role == 'tool' %}")
    assert marking.chat_template != tok.chat_template
    assert " (seen)<|im_end|>" in sft.render(marking, msgs, TOOLS, add_generation_prompt=False)
    assert sft.conversation_tokens(marking, msgs, TOOLS) == _tokens_turn_by_turn(marking, msgs, TOOLS)


def test_synthetic_conversation_is_what_the_real_tools_answer(tok, repos):
    """Replay the synthetic assistant turns through the agent in the process sandbox: the real
    tool outputs equal the synthesised ones, and the edit fixes the bug."""
    for kind in ("op_swap", "cmp_boundary"):
        site = next(s for s in enumerate_mutation_sites(CLEAN, [kind], PATH))
        msgs = synthetic.synthetic_messages(CLEAN, PATH, site)
        assert msgs is not None
        buggy = apply_mutation(CLEAN, site)
        task = {"instance_id": f"alpha.syn.{kind}", "repo": "alpha", "patch": make_patch(PATH, CLEAN, buggy),
                "FAIL_TO_PASS": [], "PASS_TO_PASS": ["tests/test_alpha.py::test_add"],
                "problem_statement": msgs[1]["content"], "image_name": "x"}
        texts = [m["content"] for m in msgs if m["role"] == "assistant"]
        engine = ScriptedEngine(tok, lambda prompt, turn: texts[min(turn, len(texts) - 1)])
        rec = run_episode(task, 0, engine, ProcessSandbox(), AGENT,
                          env=RepoSnapshot.load(repos, "alpha").env(), tokenizer=tok)
        assert_same_but_test_counts(rec["messages"], msgs)
        assert rec["exit_status"] == "submitted"
        fix = parse_patch(rec["submission"])[PATH]  # the agent's diff turns the bug back into CLEAN
        assert apply_hunks(buggy, fix) == CLEAN
        tokens, mask = sft.conversation_tokens(tok, msgs, TOOLS)
        assert len(tokens) == len(mask) and sum(mask) == sum(rec["action_mask"])


def test_synthetic_scan_is_what_the_real_tools_do(tok, repos):
    """A conversation that scans to its fix, replayed in the process sandbox: each wrong edit
    applies and really breaks the suite, the test call's `git checkout .` really takes it back
    (the synthesised run says so too), and the final diff is the fix alone."""
    clean, path = TINY_REPOS["beta"][0], "beta/__init__.py"  # a suite that every wrong edit breaks
    site = next(s for s in enumerate_mutation_sites(clean, ["cmp_boundary"], path) if s.function == "count_above")
    msgs = synthetic.synthetic_messages(clean, path, site, max_guesses=12)
    calls = [m["content"] for m in msgs if m["role"] == "assistant"]
    n = (len(calls) - 2) // 2 - 1  # wrong edits before the fix
    assert n >= 2 and len(calls) == 1 + 2 * (n + 1) + 1 and calls.count(calls[2]) == n + 1
    assert synthetic.synthetic_messages(clean, path, site, max_guesses=n - 1) is None
    buggy = apply_mutation(clean, site)
    task = {"instance_id": "beta.syn.scan", "repo": "beta", "patch": make_patch(path, clean, buggy),
            "FAIL_TO_PASS": [], "PASS_TO_PASS": [], "problem_statement": msgs[1]["content"], "image_name": "x"}
    engine = ScriptedEngine(tok, lambda prompt, turn: calls[min(turn, len(calls) - 1)])
    rec = run_episode(task, 0, engine, ProcessSandbox(), config.merged(AGENT, {"max_steps": len(calls)}),
                      env=RepoSnapshot.load(repos, "beta").env(), tokenizer=tok)
    real = [m["content"] for m in rec["messages"] if m["role"] == "tool"]
    synth = [m["content"] for m in msgs if m["role"] == "tool"]
    assert len(real) == len(synth)
    for k, (a, b) in enumerate(zip(real, synth)):
        if k % 2 == 0 and 0 < k < len(real) - 1:  # the wrong edits' test runs: failing, taken back
            for out in (a, b):
                assert out.startswith("exit code: 0\n") and " failed" in out and out.rstrip().endswith(REVERTED)
        elif k == len(real) - 1:  # the fix's: passing, nothing taken back
            assert a.startswith("exit code: 0") and " passed" in a and " failed" not in a and REVERTED not in a
            assert b.startswith("exit code: 0") and " failed" not in b and REVERTED not in b
        else:
            assert a == b
    assert rec["exit_status"] == "submitted"
    assert apply_hunks(buggy, parse_patch(rec["submission"])[path]) == clean


def test_recovery_shows_a_broken_call_and_the_agents_answer_untrained(tok, repos):
    """The broken or failed call and its answer are what the agent loop and the edit tool
    really do with such a turn; the bad turn is context only (mask 0), the call after it is
    trained."""
    msgs = synthetic.synthetic_messages(CLEAN, PATH, _site())
    answer = lambda k: next(m for i, m in enumerate(recovered(k)) if i and recovered(k)[i - 1].get("train") is False)
    recovered = lambda k: synthetic.with_recovery(msgs, TOOLS, random.Random(k))
    # seeds whose bad turn is a malformed call, an edit of a miscopied file, an edit of a miscopied old
    kinds = ("Tool call error", "edit failed: cannot read", "edit failed: no line of")
    seeds = [next(k for k in range(200) if answer(k)["content"].startswith(kind)) for kind in kinds]
    answers = []
    for k in seeds:
        rec_msgs = synthetic.with_recovery(msgs, TOOLS, random.Random(k))
        bad = [m for m in rec_msgs if m.get("train") is False]
        assert len(bad) == 1 and len(rec_msgs) == len(msgs) + 2
        i = rec_msgs.index(bad[0])
        assert rec_msgs[i + 2] in msgs and rec_msgs[i + 2]["role"] == "assistant"
        texts = [m["content"] for m in rec_msgs if m["role"] == "assistant"]
        buggy = apply_mutation(CLEAN, _site())
        task = {"instance_id": "alpha.syn.recovery", "repo": "alpha", "patch": make_patch(PATH, CLEAN, buggy),
                "FAIL_TO_PASS": [], "PASS_TO_PASS": [], "problem_statement": msgs[1]["content"], "image_name": "x"}
        engine = ScriptedEngine(tok, lambda prompt, turn: texts[min(turn, len(texts) - 1)])
        rec = run_episode(task, 0, engine, ProcessSandbox(), AGENT,
                          env=RepoSnapshot.load(repos, "alpha").env(), tokenizer=tok)
        assert_same_but_test_counts(rec["messages"], [{k: v for k, v in m.items() if k != "train"} for m in rec_msgs])
        assert rec["outcome"] == "resolved"
        answers.append(rec_msgs[i + 1]["content"])
        tokens, mask = sft.conversation_tokens(tok, rec_msgs, TOOLS)
        trained = tok.decode([t for t, m in zip(tokens, mask) if m], skip_special_tokens=False)
        assert bad[0]["content"] not in trained and all(t in trained for t in texts if t != bad[0]["content"])
    # the real agent loop and edit tool answered each as the conversation says (checked above)
    assert [a[:len(kind)] for a, kind in zip(answers, kinds)] == list(kinds)


def test_masked_loss_ignores_non_action_tokens():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 9))
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 0, 0], [0, 1, 1, 0, 0, 0, 0, 0, 0]])
    logits = torch.randn(2, 9, 50)
    loss, n = sft.masked_lm_loss(logits, ids, mask)
    assert n == 5
    ref = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1),
                                            reduction="none").reshape(2, 8)
    assert torch.allclose(loss, ref[mask[:, 1:].bool()].mean())
    # logits that predict non-action targets do not matter
    other = logits.clone()
    other[0, 0, ids[0, 1]] += 100.0  # predicts ids[0,1]: mask 0
    other[0, 4, ids[0, 5]] -= 50.0   # predicts ids[0,5]: mask 0
    other[1, 8, 3] += 9.0            # the last position predicts nothing
    assert torch.equal(sft.masked_lm_loss(other, ids, mask)[0], loss)
    other[0, 1, ids[0, 2]] += 1.0    # predicts ids[0,2]: mask 1
    assert not torch.equal(sft.masked_lm_loss(other, ids, mask)[0], loss)


def test_action_loss_equals_the_masked_loss_of_the_full_logits():
    torch.manual_seed(0)
    cfg = tiny.tiny_qwen3_config(60, hidden_size=16, layers=1, heads=2, kv_heads=1, head_dim=8)
    model = tiny.init_tiny_qwen3(cfg, 0)
    ids = torch.randint(0, 60, (2, 9))
    ids[1, 6:] = 0  # right padding: action_loss runs without the attention mask
    att = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 0, 0], [0, 1, 1, 0, 1, 0, 0, 0, 0]])
    full, n = sft.masked_lm_loss(model(input_ids=ids, attention_mask=att).logits, ids, mask)
    part, m = sft.action_loss(model, ids, mask)
    assert n == m == 6 and torch.allclose(full, part, atol=1e-6)


def test_collate_and_truncate():
    ex = [{"tokens": [5, 6, 7], "mask": [0, 1, 1]}, {"tokens": [8], "mask": [1]}]
    ids, lm = sft.collate(ex, pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert lm.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert sft.truncate_example({"tokens": [1, 2, 3, 4], "mask": [0, 0, 1, 1]}, 3)["tokens"] == [1, 2, 3]
    assert sft.truncate_example({"tokens": [1, 2, 3, 4], "mask": [0, 0, 1, 1]}, 2) is None


def test_make_batches_budget_cover_and_determinism():
    lengths = [100, 900, 300, 300, 50, 2000, 120, 700]
    b = sft.make_batches(lengths, 1000, seed=3, epoch=0)
    assert sorted(i for batch in b for i in batch) == list(range(len(lengths)))
    for batch in b:
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= 1000
    assert b == sft.make_batches(lengths, 1000, seed=3, epoch=0)
    assert b != sft.make_batches(lengths, 1000, seed=3, epoch=1)


def test_make_batches_sort_window_pads_less_and_keeps_every_example():
    rng = random.Random(0)
    lengths = [rng.randint(1200, 3072) for _ in range(400)]

    def padded(batches):
        return sum(len(b) * max(lengths[i] for i in b) for b in batches)

    shuffled = sft.make_batches(lengths, 6144, seed=1, epoch=0)
    sorted_ = sft.make_batches(lengths, 6144, seed=1, epoch=0, sort_window=64)
    assert sorted(i for b in sorted_ for i in b) == list(range(len(lengths)))
    for batch in sorted_:
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= 6144
    # similar lengths in a batch: fewer padded tokens per example than packed as shuffled
    assert padded(sorted_) / len(lengths) < 0.95 * padded(shuffled) / len(lengths)
    # the batches' order is shuffled too (not shortest first within each window), seeded
    firsts = [max(lengths[i] for i in b) for b in sorted_[:12]]
    assert firsts != sorted(firsts)
    assert sorted_ == sft.make_batches(lengths, 6144, seed=1, epoch=0, sort_window=64)
    assert sorted_ != sft.make_batches(lengths, 6144, seed=1, epoch=1, sort_window=64)


def test_lr_schedule():
    assert sft.lr_at(0, 100, 10, 1.0, 0.1) == pytest.approx(0.1)
    assert sft.lr_at(9, 100, 10, 1.0, 0.1) == pytest.approx(1.0)
    assert sft.lr_at(10, 100, 10, 1.0, 0.1) == pytest.approx(1.0)
    assert sft.lr_at(100, 100, 10, 1.0, 0.1) == pytest.approx(0.1)
    assert sft.lr_at(55, 100, 10, 1.0, 0.0, "linear") == pytest.approx(0.5)
    with pytest.raises(config.ConfigError, match="schedule: 'step' is not one of"):
        config.merged(PARAMS.train.sft, {"schedule": "step"})
    with pytest.raises(config.ConfigError, match="unknown key 'bogus'"):
        config.merged(PARAMS.train.sft, {"bogus": 1})


def test_renamed_conversation_is_what_the_real_tools_answer_in_the_renamed_repository(tok, tmp_path):
    """Fresh names for the function and its folder, applied to the conversation and to the
    repository alike: the real tools answer the renamed turns with the renamed outputs, and no
    old name is left for a model to memorise."""
    import random

    site = next(s for s in enumerate_mutation_sites(CLEAN, ["op_swap"], PATH) if s.function == "add")
    msgs = synthetic.synthetic_messages(CLEAN, PATH, site)
    words = synthetic.identifier_words([(PATH, CLEAN), ("x.py", "total_count = item_price + unit_value")])
    mapping = synthetic.fresh_names(msgs, PATH, site.function, words, random.Random(3))
    assert set(mapping) == {"add", "alpha"}  # the module is __init__: it keeps its name
    renamed = synthetic.rename_identifiers(msgs, mapping)
    assert renamed[0] == msgs[0]
    body = "\n".join(m["content"] for m in renamed[1:])
    assert "alpha" not in body and "def add(" not in body and f"def {mapping['add']}(" in body

    def rename_text(text):
        return synthetic.rename_identifiers([{"role": "user", "content": text}], mapping)[0]["content"]

    source, tests = TINY_REPOS["alpha"]
    repo = tmp_path / "renamed"
    (repo / mapping["alpha"]).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / mapping["alpha"] / "__init__.py").write_text(rename_text(source))
    (repo / rename_text("tests/test_alpha.py")).write_text(rename_text(tests))
    path = f"{mapping['alpha']}/__init__.py"
    task = {"instance_id": "renamed.syn", "repo": "renamed",
            "patch": make_patch(path, rename_text(CLEAN), rename_text(apply_mutation(CLEAN, site))),
            "FAIL_TO_PASS": [rename_text("tests/test_alpha.py::test_add")], "PASS_TO_PASS": [],
            "problem_statement": renamed[1]["content"], "image_name": "x"}
    texts = [m["content"] for m in renamed if m["role"] == "assistant"]
    engine = ScriptedEngine(tok, lambda prompt, turn: texts[min(turn, len(texts) - 1)])
    rec = run_episode(task, 0, engine, ProcessSandbox(), AGENT,
                      env=RepoSnapshot.load(tmp_path, "renamed").env(), tokenizer=tok)
    assert_same_but_test_counts(rec["messages"], renamed)
    assert rec["outcome"] == "resolved"


def test_rename_share_is_deterministic_and_marks_the_ids():
    files = [(f"{n}/__init__.py", TINY_REPOS[n][0]) for n in ("alpha", "beta", "gamma")]
    kinds = ("op_swap", "cmp_boundary", "const_change")
    conv = synthetic.synthetic_conversations(files, 6, seed=5, kinds=kinds, per_file=2, rename=1.0)
    assert conv == synthetic.synthetic_conversations(files, 6, seed=5, kinds=kinds, per_file=2, rename=1.0)
    # made by two processes: the same conversations, cut at the same one
    for n in (6, 3):
        assert synthetic.synthetic_conversations(files, n, seed=5, kinds=kinds, per_file=2, rename=1.0,
                                                 workers=2) == conv[:n]
    assert conv and all(i.endswith(":renamed") for i, _ in conv)
    plain = synthetic.synthetic_conversations(files, 6, seed=5, kinds=kinds, per_file=2)
    assert [i + ":renamed" for i, _ in plain] == [i for i, _ in conv]
    for (_, a), (_, b) in zip(plain, conv):
        assert a[2]["content"] != b[2]["content"]  # the grep names the fresh function and folder


def test_synthetic_statement_names_the_function_in_the_title_and_often_calls_another():
    """Like a generated issue: the title names the function to look at; the body shows the
    call a test makes, which is often another function of the module."""
    callers = ["load_rows", "parse_line", "write_table"]
    texts = [synthetic.synthetic_statement("`pkg.mod.fix_me`", "fix_me", "pkg.mod", random.Random(i), callers)
             for i in range(40)]
    assert all("`pkg.mod.fix_me`" in t.split("\n\n")[0] for t in texts)
    bodies = [t.split("\n\n")[1] for t in texts]
    other = sum(any(f"{c}(" in b for c in callers) for b in bodies)
    assert 10 < other < 35 and sum("fix_me(" in b for b in bodies) == 40 - other
    assert texts == [synthetic.synthetic_statement("`pkg.mod.fix_me`", "fix_me", "pkg.mod", random.Random(i), callers)
                     for i in range(40)]


def test_check_sft_repos_refuses_pool_tasks():
    sft.check_sft_repos([{"repo": "tinycsv", "instance_id": "a"}], ["tinycsv"], ["ledgerkit"])
    with pytest.raises(ValueError, match="not an SFT repository"):
        sft.check_sft_repos([{"repo": "ledgerkit", "instance_id": "b"}], ["tinycsv"], ["ledgerkit"])
    with pytest.raises(AssertionError):
        sft.check_sft_repos([], ["ledgerkit"], ["ledgerkit"])


@pytest.fixture(scope="module")
def examples(tok):
    files = [(f"{n}/__init__.py", TINY_REPOS[n][0]) for n in ("alpha", "beta", "gamma")]
    kinds = ("op_swap", "cmp_boundary", "const_change")
    conv = synthetic.synthetic_conversations(files, 3, seed=5, kinds=kinds, per_file=2)
    assert len(conv) == 3 and conv == synthetic.synthetic_conversations(files, 3, seed=5, kinds=kinds, per_file=2)
    # rendered without the tool schemas (~700 tokens with this 512-token vocabulary): cheaper
    return [dict(zip(("tokens", "mask"), sft.conversation_tokens(tok, m, [])), id=i) for i, m in conv]


def test_training_lowers_the_loss_and_is_deterministic(tok, examples):
    cfg = config.merged(PARAMS.train.sft, {"epochs": 1, "max_steps": 4, "tokens_per_batch": 100000, "lr": 5e-3,
                                           "warmup_steps": 2})
    states, curves = [], []
    for _ in range(2):
        lm = tiny_lm(tok, max_position_embeddings=4096)
        curves.append(sft.train(lm, examples[:2], cfg, seed=9, pad_id=tok.pad_token_id, progress=False))
        states.append({k: v.clone() for k, v in lm.state_dict().items()})
    curve = curves[0]
    assert len(curve) == 4 and all(c["examples"] == 2 for c in curve)  # one fixed batch
    assert curve[-1]["loss"] < curve[0]["loss"] - 0.3
    assert curves[0] == curves[1]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_bfloat16_autocast_computes_in_bfloat16_and_keeps_float32_weights(tok, examples):
    """`train.sft.autocast`: the same steps with the dot products in bfloat16 start from the
    float32 loss to within bfloat16's rounding, still learn, and leave float32 weights; the
    curves differ, so the setting reaches the arithmetic."""
    from forgeline.policy.model import autocast

    with autocast("bfloat16"):
        assert torch.nn.Linear(4, 4)(torch.ones(1, 4)).dtype == torch.bfloat16
    with autocast(None):
        assert torch.nn.Linear(4, 4)(torch.ones(1, 4)).dtype == torch.float32
    curves = {}
    for dtype in (None, "bfloat16"):
        cfg = config.merged(PARAMS.train.sft, {"epochs": 1, "max_steps": 4, "tokens_per_batch": 100000,
                                               "lr": 5e-3, "warmup_steps": 2, "autocast": dtype})
        lm = tiny_lm(tok, max_position_embeddings=4096)
        curves[dtype] = sft.train(lm, examples[:2], cfg, seed=9, pad_id=tok.pad_token_id, progress=False)
        assert all(p.dtype == torch.float32 for p in lm.parameters())
    f32, bf16 = ([c["loss"] for c in curves[k]] for k in (None, "bfloat16"))
    assert f32 != bf16 and abs(f32[0] - bf16[0]) < 0.05 * f32[0]
    assert bf16[-1] < bf16[0] - 0.3


def test_stage_end_to_end(tok, repos, tmp_path):
    init = tmp_path / "init"
    tok.save_pretrained(init)
    tiny_lm(tok, max_position_embeddings=4096).save_pretrained(init)
    sb = ProcessSandbox()
    task = {"instance_id": "alpha.0.add", "repo": "alpha",
            "patch": make_patch(PATH, CLEAN, CLEAN.replace("return a + b", "return a - b")),
            "FAIL_TO_PASS": ["tests/test_alpha.py::test_add"], "PASS_TO_PASS": [],
            "problem_statement": "`alpha.add` returns a wrong result.", "image_name": "x",
            "mutation": {"file": PATH, "function": "add", "kind": "op_swap"}}
    rec = oracle_episode(task, sb, tok, AGENT, env=RepoSnapshot.load(repos, "alpha").env())
    assert rec["outcome"] == "resolved"
    oracle_file = tmp_path / "oracle.jsonl"
    oracle_file.write_text(json.dumps(rec) + "\n")
    cfg = config.merged(PARAMS, {
        "seed": 1, "repos": {"root": str(repos), "sft": ["alpha"], "pool": ["beta"], "panel": []},
        "train": {"sft": {"max_steps": 2, "max_seq_len": 4096, "tokens_per_batch": 2048, "threads": 1,
                          "synthetic": {"examples": 2, "stdlib": False, "kinds": ["cmp_boundary"]}}}})
    out = tmp_path / "policy"
    sft.run(cfg, argparse.Namespace(init=str(init), oracle=[str(oracle_file)], out=str(out), manifest=None))
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "loss_curve.json", "loss_curve.png", "manifest.json"} <= names
    man = json.loads((out / "manifest.json").read_text())
    assert man["notes"]["oracle_episodes"] == 1 and man["notes"]["synthetic_examples"] == 2
    assert man["notes"]["steps"] == 2 and len(json.loads((out / "loss_curve.json").read_text())) == 2
    from transformers import AutoModelForCausalLM
    AutoModelForCausalLM.from_pretrained(out)
    # a pool repository's episodes are refused
    rec["repo"] = "beta"
    oracle_file.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match="not an SFT repository"):
        sft.run(cfg, argparse.Namespace(init=str(init), oracle=[str(oracle_file)], out=str(tmp_path / "p2"),
                                        manifest=None))
