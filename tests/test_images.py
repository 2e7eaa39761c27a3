"""Images for the docker sandbox: deterministic build inputs, reuse, the stage's record, a
registry round trip by digest, one clear line when no engine answers, and a snapshot's pinned
test dependencies (forgeline-requirements.txt: wheels fetched on the host, installed offline)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import ROOT, TINY_NAME, write_tiny_repo
from embedded import PARAMS
from forgeline.sandbox import engine, images
from forgeline.sandbox.base import SandboxError
from forgeline.tasks.repos import RepoSnapshot

DOCKERFILE = (ROOT / "envs" / "repo.Dockerfile").read_text()
BASE = PARAMS.sandbox.docker.base_image


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


def test_base_spec_sorts_packages_and_checks():
    spec = images.base_spec(BASE)
    assert spec["source"] == "mmdebstrap"
    assert spec["packages"] == ["git", "python3", "python3-pip", "python3-pytest"]
    assert images.base_tar_name(spec) == images.base_tar_name({**spec, "packages": spec["packages"][::-1]})
    with pytest.raises(SandboxError, match="by digest"):
        images.base_spec({**spec, "source": "pull", "ref": "python:3.11-slim"})
    with pytest.raises(SandboxError, match="not one of"):
        images.base_spec({**spec, "source": "apt"})
    ok = images.base_spec({**spec, "source": "pull", "ref": "127.0.0.1:5000/py@sha256:" + "0" * 64})
    assert ok["ref"].endswith("0" * 64)


# -- pure: test dependencies ----------------------------------------------------------------

# six, pinned by version and the sha256 of its wheel on PyPI (pure Python, not in the base image)
SIX_17 = ("six", "1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274")
SIX_16 = ("six", "1.16.0", "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254")


def lock_line(name: str, version: str, sha256: str) -> str:
    return f"{name}=={version} \\\n    --hash=sha256:{sha256}\n"


def test_read_lock_takes_only_exact_hashed_pins():
    pins = images.read_lock("# test dependencies\n" + lock_line(*SIX_17)
                            + "Text_Unidecode==1.3 --hash=sha256:" + "a" * 64 + " --hash=sha256:" + "b" * 64
                            + "  # two wheels\n")
    assert [(p.name, p.version) for p in pins] == [("six", "1.17.0"), ("text-unidecode", "1.3")]
    assert pins[0].hashes == (SIX_17[2],) and pins[1].hashes == ("a" * 64, "b" * 64)
    assert images.read_lock("") == [] and images.read_lock("# nothing\n\n") == []
    for bad, why, line in [("six>=1.16 --hash=sha256:" + "a" * 64, "NAME==VERSION", 2),
                           ("six==1.17.0", "no --hash", 2),
                           ("six==1.17.0 --hash=md5:abc", "only --hash=sha256", 2),
                           ("--index-url https://example.org/simple", "NAME==VERSION", 2),
                           ("six[extra]==1.17.0 --hash=sha256:" + "a" * 64, "NAME==VERSION", 2),
                           ("six==1.17.0 ; python_version<'4' --hash=sha256:" + "a" * 64, "only --hash", 2),
                           (lock_line(*SIX_17) + lock_line(*SIX_16), "pinned twice", 4)]:
        with pytest.raises(SandboxError, match=why) as err:
            images.read_lock("# header\n" + bad, "x/forgeline-requirements.txt")
        assert f"x/forgeline-requirements.txt:{line}:" in str(err.value)


def fake_wheel(cache: Path, file: str, body: bytes) -> str:
    """A file in the wheel cache; returns its sha256."""
    import hashlib
    (cache / "wheels").mkdir(parents=True, exist_ok=True)
    (cache / "wheels" / file).write_bytes(body)
    return hashlib.sha256(body).hexdigest()


def test_fetch_wheels_uses_the_cache_and_picks_the_wheel_for_the_image(tmp_path):
    target = images.wheel_target(images.base_spec(BASE))
    assert target["python"] == "3.11" and target["platforms"][0].startswith("manylinux_2_36_")
    arch = target["platforms"][0].split("_", 3)[3]
    pure = fake_wheel(tmp_path, "tinydep-1.0-py3-none-any.whl", b"pure")
    linux = fake_wheel(tmp_path, f"fastdep-2.0-cp311-cp311-manylinux_2_17_{arch}.manylinux2014_{arch}.whl",
                       b"linux")
    mac = fake_wheel(tmp_path, "fastdep-2.0-cp311-cp311-macosx_11_0_arm64.whl", b"mac")
    old = fake_wheel(tmp_path, "tinydep-0.9-py3-none-any.whl", b"old")
    lock = images.read_lock(f"tinydep==1.0 --hash=sha256:{pure}\n"
                            f"fastdep==2.0 --hash=sha256:{mac} --hash=sha256:{linux}\n")
    # everything is in the cache: pip is never run (a pip that fails proves it)
    wheels = images.fetch_wheels(lock, target, tmp_path, pip=["false"])
    assert [(w.name, w.version, w.file, w.sha256) for w in wheels] == [
        ("fastdep", "2.0", f"fastdep-2.0-cp311-cp311-manylinux_2_17_{arch}.manylinux2014_{arch}.whl", linux),
        ("tinydep", "1.0", "tinydep-1.0-py3-none-any.whl", pure)]
    # a cached file whose bytes are not the pinned ones is not used; pip is asked, and its failure named
    (tmp_path / "wheels" / "tinydep-1.0-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(SandboxError, match="pip download of the pinned test dependencies failed"):
        images.fetch_wheels(lock, target, tmp_path, pip=["false"])
    assert old  # another version in the cache never stands in for the pinned one

    # the wheels enter the context and the digest: a changed pin is a new image
    entries = images.wheel_entries(wheels)
    req = dict((p, d) for p, _, d in entries)["wheels/requirements.txt"].decode()
    assert req.splitlines() == [f"fastdep==2.0 --hash=sha256:{linux}", f"tinydep==1.0 --hash=sha256:{pure}"]
    d = images.build_input_digest("sha256:aa", DOCKERFILE, entries, wheels)
    other = [images.Wheel("tinydep", "0.9", "tinydep-0.9-py3-none-any.whl", old, tmp_path)] + wheels[:1]
    assert d != images.build_input_digest("sha256:aa", DOCKERFILE, entries, other)
    assert images.wheel_entries([]) == [("wheels/requirements.txt", 0o644,
                                         images.wheel_entries([])[0][2])]
    assert images.wheel_entries([])[0][2].startswith(b"#")


def test_the_repo_dockerfile_installs_wheels_with_the_one_command():
    """envs/repo.Dockerfile runs images.WHEEL_INSTALL (the Harbor export writes the same), from
    the folder it copies the context's wheels to."""
    unfolded = " ".join(DOCKERFILE.replace("\\\n", " ").split())
    assert f" {images.WHEEL_INSTALL};" in unfolded
    assert f"COPY {images.WHEEL_DIR}/ {images.WHEEL_INSTALL_DIR}/" in unfolded


def test_wheel_site_unpacks_the_pinned_wheels_for_the_process_backend(tmp_path):
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tinydep/__init__.py", "VALUE = 42\n")
        zf.writestr("tinydep-1.0.dist-info/METADATA", "Name: tinydep\nVersion: 1.0\n")
    sha = fake_wheel(tmp_path / "cache", "tinydep-1.0-py3-none-any.whl", buf.getvalue())
    snap = tmp_path / "snap"
    snap.mkdir()
    assert images.wheel_site(snap, tmp_path / "cache", base_section=BASE) is None  # no lock file: nothing
    (snap / images.LOCK_FILE).write_text(f"tinydep==1.0 --hash=sha256:{sha}\n")
    site = images.wheel_site(snap, tmp_path / "cache", base_section=BASE)
    assert (site / "tinydep" / "__init__.py").read_text() == "VALUE = 42\n"
    assert images.wheel_site(snap, tmp_path / "cache", base_section=BASE) == site  # unpacked once


def write_config(tmp_path: Path) -> Path:
    """params.yaml with repos.root pointing at the tiny repository."""
    import yaml
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["repos"] = {"root": str(tmp_path), "pool": [TINY_NAME], "sft": [], "panel": []}
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
        engine.connect()
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
    assert set(record) == {"repo", "commit", "tag", "image_id", "base_image", "build_input_digest",
                           "wheels", "testbed_head"}
    assert record["base_image"] == base_image[0]
    assert record["wheels"] == [] and record["testbed_head"] == record["commit"]
    assert json.loads(manifest.read_text())["notes"]["built"] is False

    # the same snapshot under another tag is found by its label, not rebuilt
    snapshot = RepoSnapshot.load(tmp_path, TINY_NAME)
    rec, built = images.build_repo_image(docker_client, snapshot.env(), DOCKERFILE, base_image,
                                         base_section=BASE)
    assert not built and rec == record

    # a changed file is a new image
    (tmp_path / TINY_NAME / TINY_NAME / "ops.py").write_text("def add(a, b):\n    return b + a\n")
    changed = RepoSnapshot.load(tmp_path, TINY_NAME)
    rec2, built2 = images.build_repo_image(docker_client, changed.env(), DOCKERFILE, base_image,
                                         base_section=BASE)
    assert built2 and rec2["build_input_digest"] != record["build_input_digest"]
    assert rec2["image_id"] != record["image_id"]
    docker_client.images.remove(rec2["tag"], noprune=False)


# A repository whose tests need a third-party package (six, pinned), and whose .gitignore would
# hide its lock file from a plain `git add -A`.
DEPS_NAME = "fldeps"
DEPS_FILES = {
    ".gitignore": "*.txt\n",
    "fldeps/__init__.py": "import six\n\n\ndef text(x):\n    return six.text_type(x)\n",
    "tests/test_text.py": ("import six\n\nfrom fldeps import text\n\n\n"
                           "def test_text():\n    assert text(3) == '3'\n\n\n"
                           "def test_six_is_the_pinned_one():\n    assert six.__version__ == '1.17.0'\n"),
    images.LOCK_FILE: "# test dependencies of fldeps\n" + lock_line(*SIX_17),
}


@pytest.mark.docker
def test_repo_with_pinned_test_dependencies(docker_client, base_image, tmp_path):
    """The wheel is fetched on the host, installed offline in the image, listed in the record;
    the suite passes in the docker sandbox; a changed pin is a new digest and a new image."""
    from forgeline.sandbox.docker import DockerSandbox
    for rel, text in DEPS_FILES.items():
        (tmp_path / DEPS_NAME / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / DEPS_NAME / rel).write_text(text)
    snapshot = RepoSnapshot.load(tmp_path, DEPS_NAME)
    cache = ROOT / ".forgeline"  # the project's wheel cache: fetched once per machine
    record, _ = images.build_repo_image(docker_client, snapshot.env(), DOCKERFILE, base_image, cache,
                                        base_section=BASE)
    assert record["wheels"] == [{"name": "six", "version": "1.17.0",
                                 "file": "six-1.17.0-py2.py3-none-any.whl", "sha256": SIX_17[2]}]
    # the baseline commit holds every file, the .gitignore'd lock file too (`git add -A -f`)
    assert record["testbed_head"] == snapshot.commit
    out = docker_client.containers.run(record["tag"], ["git", "ls-files"], network_mode="none",
                                       remove=True).decode()
    assert images.LOCK_FILE in out.split()
    sandbox = DockerSandbox(client=docker_client, warm=0)
    try:
        run = sandbox.run_tests(snapshot.env(), timeout_s=60)
    finally:
        sandbox.close()
    assert run.statuses == {"tests/test_text.py::test_text": "PASSED",
                            "tests/test_text.py::test_six_is_the_pinned_one": "PASSED"}, run.log[-2000:]
    # the same inputs: reused, same record
    again, built = images.build_repo_image(docker_client, snapshot.env(), DOCKERFILE, base_image, cache,
                                           base_section=BASE)
    assert not built and again == record

    # another pin: another wheel, digest and image, with that version inside
    (tmp_path / DEPS_NAME / images.LOCK_FILE).write_text(lock_line(*SIX_16))
    changed = RepoSnapshot.load(tmp_path, DEPS_NAME)
    rec2, built2 = images.build_repo_image(docker_client, changed.env(), DOCKERFILE, base_image, cache,
                                           base_section=BASE)
    assert built2 and rec2["wheels"][0]["version"] == "1.16.0" and rec2["wheels"][0]["sha256"] == SIX_16[2]
    assert rec2["build_input_digest"] != record["build_input_digest"]
    out = docker_client.containers.run(rec2["tag"], ["python3", "-c", "import six; print(six.__version__)"],
                                       network_mode="none", remove=True).decode().strip()
    assert out == "1.16.0"
    docker_client.images.remove(rec2["image_id"], force=True)

    # an image whose /testbed is not the snapshot's commit fails the stage, naming both commits
    wrong = RepoSnapshot(snapshot.name, snapshot.path, "0" * 40)
    (tmp_path / DEPS_NAME / images.LOCK_FILE).write_text(DEPS_FILES[images.LOCK_FILE])
    with pytest.raises(SandboxError, match="baseline commit in the image is " + snapshot.commit):
        images.build_repo_image(docker_client, wrong.env(), DOCKERFILE, base_image, cache,
                                base_section=BASE)


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
    assert images.ensure_base_image(docker_client, {**images.base_spec(BASE), "source": "pull", "ref": ref}) == \
        (ref, tiny_image["image_id"])
    with pytest.raises(SandboxError, match="by digest"):
        images.pull(f"{registry}/{tiny_image['tag']}", client=docker_client)
    with pytest.raises(SandboxError, match="failed"):
        images.pull(f"{name}@sha256:{'0' * 64}", client=docker_client)
