"""Publishing: the PPO adapter as a hub-ready folder whose card's numbers are the artifacts' (each
recomputed here), that PEFT's Auto class loads from any directory; and `forgeline publish`, which
checks each folder against its card and stops before touching the hub when it cannot reach it.

The inputs are built small and real: a tiny Qwen3 base, a LoRA adapter saved as the ppo stage
saves it (with a ppo manifest), a split, hand-made evaluation results run through the real
`tables` stage; the hub is never reached (its upload calls are replaced in the last step only).
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline import cli
from forgeline.evaluation.stats import mcnemar_exact_p
from forgeline.provenance import Manifest, sha256_file, write_json
from forgeline.publish import upload
from forgeline.publish.card import adapter_card, card_files
from forgeline.tasks.split import frozen_split_digest
from forgeline.publish import adapter as publish_stage
from forgeline.train import ppo_checkpoints, ppo_update
from forgeline.train.ppo import STAGE as PPO_STAGE

from embedded import PARAMS
from test_export import image, run_export, write_split
from tiny_models import tiny_lm, tok

__all__ = ["tok"]  # a fixture from tiny_models: pytest finds it by this name

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OUT = "results/publish/adapter"
TEST_WINS = 8  # panel test: ppo resolves 8 of 10 tasks the base never does (significant)
TRAIN_OUTCOMES = {"wins": 2, "losses": 1}  # panel train: a null result


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}


def write_params(project: Path, hub: dict | None = None) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["evaluation"]["panels"] = {"train": ["results/split/train.jsonl"], "test": ["results/split/test.jsonl"]}
    data["publish"]["card"] = {"license": "mit", "tags": ["forgeline", "tiny"]}
    data["publish"]["hub"].update(hub or {})
    path = project / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def eval_rows(policy: str, panel: str, outcomes: dict[tuple[str, int], bool]) -> list[dict]:
    return [{"policy": policy, "panel": panel, "instance_id": iid, "repo": iid.split("__")[-1].split(".")[0],
             "seed": seed, "resolved": ok, "outcome": "resolved" if ok else "failed", "steps": 3, "input_tokens": 900 + 10 * ok, "output_tokens": 10,
             "wall_s": 1.0, "config_digest": "c"} for (iid, seed), ok in sorted(outcomes.items())]


def hand_made_results(project: Path) -> dict[str, dict[str, dict]]:
    """{panel: {policy: {(instance_id, seed): resolved}}}: train (4 seeds per task) a null result,
    test (one seed, 10 tasks) a significant one."""
    train = [json.loads(x)["instance_id"] for x in (project / "results/split/train.jsonl").read_text().splitlines()]
    keys = [(iid, seed) for iid in train for seed in range(4)]
    base = {k: i % 3 == 0 for i, k in enumerate(keys)}
    ppo = dict(base)
    flips = [k for k in keys if not base[k]][:TRAIN_OUTCOMES["wins"]]
    ppo.update({k: True for k in flips})
    ppo.update({k: False for k in [k for k in keys if base[k]][:TRAIN_OUTCOMES["losses"]]})
    test = [(f"forgeline__t{i}.0a1b2c3d.op_swap__{i:08x}", 0) for i in range(10)]
    return {"train": {"base": base, "ppo": ppo},
            "test": {"base": {k: False for k in test}, "ppo": {k: i < TEST_WINS for i, k in enumerate(test)}}}


def build_run(project: Path, tok) -> None:
    """The artifacts publish-adapter reads, as the pipeline leaves them (cwd: the project)."""
    from transformers import AutoModelForCausalLM

    write_params(project)
    write_split(project / "results")
    policy = project / "results/policy/sft"
    tok.save_pretrained(policy)
    tiny_lm(tok).save_pretrained(policy)
    (policy / "loss_curve.json").write_text("[]\n")  # not a model file: not bundled
    actor = ppo_update.make_actor(AutoModelForCausalLM.from_pretrained("results/policy/sft"),
                                  PARAMS.train.ppo.lora, seed=1)
    with torch.no_grad():  # B = 0 would make the adapter a no-op: give it weights that show
        for name, param in actor.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(3)) * 0.5)
    adapter = project / "results/adapter"
    ppo_checkpoints.save_adapter(actor, adapter, ppo_checkpoints.base_reference("results/policy/sft",
                                                                              PARAMS.policy.base))
    (adapter / "train_log.jsonl").write_text('{"step": 1}\n')
    write_json(adapter / ppo_checkpoints.SUMMARY, ppo_checkpoints.checkpoint_summary(adapter, 3))
    outputs = sorted(p for p in adapter.iterdir() if p.is_file())
    Manifest(stage=PPO_STAGE, inputs=["results/policy/sft", "results/split/train.jsonl"], code="forgeline.train.ppo",
             notes={"steps": 3, "episodes": 12, "kept": 11}).write(adapter / "manifest.json", outputs=outputs)
    files = []
    for panel, by_policy in hand_made_results(project).items():
        for policy, outcomes in by_policy.items():
            path = project / f"results/eval/{panel}/{policy}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in eval_rows(policy, panel, outcomes)))
            files.append(str(path.relative_to(project)))
    assert cli.main(["tables", "--config", "params.yaml", "--results", *files,
                     "--out-dir", "results/eval/tables"]) == 0


def publish_adapter(*extra: str) -> int:
    return cli.main(["publish-adapter", "--config", "params.yaml", "--adapter", "results/adapter",
                     "--split-dir", "results/split", "--tables", "results/eval/tables/tables.json",
                     "--out", OUT, "--manifest", "results/publish/adapter.manifest.json", *extra])


@pytest.fixture(scope="module")
def project(tmp_path_factory, tok) -> Path:
    """A run's artifacts and its published adapter (results/publish/adapter)."""
    root = tmp_path_factory.mktemp("run")
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    try:
        build_run(root, tok)
        assert publish_adapter("--base", "results/policy/sft") == 0
    finally:
        mp.undo()
    return root


@pytest.fixture
def copy(project: Path, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the run to change, as the working directory."""
    dest = tmp_path / "copy"
    shutil.copytree(project, dest)
    shutil.rmtree(dest / OUT)
    monkeypatch.chdir(dest)
    return dest


# -- the adapter's folder and card ---------------------------------------------------------------

def test_card_parses_and_its_numbers_equal_the_artifacts(project: Path):
    from huggingface_hub import ModelCard
    from safetensors.torch import load_file

    folder, adapter = project / OUT, project / "results/adapter"
    card = ModelCard.load(folder / "README.md")
    text = card.content
    assert card.data.library_name == "peft" and card.data.license == "mit"
    assert card.data.tags == ["forgeline", "tiny"] and card.data.base_model is None  # bundled: no hub id

    config = json.loads((adapter / "adapter_config.json").read_text())
    assert f"| LoRA rank r | {config['r']} |" in text and f"| LoRA alpha | {config['lora_alpha']} |" in text
    weights = load_file(str(folder / "adapter_model.safetensors"))
    assert f"| tensors | {len(weights)} |" in text
    assert f"| tensor bytes (the weights' payload) | {sum(t.numel() * t.element_size() for t in weights.values())} |" in text
    assert f"| `adapter_model.safetensors` | {(folder / 'adapter_model.safetensors').stat().st_size} bytes |" in text
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in folder.rglob("*") if p.is_file() and p.name != "README.md"}
    assert card_files(text) == files  # every file, its bytes and sha256
    assert f"| this folder | {sum(f['bytes'] for f in files.values())} bytes in {len(files)} files" in text
    assert {"adapter_config.json", "adapter_model.safetensors", "checkpoint-summary.json", "base/config.json",
            "base/model.safetensors", "base/tokenizer.json"} <= set(files)
    assert "base/loss_curve.json" not in files and "manifest.json" not in files
    for name in ("adapter_model.safetensors", "checkpoint-summary.json"):
        assert sha256_file(folder / name) == sha256_file(adapter / name)  # byte for byte the run's

    split = {n: [json.loads(x) for x in (project / f"results/split/{n}.jsonl").read_text().splitlines()]
             for n in ("train", "val", "test")}
    assert frozen_split_digest(split) in text
    assert f"split `train`: {len(split['train'])} tasks" in text
    assert sha256_file(project / "results/split/train.jsonl") in text

    tables = json.loads((project / "results/eval/tables/tables.json").read_text())
    for panel, by_policy in hand_made_results(project).items():
        base, ppo = by_policy["base"], by_policy["ppo"]
        wins = sum(ppo[k] and not base[k] for k in base)
        losses = sum(base[k] and not ppo[k] for k in base)
        p = mcnemar_exact_p(wins, losses)
        row = next(line for line in text.splitlines() if line.startswith(f"| ppo | {sum(ppo.values())}/{len(ppo)} |"))
        assert f"| {wins} / {len(base) - wins - losses} / {losses} | {p:.4f} |" in row, row
        verdict = tables[panel]["comparisons"]["ppo_vs_base"]["verdict"]
        assert f"**Verdict:** {verdict}." in text  # the tables' sentence, exactly
    assert "no significant difference" in tables["train"]["comparisons"]["ppo_vs_base"]["verdict"]  # the null result
    assert tables["test"]["comparisons"]["ppo_vs_base"]["significant"]
    claims = text.split("## What this card does not claim", 1)[1].split("##", 1)[0]
    assert "on panel `train`: the paired test found no significant difference there" in claims
    assert "those are the tasks PPO trained on" in claims and "panel `test`: the paired" not in claims

    assert publish_stage.PPO_STAGE == PPO_STAGE  # the stage reads ppo's manifests by that name
    manifest = json.loads((project / "results/publish/adapter.manifest.json").read_text())
    assert manifest["stage"] == "publish-adapter" and manifest["outputs"][0]["path"] == OUT
    assert manifest["notes"]["verdicts"]["train"] == tables["train"]["comparisons"]["ppo_vs_base"]["verdict"]


def test_the_card_is_a_function_of_the_artifacts(project: Path, copy: Path):
    """Same inputs => the same folder, byte for byte, but adapter_config.json's absolute path of
    base/ (and so the card's lines for that file and the folder's bytes)."""
    assert publish_adapter("--base", "results/policy/sft") == 0
    for path in (project / OUT).rglob("*"):
        if path.is_file() and path.name not in ("adapter_config.json", "README.md"):
            assert sha256_file(path) == sha256_file(copy / OUT / path.relative_to(project / OUT)), path
    mine, theirs = (json.loads((p / OUT / "adapter_config.json").read_text()) for p in (copy, project))
    assert mine.pop("base_model_name_or_path") == str(copy / OUT / "base")
    assert theirs.pop("base_model_name_or_path") == str(project / OUT / "base")
    assert mine == theirs
    def card(root: Path) -> list[str]:
        return [line for line in (root / OUT / "README.md").read_text().splitlines()
                if "adapter_config.json` |" not in line and not line.startswith("| this folder |")]

    assert card(copy) == card(project)


def test_adapter_loads_with_peft_auto_classes_from_any_directory(project: Path, tmp_path: Path):
    """From another directory, offline: AutoPeftModelForCausalLM loads the folder (its base from
    base/); a copy elsewhere loads as the card says (PeftModel on base/); both give the logits of
    the run's adapter on the run's base."""
    elsewhere, moved = tmp_path / "elsewhere", tmp_path / "moved"
    elsewhere.mkdir()
    shutil.copytree(project / OUT, moved)
    code = ("import sys, torch\nfrom peft import AutoPeftModelForCausalLM, PeftModel\n"
            "from transformers import AutoModelForCausalLM\n"
            "folder, moved, run = sys.argv[1:]\n"
            "auto = AutoPeftModelForCausalLM.from_pretrained(folder)\n"
            "copy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(moved + '/base'), moved)\n"
            "ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run + '/results/policy/sft'),"
            " run + '/results/adapter')\n"
            "base = AutoModelForCausalLM.from_pretrained(run + '/results/policy/sft')\n"
            "ids = torch.tensor([[5, 17, 42, 99]])\n"
            "out = [m.eval()(ids).logits for m in (auto, copy, ref, base)]\n"
            "assert torch.allclose(out[0], out[2]) and torch.allclose(out[1], out[2])\n"
            "assert not torch.allclose(out[2], out[3])\n"
            "print('LOADED', auto.peft_config['default'].base_model_name_or_path)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(project / OUT), str(moved), str(project)],
                          cwd=elsewhere, capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0 and f"LOADED {project / OUT / 'base'}" in proc.stdout, proc.stderr[-3000:]


def test_a_base_other_than_the_one_ppo_trained_from_is_refused(copy: Path, capsys):
    config = copy / "results/policy/sft/config.json"
    config.write_text(config.read_text().replace("{", '{"edited": 1, ', 1))
    assert publish_adapter("--base", "results/policy/sft") == 2
    assert "is not the one the adapter trained from" in capsys.readouterr().err
    assert not (copy / OUT).exists()  # nothing written
    assert publish_adapter() == 2 and "names a local base: pass it with --base" in capsys.readouterr().err


def test_a_hub_base_is_named_by_its_pinned_commit(copy: Path):
    """A hub base (the real-scale config): adapter_config.json is the run's, byte for byte (the hub
    id and its revision), base_model in the card's metadata, nothing bundled."""
    from huggingface_hub import ModelCard

    path = copy / "results/adapter/adapter_config.json"
    config = json.loads(path.read_text())
    config.update(base_model_name_or_path="org/agent-8b", revision="a" * 40)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    assert publish_adapter() == 0
    assert sha256_file(copy / OUT / "adapter_config.json") == sha256_file(path)
    assert not (copy / OUT / "base").exists()
    card = ModelCard.load(copy / OUT / "README.md")
    assert card.data.base_model == "org/agent-8b" and card.data.library_name == "peft"
    assert f"`org/agent-8b` at its pinned commit `{'a' * 40}`" in card.text
    assert f'AutoTokenizer.from_pretrained("org/agent-8b", revision="{"a" * 40}")' in card.text


def test_card_states_a_null_result_on_every_panel():
    """The renderer on hand-made facts: with no significant panel, the card claims no effect."""
    comparison = {"wins": 3, "ties": 32, "losses": 3, "mcnemar_p": 1.0, "alpha": 0.05, "significant": False,
                  "verdict": "ppo vs base: no significant difference (p=1.00; 3 wins, 32 ties, 3 losses)"}
    row = {"n": 38, "resolved": 6, "success_rate": 6 / 38, "ci_low": 0.07, "ci_high": 0.3, "confidence": 0.95,
           "mean_input_tokens": 1000.0, "mean_steps": 4.0}
    facts = {"adapter": {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"],
                         "tensors": 4, "tensor_bytes": 1024, "weights_bytes": 2000, "steps": 12},
             "base": {"kind": "hub", "repo_id": "org/agent-8b", "revision": "b" * 40},
             "training": {"algorithm": "PPO", "split": "train", "tasks": 7, "repos": ["a", "b"], "episodes": 96,
                          "kept": 90, "split_digest": "d" * 64, "digest_scheme": "forgeline.split.v1",
                          "counts": {"train": 7, "val": 2, "test": 1}, "split_sha256": "e" * 64},
             "evaluation": {"policy": "ppo", "base": "base",
                            "panels": {"test": {"pairs": 38, "trained_on": False, "comparison": comparison,
                                                "rows": {"base": row, "ppo": row}}}},
             "code": {"forgeline": "0.1", "commit": "f" * 40, "dirty": False},
             "files": {"adapter_model.safetensors": {"bytes": 2000, "sha256": "0" * 64}}}
    text = adapter_card(facts, "apache-2.0", ["forgeline"])
    assert f"**Verdict:** {comparison['verdict']}." in text
    assert "That ppo solves more (or fewer) tasks than base on panel `test`" in text
    assert "| ppo | 6/38 | 15.8 | 7.0-30.0 | 3 / 32 / 3 | 1.0000 | - | - | 1000.0 | 4.00 |" in text
    assert card_files(text) == facts["files"]


# -- forgeline publish ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """results/dataset/hf of a real export (its card's Files table is export-dataset's)."""
    root = tmp_path_factory.mktemp("dataset")
    split_dir = write_split(root)
    (root / "images").mkdir()
    images = []
    for repo in ("alpha", "beta", "gamma", "delta"):
        images.append(root / "images" / f"{repo}.json")
        images[-1].write_text(json.dumps(image(repo)))
    assert run_export(root, split_dir, images, root / "out") == 0
    return root / "out" / "hf"


def publish(project: Path, dataset: Path, *extra: str, hub: dict | None = None) -> None:
    params = write_params(project, {"adapter_repo": "me/forgeline-ppo", "dataset_repo": "me/forgeline-split",
                                    **(hub or {})})
    code = cli.main(["publish", "--config", str(params), "--adapter", str(project / OUT),
                     "--dataset", str(dataset), *extra])
    assert code == 0


class HubCalls(list):
    """The hub's calls, recorded instead of made; `private`: what repo_info answers."""

    private = True


@pytest.fixture
def hub_calls(monkeypatch) -> HubCalls:
    """HfApi's create_repo, repo_info and upload_folder replaced (the last step of publish only)."""
    from huggingface_hub import HfApi

    calls = HubCalls()

    def create_repo(self, repo_id, **kw):
        calls.append(("create_repo", repo_id, kw))

    def repo_info(self, repo_id, **kw):
        calls.append(("repo_info", repo_id, kw))
        return SimpleNamespace(private=calls.private)

    def upload_folder(self, **kw):
        calls.append(("upload_folder", kw["repo_id"], kw))
        return SimpleNamespace(commit_url=f"{kw['repo_id']}/commit/1")

    for name, fn in (("create_repo", create_repo), ("repo_info", repo_info), ("upload_folder", upload_folder)):
        monkeypatch.setattr(HfApi, name, fn)
    return calls


@pytest.fixture
def local_endpoint(monkeypatch):
    """An HTTP server on loopback that answers every request: an endpoint that is reachable."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_publish_checks_every_file_against_its_card(project: Path, dataset: Path, tmp_path: Path):
    folder = tmp_path / "adapter"
    shutil.copytree(project / OUT, folder)
    assert set(upload.check_folder(folder)) == set(card_files((folder / "README.md").read_text()))
    assert "data/train-00000-of-00001.parquet" in upload.check_folder(dataset)
    (folder / ".snakemake_timestamp").write_text("")  # Snakemake's: never uploaded, never a problem
    upload.check_folder(folder)
    with open(folder / "base/config.json", "a") as f:
        f.write(" ")
    (folder / "notes.txt").write_text("x")
    (folder / "checkpoint-summary.json").unlink()
    with pytest.raises(upload.PublishError) as err:
        upload.check_folder(folder)
    message = str(err.value)
    assert "base/config.json: " in message and "the card says" in message
    assert "notes.txt: in the folder, not on the card" in message
    assert "checkpoint-summary.json: on the card, not in the folder" in message


def test_dry_run_prints_what_would_be_uploaded_without_token_or_network(project, dataset, hub_calls,
                                                                        monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    publish(project, dataset, "--dry-run")
    out = capsys.readouterr().out
    assert "model repository me/forgeline-ppo (private)" in out
    assert "dataset repository me/forgeline-split (private)" in out
    assert "  base/model.safetensors (" in out and "  data/train-00000-of-00001.parquet (" in out
    assert "dry run: nothing was uploaded" in out and hub_calls == []


def test_without_network_it_stops_before_touching_anything(project, dataset, hub_calls, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")  # nothing listens there
    with pytest.raises(SystemExit, match=r"is not reachable .* Nothing was uploaded"):
        publish(project, dataset)
    assert hub_calls == []


def test_no_token_or_offline_stops_first(project, dataset, hub_calls, monkeypatch, local_endpoint):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="HF_TOKEN is not set"):
        publish(project, dataset)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="HF_HUB_OFFLINE is set"):
        publish(project, dataset)
    assert hub_calls == []


def test_upload_creates_private_repos_and_sends_exactly_the_card_files(project, dataset, hub_calls,
                                                                       monkeypatch, local_endpoint, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    publish(project, dataset)
    created = [(c[1], c[2]["repo_type"], c[2]["private"]) for c in hub_calls if c[0] == "create_repo"]
    assert created == [("me/forgeline-ppo", "model", True), ("me/forgeline-split", "dataset", True)]
    uploads = {c[1]: c[2] for c in hub_calls if c[0] == "upload_folder"}
    assert [c[0] for c in hub_calls].index("upload_folder") > max(
        i for i, c in enumerate(hub_calls) if c[0] == "repo_info")  # every repository checked first
    for repo, folder in (("me/forgeline-ppo", project / OUT), ("me/forgeline-split", dataset)):
        kw = uploads[repo]
        assert kw["folder_path"] == str(folder) and kw["token"] == "hf_test" and kw["delete_patterns"] == "*"
        assert kw["allow_patterns"] == ["README.md", *sorted(card_files((folder / "README.md").read_text()))]
    assert "uploaded: me/forgeline-ppo/commit/1" in capsys.readouterr().out


def test_an_existing_public_repository_is_refused_while_private(project, dataset, hub_calls, monkeypatch,
                                                                local_endpoint):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub_calls.private = False
    with pytest.raises(SystemExit, match="exists and is public while publish.hub.private is true"):
        publish(project, dataset)
    assert not [c for c in hub_calls if c[0] == "upload_folder"]


def test_nothing_configured_is_an_error(project, dataset, hub_calls):
    with pytest.raises(SystemExit, match="nothing to publish"):
        publish(project, dataset, "--dry-run", hub={"adapter_repo": None, "dataset_repo": None})
