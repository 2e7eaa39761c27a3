"""Images for the docker sandbox: an offline base image, one image per repository, a registry.

- The base image is built from Debian's packages with mmdebstrap (no registry needed) and
  imported as `forgeline/base:<suite>-<digest8>`; its tarball is cached under `.forgeline/`, so
  it is built once per machine. Or, where a registry is reachable, a named image is pulled BY
  DIGEST (`sandbox.docker.base_image.source: pull`).
- A repository image is the snapshot at its pinned commit under /testbed (envs/repo.Dockerfile),
  built through the docker SDK from a context tar assembled deterministically. Its label
  `forgeline.build_input_digest` (sha256 over the base image id, the Dockerfile and every
  context file) makes a rebuild of unchanged inputs a no-op that returns the same image.
- `push`/`pull` move images to and from a registry by digest.

Stage `forgeline image --repo NAME --out results/images/NAME.json --manifest ...` writes the
record {repo, commit, tag, image_id, base_image, build_input_digest}; rebuilding unchanged
inputs rewrites the same bytes, so nothing downstream reruns.

Config (`sandbox.docker.base_image`, defaults in BASE_IMAGE_DEFAULTS):
    source: mmdebstrap | pull
    suite: bookworm                       # mmdebstrap only
    packages: [python3, python3-pytest, git]
    ref: null                             # pull only: "REGISTRY/NAME@sha256:<64 hex>"
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import logging
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any, Iterator

from forgeline.provenance import Manifest, canonical_json, sha256_bytes, sha256_file, stage_sources, write_json
from forgeline.sandbox.base import SandboxError
from forgeline.tasks.repos import RepoSnapshot, snapshot_files

log = logging.getLogger(__name__)

DEFAULT_DOCKERFILE = Path("envs/repo.Dockerfile")
DEFAULT_CACHE_DIR = Path(".forgeline")
BASE_IMAGE_DEFAULTS: dict[str, Any] = {
    "source": "mmdebstrap", "suite": "bookworm", "packages": ["python3", "python3-pytest", "git"],
    "ref": None,
}
# Fixed file metadata in the context tar (2000-01-01): mtimes and owners never change a digest.
CONTEXT_MTIME = 946684800
# mmdebstrap honours SOURCE_DATE_EPOCH: the same packages give the same tarball.
SOURCE_DATE_EPOCH = "946684800"
LABEL_DIGEST = "forgeline.build_input_digest"
DEFAULT_REGISTRY = "127.0.0.1:5000"


# -- the engine ----------------------------------------------------------------------------

def engine_help(host: str | None = None) -> str:
    host = host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return (f"no Docker engine answers at {host}: start one with "
            f"`bash scripts/services.sh start docker`, or set sandbox.backend: process for development")


def connect(timeout_s: float = 600):
    """A docker client whose engine answered a ping; SandboxError with one clear line if none does."""
    import docker
    from docker.errors import DockerException
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except DockerException as exc:
        log.debug("docker connect failed: %s", exc)
        raise SandboxError(engine_help()) from None
    return client


# -- pure helpers --------------------------------------------------------------------------

def base_image_section(sandbox_section: dict) -> dict | None:
    """`sandbox.docker.base_image` of the config, or None (the defaults) when it is not set."""
    return ((sandbox_section or {}).get("docker") or {}).get("base_image")


def base_spec(section: dict | None) -> dict:
    """The base-image section of the config with defaults filled in; checks its shape."""
    spec = {**BASE_IMAGE_DEFAULTS, **(section or {})}
    spec["packages"] = sorted(set(spec["packages"]))
    if spec["source"] not in ("mmdebstrap", "pull"):
        raise SandboxError(f"sandbox.docker.base_image.source: {spec['source']!r} is not one of "
                           "mmdebstrap, pull")
    if spec["source"] == "pull" and "@sha256:" not in str(spec.get("ref") or ""):
        raise SandboxError("sandbox.docker.base_image.ref: a pulled base image must be named by digest "
                           "(NAME@sha256:<64 hex>), so every machine gets the same bytes")
    return spec


def base_tar_name(spec: dict) -> str:
    """File name of the cached mmdebstrap tarball: the suite and a hash of what goes into it."""
    key = sha256_bytes(canonical_json({"suite": spec["suite"], "variant": "essential",
                                       "packages": sorted(set(spec["packages"]))}).encode())[:12]
    return f"base-{spec['suite']}-{key}.tar"


def context_entries(snapshot_root: Path) -> list[tuple[str, int, bytes]]:
    """(path in context, mode, bytes) for every snapshot file, sorted; executables keep +x."""
    entries = []
    for path in snapshot_files(snapshot_root):
        rel = path.relative_to(snapshot_root).as_posix()
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        entries.append((f"repo/{rel}", mode, path.read_bytes()))
    return entries


def context_tar(dockerfile_text: str, entries: list[tuple[str, int, bytes]]) -> bytes:
    """A build context as tar bytes: same inputs => same bytes (sorted, fixed mtime/owner)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        files = [("Dockerfile", 0o644, dockerfile_text.encode())] + sorted(entries)
        dirs = sorted({"/".join(p.split("/")[:i]) for p, _, _ in files
                       for i in range(1, p.count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, CONTEXT_MTIME
            tar.addfile(info)
        for name, mode, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, CONTEXT_MTIME
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_input_digest(base_image_id: str, dockerfile_text: str,
                       entries: list[tuple[str, int, bytes]]) -> str:
    """sha256 over the base image id, the Dockerfile text and every context file (path, mode, sha256)."""
    return sha256_bytes(canonical_json({
        "base_image_id": base_image_id,
        "dockerfile_sha256": sha256_bytes(dockerfile_text.encode()),
        "files": [[p, oct(m), sha256_bytes(d)] for p, m, d in sorted(entries)],
    }).encode())


def image_record(snapshot: RepoSnapshot, image_id: str, base_ref: str, digest: str) -> dict:
    """What `forgeline image` writes: a function of the build inputs only (no times, no hosts)."""
    return {"repo": snapshot.name, "commit": snapshot.commit, "tag": snapshot.image,
            "image_id": image_id, "base_image": base_ref, "build_input_digest": digest}


# -- base image ----------------------------------------------------------------------------

@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock file: parallel `forgeline image` jobs build the base only once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_base_tar(spec: dict, cache_dir: Path) -> Path:
    """The mmdebstrap tarball for `spec`, built once per machine (~40 s, ~250 MB) and cached."""
    tar = cache_dir / base_tar_name(spec)
    if tar.is_file():
        return tar
    if not shutil.which("mmdebstrap"):
        raise SandboxError("mmdebstrap is not installed (it builds the base image offline): "
                           "`apt-get install mmdebstrap`, or `bash scripts/services.sh start docker`")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = tar.with_name(tar.stem + ".partial.tar")  # mmdebstrap picks the format by extension
    cmd = ["mmdebstrap", "--variant=essential", "--include=" + ",".join(spec["packages"]),
           spec["suite"], str(tmp)]
    log.info("building the base image tarball: %s", " ".join(cmd))
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True,
                         env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SandboxError(f"mmdebstrap failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    (tar.parent / (tar.name + ".sha256")).write_text(sha256_file(tmp) + "\n")
    os.replace(tmp, tar)
    log.info("base tarball %s built in %.1f s", tar, time.perf_counter() - t0)
    return tar


def ensure_base_image(client, section: dict | None = None,
                      cache_dir: Path = DEFAULT_CACHE_DIR) -> tuple[str, str]:
    """(reference, image id) of the base image, importing or pulling it if the engine lacks it."""
    from docker.errors import ImageNotFound
    spec = base_spec(section)
    if spec["source"] == "pull":
        ref = spec["ref"]
        try:
            return ref, client.images.get(ref).id
        except ImageNotFound:
            return ref, pull(ref, client=client)
    cache_dir = Path(cache_dir)
    with _locked(cache_dir / "base.lock"):
        tar = build_base_tar(spec, cache_dir)
        sums = tar.parent / (tar.name + ".sha256")
        if not sums.is_file():
            sums.write_text(sha256_file(tar) + "\n")
        ref = f"forgeline/base:{spec['suite']}-{sums.read_text().strip()[:8]}"
        try:
            return ref, client.images.get(ref).id
        except ImageNotFound:
            pass
        log.info("importing %s as %s", tar, ref)
        repository, tag = ref.rsplit(":", 1)
        client.api.import_image_from_file(str(tar), repository=repository, tag=tag)
        return ref, client.images.get(ref).id


# -- repository images ---------------------------------------------------------------------

def find_image(client, digest: str):
    """The image labelled with this build-input digest, or None."""
    found = client.images.list(filters={"label": f"{LABEL_DIGEST}={digest}"})
    return sorted(found, key=lambda im: im.id)[0] if found else None


def build_repo_image(client, snapshot: RepoSnapshot, dockerfile_text: str,
                     base: tuple[str, str]) -> tuple[dict, bool]:
    """Build (or reuse) the image of `snapshot`; returns (record, built_now)."""
    base_ref, base_id = base
    entries = context_entries(snapshot.path)
    digest = build_input_digest(base_id, dockerfile_text, entries)
    repository, tag = snapshot.image.rsplit(":", 1)
    image = find_image(client, digest)
    built = image is None
    if built:
        log.info("building %s (%d files, inputs %s)", snapshot.image, len(entries), digest[:12])
        from docker.errors import BuildError
        try:
            image, _logs = client.images.build(
                fileobj=io.BytesIO(context_tar(dockerfile_text, entries)), custom_context=True,
                tag=snapshot.image, buildargs={"BASE_IMAGE": base_ref}, network_mode="none",
                labels={LABEL_DIGEST: digest, "forgeline.repo": snapshot.name,
                        "forgeline.commit": snapshot.commit},
                rm=True, forcerm=True, pull=False)
        except BuildError as exc:
            lines = "".join(str(c.get("stream") or c.get("error") or "") for c in exc.build_log)
            raise SandboxError(f"building {snapshot.image} failed: {exc.msg}\n{lines[-3000:]}") from None
    elif snapshot.image not in image.tags:
        image.tag(repository, tag)
    return image_record(snapshot, image.id, base_ref, digest), built


# -- registry ------------------------------------------------------------------------------

def push(tag: str, registry: str = DEFAULT_REGISTRY, client=None) -> str:
    """Push local image `tag` to `registry`; returns its reference by digest, `REG/NAME@sha256:...`."""
    client = client or connect()
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    target = f"{registry}/{repository}"
    client.images.get(tag).tag(target, version)
    digest = None
    for event in client.images.push(target, version, stream=True, decode=True):
        if "error" in event:
            raise SandboxError(f"push {target}:{version} failed: {event['error']}")
        digest = (event.get("aux") or {}).get("Digest", digest)
    if not digest:
        raise SandboxError(f"push {target}:{version}: the registry returned no digest")
    return f"{target}@{digest}"


def pull(ref: str, client=None) -> str:
    """Pull `ref` (NAME@sha256:...) and return the local image id; the bytes are checked by digest."""
    from docker.errors import APIError
    client = client or connect()
    if "@sha256:" not in ref:
        raise SandboxError(f"pull {ref}: name images by digest (NAME@sha256:...), not by tag")
    try:
        image = client.images.pull(ref)
    except APIError as exc:
        raise SandboxError(f"pull {ref} failed: {exc.explanation or exc}") from None
    return image.id


# -- the stage -----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="repository name (a folder under repos.root)")
    parser.add_argument("--out", required=True, type=Path, help="image record (JSON)")
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--dockerfile", type=Path, default=DEFAULT_DOCKERFILE,
                        help=f"Dockerfile template (default: {DEFAULT_DOCKERFILE})")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                        help="where the base tarball is cached (default: .forgeline)")


def run(cfg, args: argparse.Namespace) -> None:
    section = base_image_section(cfg.section("sandbox"))
    manifest = Manifest("image", params={"sandbox.docker.base_image": base_spec(section)},
                        code=[str(p) for p in stage_sources(__name__)])
    try:
        snapshot = RepoSnapshot.load(cfg.section("repos.root"), args.repo)
        dockerfile_text = args.dockerfile.read_text(encoding="utf-8")
        client = connect()
        with manifest.timed("base_image"):
            base = ensure_base_image(client, section, args.cache_dir)
        with manifest.timed("build"):
            record, built = build_repo_image(client, snapshot, dockerfile_text, base)
    except SandboxError as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    manifest.notes["built"] = built  # the manifest may say what happened; the record may not
    manifest.inputs = [str(snapshot.path), str(args.dockerfile)]
    write_json(args.out, record)
    log.info("%s: %s %s (%s)", snapshot.name, record["tag"], record["image_id"][:19],
             "built" if built else "reused")
    manifest.write(args.manifest, outputs=[args.out])


__all__ = ["BASE_IMAGE_DEFAULTS", "build_input_digest", "build_repo_image", "connect", "context_tar",
           "engine_help", "ensure_base_image", "image_record", "pull", "push"]
