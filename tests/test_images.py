"""Images for the docker sandbox: deterministic build inputs, reuse, the stage's record, a
registry round trip by digest, and one clear line when no engine answers."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import ROOT, TINY_NAME, write_tiny_repo
from forgeline.sandbox import images
from forgeline.sandbox.base import SandboxError
from forgeline.tasks.repos import RepoSnapshot

DOCKERFILE = (ROOT / "envs" / "repo.Dockerfile").read_text()


# -- pure: build inputs --------------------------------------------------------------------

def test_context_tar_is_a_function_of_its_inputs(tmp_path):
    write_tiny_repo(tmp_path)
    entries = images.context_entries(tmp_path / TINY_NAME)
    assert [p for p, _, _ in entries] == sorted(p for p, _, _ in entries)
    first = images.context_tar(DOCKERFILE, entries)
    # touching files (new mtimes) changes nothing
    for p in (tmp_path / TINY_NAME).rglob("*.py"):
        p.touch()
    assert images.context_tar(DOCKERFILE, images.context_entries(tmp_path / TINY_NAME)) == first


def test_build_input_digest_sees_every_input(tmp_path):
    write_tiny_repo(tmp_path)
    entries = images.context_entries(tmp_path / TINY_NAME)
    d = images.build_input_digest("sha256:aa", DOCKERFILE, entries)
    assert d == images.build_input_digest("sha256:aa", DOCKERFILE, list(reversed(entries)))
    assert d != images.build_input_digest("sha256:bb", DOCKERFILE, entries)
    assert d != images.build_input_digest("sha256:aa", DOCKERFILE + "\n# x", entries)
    changed = [(p, m, b + b"#" if p.endswith("ops.py") else b) for p, m, b in entries]
    assert d != images.build_input_digest("sha256:aa", DOCKERFILE, changed)
    exe = [(p, 0o755 if p.endswith("ops.py") else m, b) for p, m, b in entries]
    assert d != images.build_input_digest("sha256:aa", DOCKERFILE, exe)


def test_base_spec_defaults_and_checks():
    spec = images.base_spec(None)
    assert spec["source"] == "mmdebstrap" and spec["packages"] == ["git", "python3", "python3-pytest"]
    assert images.base_tar_name(spec) == images.base_tar_name({**spec, "packages": spec["packages"][::-1]})
    with pytest.raises(SandboxError, match="by digest"):
        images.base_spec({"source": "pull", "ref": "python:3.11-slim"})
    with pytest.raises(SandboxError, match="not one of"):
        images.base_spec({"source": "apt"})
    ok = images.base_spec({"source": "pull", "ref": "127.0.0.1:5000/py@sha256:" + "0" * 64})
    assert ok["ref"].endswith("0" * 64)


def write_config(tmp_path: Path) -> Path:
    """params.yaml with repos.root pointing at the tiny repository."""
    import yaml
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["repos"] = {"root": str(tmp_path), "pool": [TINY_NAME]}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def image_cli(tmp_path: Path, monkeypatch) -> list[str]:
    """`forgeline image ...` argv, with the stage wired into the CLI as the lead will do."""
    from forgeline import cli
    monkeypatch.setitem(cli.STAGES, "image", ("forgeline.sandbox.images", "build one repository's image"))
    write_tiny_repo(tmp_path)
    return ["image", "--config", str(write_config(tmp_path)), "--repo", TINY_NAME,
            "--out", str(tmp_path / "out" / "rec.json"), "--manifest", str(tmp_path / "out" / "rec.manifest.json"),
            "--cache-dir", str(ROOT / ".forgeline")]


def test_no_engine_gives_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(SandboxError) as err:
        images.connect()
    assert "bash scripts/services.sh start docker" in str(err.value)
    assert "sandbox.backend: process" in str(err.value)
    # the stage: exit status 1 and one logged line, no traceback, no output
    from forgeline import cli
    argv = image_cli(tmp_path, monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "ERROR" in lines[0] and "no Docker engine answers" in lines[0], lines
    assert not (tmp_path / "out" / "rec.json").exists()
    logging.getLogger().handlers.clear()  # cli.main installed handlers on pytest's capture


# -- with an engine ------------------------------------------------------------------------

@pytest.mark.docker
def test_repo_image_layout(docker_client, tiny_image):
    image = docker_client.images.get(tiny_image["tag"])
    assert image.id == tiny_image["image_id"]
    assert image.labels[images.LABEL_DIGEST] == tiny_image["build_input_digest"]
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert image.attrs["Config"]["User"] == "forgeline"
    assert image.attrs["Config"]["WorkingDir"] == "/testbed"
    # the default command runs the tests offline, as a non-root user, from a clean git baseline
    out = docker_client.containers.run(
        tiny_image["tag"], ["bash", "-c", "id -u; git status --porcelain; git log --format=%s; "
                            "python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1"],
        network_mode="none", remove=True).decode()
    uid, *rest = out.splitlines()
    assert uid == "1000"
    assert rest[0] == "baseline" and "3 passed" in rest[-1]


@pytest.mark.docker
def test_rebuild_is_reused_and_the_record_is_byte_identical(docker_client, base_image, tmp_path,
                                                            monkeypatch):
    from forgeline import cli
    argv = image_cli(tmp_path, monkeypatch)
    out, manifest = tmp_path / "out" / "rec.json", tmp_path / "out" / "rec.manifest.json"
    assert cli.main(argv) == 0
    first = out.read_bytes()
    assert cli.main(argv) == 0
    assert out.read_bytes() == first
    import json
    record = json.loads(first)
    assert set(record) == {"repo", "commit", "tag", "image_id", "base_image", "build_input_digest"}
    assert record["base_image"] == base_image[0]
    assert json.loads(manifest.read_text())["notes"]["built"] is False

    # the same snapshot under another tag is found by its label, not rebuilt
    snapshot = RepoSnapshot.load(tmp_path, TINY_NAME)
    rec, built = images.build_repo_image(docker_client, snapshot, DOCKERFILE, base_image)
    assert not built and rec == record

    # a changed file is a new image
    (tmp_path / TINY_NAME / TINY_NAME / "ops.py").write_text("def add(a, b):\n    return b + a\n")
    changed = RepoSnapshot.load(tmp_path, TINY_NAME)
    rec2, built2 = images.build_repo_image(docker_client, changed, DOCKERFILE, base_image)
    assert built2 and rec2["build_input_digest"] != record["build_input_digest"]
    assert rec2["image_id"] != record["image_id"]
    docker_client.images.remove(rec2["tag"], noprune=False)


@pytest.mark.docker
def test_push_and_pull_by_digest(docker_client, tiny_image, registry):
    ref = images.push(tiny_image["tag"], registry, client=docker_client)
    name, _, digest = ref.partition("@")
    assert name == f"{registry}/{tiny_image['tag'].rsplit(':', 1)[0]}" and digest.startswith("sha256:")
    assert len(digest) == len("sha256:") + 64
    # drop the local registry name, then get the image back by digest
    docker_client.images.remove(f"{registry}/{tiny_image['tag']}")
    assert images.pull(ref, client=docker_client) == tiny_image["image_id"]
    # a pulled base image: source pull, named by digest
    assert images.ensure_base_image(docker_client, {"source": "pull", "ref": ref}) == \
        (ref, tiny_image["image_id"])
    with pytest.raises(SandboxError, match="by digest"):
        images.pull(f"{registry}/{tiny_image['tag']}", client=docker_client)
    with pytest.raises(SandboxError, match="failed"):
        images.pull(f"{name}@sha256:{'0' * 64}", client=docker_client)
