"""Images for the docker sandbox: an offline base image, one image per repository, a registry.

- The base image is built from Debian's packages with mmdebstrap (no registry needed) and
  imported as `forgeline/base:<suite>-<digest8>`; its tarball is cached under `.forgeline/`, so
  it is built once per machine. Or, where a registry is reachable, a named image is pulled BY
  DIGEST (`sandbox.docker.base_image.source: pull`).
- A repository image is the snapshot at its pinned commit under /testbed (envs/repo.Dockerfile),
  built through the docker SDK from a context tar assembled deterministically. Its label
  `forgeline.build_input_digest` (sha256 over the base image id, the Dockerfile, every context
  file and every wheel) makes a rebuild of unchanged inputs a no-op that returns the same image.
  After a build (and a reuse), `git -C /testbed rev-parse HEAD` in the image must equal the
  snapshot's commit (`sandbox.snapshot.snapshot_commit`); a mismatch fails the stage.
- Test dependencies: a snapshot may declare them in LOCK_FILE (`forgeline-requirements.txt` at
  its root), pip's requirements format with every line pinned, `NAME==VERSION
  --hash=sha256:<64 hex>` (more hashes allowed, e.g. one per platform). Nothing is resolved:
  the HOST fetches exactly those wheels once (`pip download --no-deps --only-binary :all:
  --require-hashes` for the base image's Python and platform) into `.forgeline/wheels/`, they go
  into the build context, and the Dockerfile installs them with `pip install --no-index
  --no-deps --require-hashes` (the base image has python3-pip for that). The build itself never
  touches a network. A repository without the file gets no wheels.
- `push`/`pull` move images to and from a registry by digest.

Stage `forgeline image --repo NAME --out results/images/NAME.json --manifest ...` writes the
record {repo, commit, tag, image_id, base_image, build_input_digest, wheels, testbed_head}
(wheels: [{name, version, file, sha256}]); rebuilding unchanged inputs rewrites the same bytes,
so nothing downstream reruns.

Config: `sandbox.docker.base_image` (forgeline.params.BaseImageConfig): `source` mmdebstrap
(built offline from Debian `suite` with `packages`; the suite also names the Python and glibc
the wheels are fetched for) or pull (`ref`, REGISTRY/NAME@sha256:<64 hex>).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from forgeline.config import as_dict
from forgeline.params import BaseImageConfig
from forgeline.provenance import Manifest, canonical_json, sha256_bytes, sha256_file, write_json
from forgeline.sandbox.base import SandboxError, TaskEnv
from forgeline.sandbox.engine import connect
from forgeline.sandbox.snapshot import snapshot_env, snapshot_files

log = logging.getLogger(__name__)

DEFAULT_DOCKERFILE = Path("envs/repo.Dockerfile")
DEFAULT_CACHE_DIR = Path(".forgeline")
# A snapshot's pinned test dependencies (pip requirements format, every line `==` + hashes).
LOCK_FILE = "forgeline-requirements.txt"
# What the base image's Python is, per Debian suite: the wheels fetched for it must fit.
# (python version, glibc of the manylinux tag)
SUITE_PYTHON = {"bookworm": ("3.11", "2_36"), "trixie": ("3.13", "2_41")}
# In the build context: the wheels and the requirements file the Dockerfile installs from.
WHEEL_DIR = "wheels"
WHEEL_REQUIREMENTS = f"{WHEEL_DIR}/requirements.txt"
# Where a Dockerfile copies the context's WHEEL_DIR, and the one command that installs from it:
# offline, nothing resolved, every file checked against its pinned sha256. envs/repo.Dockerfile
# runs exactly this (tests/test_images.py holds it to it); the Harbor export writes it into each
# task's Dockerfile.
WHEEL_INSTALL_DIR = "/tmp/forgeline-wheels"
WHEEL_INSTALL = ("python3 -m pip install --no-index --no-deps --require-hashes "
                 f"--find-links {WHEEL_INSTALL_DIR} --no-compile --no-cache-dir "
                 "--disable-pip-version-check --root-user-action=ignore --break-system-packages "
                 f"-r {WHEEL_INSTALL_DIR}/requirements.txt")
# Fixed file metadata in the context tar (2000-01-01): mtimes and owners never change a digest.
CONTEXT_MTIME = 946684800
# mmdebstrap honours SOURCE_DATE_EPOCH: the same packages give the same tarball.
SOURCE_DATE_EPOCH = "946684800"
LABEL_DIGEST = "forgeline.build_input_digest"
DEFAULT_REGISTRY = "127.0.0.1:5000"


# -- pure helpers --------------------------------------------------------------------------

def base_spec(section: BaseImageConfig | Mapping[str, Any]) -> dict:
    """The config's `sandbox.docker.base_image` as plain data, packages sorted; checks its shape
    (a mapping from elsewhere than the loaded config has not met the schema)."""
    spec = as_dict(section)
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


# Files every task image gets beside the snapshot (context folder forgeline/): the pytest zygote
# and its site-packages hook (envs/repo.Dockerfile places them; container/pytest_zygote.py)
CONTAINER_FILES = Path(__file__).parent / "container"


def container_entries() -> list[tuple[str, int, bytes]]:
    """(path in context, mode, bytes) of CONTAINER_FILES' files, sorted."""
    return [(f"forgeline/{p.name}", 0o644, p.read_bytes())
            for p in sorted(CONTAINER_FILES.iterdir()) if p.is_file()]


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


# -- test dependencies: a pinned lock file, wheels fetched on the host -----------------------

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_HASH = re.compile(r"^--hash=sha256:(?P<hex>[0-9a-f]{64})$")


@dataclass(frozen=True)
class Pin:
    """One line of a lock file: a distribution at one version, the sha256 its wheel may have."""
    name: str                  # normalised (PEP 503): lowercase, runs of -_. as "-"
    version: str
    hashes: tuple[str, ...]    # hex sha256, sorted


@dataclass(frozen=True)
class Wheel:
    """A fetched wheel: what the record and the digest list, and where it lies in the cache."""
    name: str
    version: str
    file: str
    sha256: str
    path: Path

    def as_record(self) -> dict:
        return {"name": self.name, "version": self.version, "file": self.file, "sha256": self.sha256}


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str, source: str = LOCK_FILE) -> list[Pin]:
    """The pins of a lock file, sorted by name. Only `NAME==VERSION --hash=sha256:HEX ...` lines
    (continued with backslashes as pip allows) and comments: no options, ranges, URLs, extras or
    markers, so what is installed is exactly what the file says. SandboxError names the line."""
    pins: dict[str, Pin] = {}
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            start = lineno
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        logical.append((start, pending.strip()))
    for lineno, line in logical:
        where = f"{source}:{lineno}"
        first, *rest = line.split()
        pin = _PIN.match(first)
        if not pin:
            raise SandboxError(f"{where}: {first!r} is not NAME==VERSION (a lock file pins every test "
                               "dependency exactly; no options, ranges, extras, markers or URLs)")
        hashes = []
        for token in rest:
            h = _HASH.match(token)
            if not h:
                raise SandboxError(f"{where}: {token!r}: only --hash=sha256:<64 hex> may follow a pin")
            hashes.append(h["hex"])
        if not hashes:
            raise SandboxError(f"{where}: {first} has no --hash=sha256:...; every wheel is pinned by its sha256")
        name = normalize_name(pin["name"])
        if name in pins:
            raise SandboxError(f"{where}: {name} is pinned twice")
        pins[name] = Pin(name, pin["version"], tuple(sorted(set(hashes))))
    return [pins[n] for n in sorted(pins)]


def snapshot_lock(snapshot_root: Path) -> list[Pin]:
    """The snapshot's pins (LOCK_FILE at its root), or [] when it declares none."""
    path = Path(snapshot_root) / LOCK_FILE
    return read_lock(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else []


def wheel_target(spec: dict) -> dict:
    """What the base image runs: pip's --python-version/--platform/--abi for `pip download`, and
    the tags a cached wheel must carry. Debian's architecture is this machine's (mmdebstrap)."""
    if spec["suite"] not in SUITE_PYTHON:
        raise SandboxError(f"sandbox.docker.base_image.suite {spec['suite']!r}: its Python is not known "
                           f"here (known: {', '.join(sorted(SUITE_PYTHON))}), so no wheel can be chosen")
    python, glibc = SUITE_PYTHON[spec["suite"]]
    arch = platform.machine()
    return {"python": python, "platforms": [f"manylinux_{glibc}_{arch}"],
            "abis": [f"cp{python.replace('.', '')}", "abi3", "none"], "implementation": "cp"}


def _target_tags(target: dict) -> list:
    """Tags a wheel may carry to install on the target, best first (pip's own order)."""
    from packaging import tags
    version = tuple(int(x) for x in target["python"].split("."))
    platforms: list[str] = []
    for plat in target["platforms"]:  # manylinux_2_36 also runs manylinux_2_17 .. manylinux1 wheels
        m = re.match(r"manylinux_(\d+)_(\d+)_(.+)", plat)
        if m:
            major, minor, arch = int(m[1]), int(m[2]), m[3]
            platforms += [f"manylinux_{major}_{v}_{arch}" for v in range(minor, 4, -1)]
            platforms += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
        else:
            platforms.append(plat)
    return [*tags.cpython_tags(version, abis=[target["abis"][0]], platforms=platforms),
            *tags.compatible_tags(version, interpreter=f"cp{target['python'].replace('.', '')}",
                                  platforms=platforms)]


def _cached_wheel(pin: Pin, cache: Path, tag_rank: dict) -> Wheel | None:
    """The best cached wheel for `pin` whose sha256 is one of its hashes, or None."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    best = None
    for path in sorted(cache.glob("*.whl")):
        try:
            name, version, _build, wtags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if name != pin.name or str(version) != pin.version:
            continue
        rank = min((tag_rank[t] for t in wtags if t in tag_rank), default=None)
        if rank is None:
            continue
        digest = sha256_file(path)
        if digest in pin.hashes and (best is None or rank < best[0]):
            best = (rank, Wheel(pin.name, pin.version, path.name, digest, path))
    return best[1] if best else None


def fetch_wheels(pins: list[Pin], target: dict, cache_dir: Path = DEFAULT_CACHE_DIR,
                 pip: list[str] | None = None) -> list[Wheel]:
    """One wheel per pin, for `target`, sorted by name: from `cache_dir/wheels/` when there, else
    downloaded once with `pip download --no-deps --only-binary :all: --require-hashes` (PyPI, or
    whatever index pip is configured with) and checked again here before it enters the cache."""
    if not pins:
        return []
    cache = Path(cache_dir) / "wheels"
    tag_rank = {t: i for i, t in enumerate(_target_tags(target))}
    with _locked(Path(cache_dir) / "wheels.lock"):
        cache.mkdir(parents=True, exist_ok=True)
        found = {p.name: _cached_wheel(p, cache, tag_rank) for p in pins}
        missing = [p for p in pins if found[p.name] is None]
        if missing:
            _pip_download(missing, target, cache, pip)
            for p in missing:
                found[p.name] = _cached_wheel(p, cache, tag_rank)
                if found[p.name] is None:
                    raise SandboxError(f"{p.name}=={p.version}: pip fetched no wheel for Python "
                                       f"{target['python']} on {target['platforms'][0]} whose sha256 is "
                                       f"one of the lock file's ({', '.join(h[:12] for h in p.hashes)})")
    return [found[p.name] for p in pins]


def _pip_download(pins: list[Pin], target: dict, cache: Path, pip: list[str] | None) -> None:
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("".join(f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for h in p.hashes)
                               + "\n" for p in pins))
        out = Path(tmp) / "out"
        cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--no-deps", "--only-binary", ":all:",
               "--require-hashes", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
               "--python-version", target["python"], "--implementation", target["implementation"],
               *[a for abi in target["abis"] for a in ("--abi", abi)],
               *[a for plat in target["platforms"] for a in ("--platform", plat)],
               "-r", str(req), "-d", str(out)]
        log.info("fetching %d wheel(s): %s", len(pins), " ".join(f"{p.name}=={p.version}" for p in pins))
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise SandboxError(f"pip download of the pinned test dependencies failed "
                               f"({res.returncode}):\n{(res.stderr or res.stdout).strip()[-2000:]}")
        for path in sorted(out.glob("*.whl")):
            if sha256_file(path) in {h for p in pins for h in p.hashes}:  # pip checked; so do we
                os.replace(path, cache / path.name)


def wheel_site(snapshot_root: Path, cache_dir: Path = DEFAULT_CACHE_DIR, *,
               base_section: BaseImageConfig | Mapping[str, Any]) -> Path | None:
    """For the process backend: the snapshot's pinned wheels unpacked into one folder to put on
    PYTHONPATH (what the image installs with pip: unpacking IS a wheel's install, less its
    scripts and metadata checks), under `cache_dir/wheels/site-<key>/`; None without a lock file."""
    import zipfile
    pins = snapshot_lock(snapshot_root)
    if not pins:
        return None
    wheels = fetch_wheels(pins, wheel_target(base_spec(base_section)), cache_dir)
    key = sha256_bytes(canonical_json([[w.file, w.sha256] for w in wheels]).encode())[:16]
    site = Path(cache_dir) / "wheels" / f"site-{key}"
    with _locked(Path(cache_dir) / "wheels.lock"):
        if not site.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=site.parent, prefix=".site-"))
            for w in wheels:
                with zipfile.ZipFile(w.path) as zf:
                    zf.extractall(tmp)
            os.replace(tmp, site)
    return site.resolve()


def wheel_entries(wheels: list[Wheel]) -> list[tuple[str, int, bytes]]:
    """Context entries: every wheel under wheels/ and the requirements file the Dockerfile
    installs from (one pinned, hashed line per wheel; only a comment when there are none)."""
    lines = [f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in wheels]
    text = "".join(lines) or "# no test dependencies (no forgeline-requirements.txt in the snapshot)\n"
    return [(WHEEL_REQUIREMENTS, 0o644, text.encode()),
            *[(f"{WHEEL_DIR}/{w.file}", 0o644, w.path.read_bytes()) for w in wheels]]


def build_input_digest(base_image_id: str, dockerfile_text: str,
                       entries: list[tuple[str, int, bytes]], wheels: list[Wheel] = ()) -> str:
    """sha256 over the base image id, the Dockerfile text, every context file (path, mode, sha256)
    and every wheel installed (name, version, file, sha256)."""
    return sha256_bytes(canonical_json({
        "base_image_id": base_image_id,
        "dockerfile_sha256": sha256_bytes(dockerfile_text.encode()),
        "files": [[p, oct(m), sha256_bytes(d)] for p, m, d in sorted(entries)],
        "wheels": [[w.name, w.version, w.file, w.sha256] for w in wheels],
    }).encode())


def image_record(env: TaskEnv, image_id: str, base_ref: str, digest: str,
                 wheels: list[Wheel] = (), testbed_head: str | None = None) -> dict:
    """What `forgeline image` writes: a function of the build inputs only (no times, no hosts).
    testbed_head: `git rev-parse HEAD` of /testbed in the image (checked equal to `commit`)."""
    return {"repo": env.repo, "commit": env.commit, "tag": env.image,
            "image_id": image_id, "base_image": base_ref, "build_input_digest": digest,
            "wheels": [w.as_record() for w in wheels], "testbed_head": testbed_head}


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


def ensure_base_image(client, section: BaseImageConfig | Mapping[str, Any],
                      cache_dir: Path = DEFAULT_CACHE_DIR) -> tuple[str, str]:
    """(reference, image id) of the base image `section` (the config's sandbox.docker.base_image)
    describes, importing or pulling it if the engine lacks it."""
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


def _split_tag(ref: str) -> tuple[str, str]:
    """(repository, tag) of an image reference; `latest` when it names no tag."""
    repository, sep, tag = ref.rpartition(":")
    return (repository, tag) if sep and "/" not in tag else (ref, "latest")


def testbed_head(client, image_ref: str) -> str:
    """`git -C /testbed rev-parse HEAD` in a throwaway container of the image (no network)."""
    from docker.errors import ContainerError, DockerException
    try:
        out = client.containers.run(image_ref, ["git", "-C", "/testbed", "rev-parse", "HEAD"],
                                    network_mode="none", remove=True, stdout=True, stderr=False)
    except ContainerError as exc:
        raise SandboxError(f"{image_ref}: `git -C /testbed rev-parse HEAD` failed: {exc.stderr!r}") from None
    except DockerException as exc:
        raise SandboxError(f"{image_ref}: checking /testbed's commit failed: {exc}") from None
    return out.decode().strip()


def build_repo_image(client, env: TaskEnv, dockerfile_text: str, base: tuple[str, str],
                     cache_dir: Path = DEFAULT_CACHE_DIR, *,
                     base_section: BaseImageConfig | Mapping[str, Any]) -> tuple[dict, bool]:
    """Build (or reuse) the image `env.image` of the snapshot `env.source`; returns (record,
    built_now).

    The snapshot's pinned test dependencies (LOCK_FILE) are fetched first, into
    `cache_dir/wheels/`, for the Python of the base image that `base_section` describes. The
    image's /testbed baseline commit must be `env.commit`, else SandboxError (and an image
    built now is removed again)."""
    base_ref, base_id = base
    pins = snapshot_lock(env.source)
    wheels = fetch_wheels(pins, wheel_target(base_spec(base_section)), cache_dir) if pins else []
    entries = context_entries(env.source) + wheel_entries(wheels) + container_entries()
    digest = build_input_digest(base_id, dockerfile_text, entries, wheels)
    repository, tag = _split_tag(env.image)
    image = find_image(client, digest)
    built = image is None
    if built:
        log.info("building %s (%d files, %d wheels, inputs %s)", env.image, len(entries),
                 len(wheels), digest[:12])
        from docker.errors import BuildError
        try:
            image, _logs = client.images.build(
                fileobj=io.BytesIO(context_tar(dockerfile_text, entries)), custom_context=True,
                tag=f"{repository}:{tag}", buildargs={"BASE_IMAGE": base_ref}, network_mode="none",
                labels={LABEL_DIGEST: digest, "forgeline.repo": env.repo,
                        "forgeline.commit": env.commit},
                rm=True, forcerm=True, pull=False)
        except BuildError as exc:
            lines = "".join(str(c.get("stream") or c.get("error") or "") for c in exc.build_log)
            raise SandboxError(f"building {env.image} failed: {exc.msg}\n{lines[-3000:]}") from None
    head = testbed_head(client, image.id)
    if head != env.commit:
        if built:
            client.images.remove(image.id, force=True)
        raise SandboxError(
            f"{env.image}: /testbed's baseline commit in the image is {head}, but the snapshot's "
            f"commit (snapshot_commit, computed from {env.source}) is {env.commit}: the "
            "image does not hold exactly the snapshot's files (a .gitattributes filter or eol rule, a "
            "file git cannot store, or a Dockerfile that adds to /testbed?)")
    if f"{repository}:{tag}" not in image.tags:
        image.tag(repository, tag)
    return image_record(env, image.id, base_ref, digest, wheels, head), built


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
                        help="where the base tarball and the wheels are cached (default: .forgeline)")


def run(cfg, args: argparse.Namespace) -> None:
    section = cfg.sandbox.docker.base_image
    manifest = Manifest("image", params={"sandbox.docker.base_image": base_spec(section)},
                        code=__name__)
    try:
        env = snapshot_env(cfg.repos.root, args.repo)
        dockerfile_text = args.dockerfile.read_text(encoding="utf-8")
        client = connect()
        with manifest.timed("base_image"):
            base = ensure_base_image(client, section, args.cache_dir)
        with manifest.timed("build"):
            record, built = build_repo_image(client, env, dockerfile_text, base, args.cache_dir,
                                             base_section=section)
    except SandboxError as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    manifest.notes["built"] = built  # the manifest may say what happened; the record may not
    manifest.inputs = [str(env.source), str(args.dockerfile),
                       *[str(args.cache_dir / "wheels" / w["file"]) for w in record["wheels"]]]
    write_json(args.out, record)
    log.info("%s: %s %s (%s)", env.repo, record["tag"], record["image_id"][:19],
             "built" if built else "reused")
    manifest.write(args.manifest, outputs=[args.out])


__all__ = ["LOCK_FILE", "Pin", "Wheel", "build_input_digest", "build_repo_image",
           "context_tar", "ensure_base_image", "fetch_wheels", "image_record",
           "pull", "push", "read_lock", "snapshot_lock", "wheel_site", "wheel_target"]
