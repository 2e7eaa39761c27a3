"""Every key of params.yaml as a typed field: one frozen dataclass per config section.

Each field carries its type, its bounds (`spec`: the JSON Schema keywords the config is
validated with, generated from these classes by `forgeline.config.json_schema`) and a one-line
docstring saying what it means and in which unit. `forgeline.config.load` returns these
(`cfg.train.ppo.lam`); stages read them, never the raw dict.

Where a default lives: params.yaml is the embedded run's config and the only place its values
are written. A key params.yaml sets has no default here (the field is required); a key it
leaves out (a knob only another scale or an optional extra needs) has its default here, next to
its docstring. tests/test_config.py holds that rule.

Rules between keys that a JSON schema cannot state are a section's `problems()`: the loader
reports them like schema errors, naming the file and line.
"""
from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field
from typing import Any, Literal

MAX_SEED = 2**32 - 1  # numpy seeds are < 2**32

# The procedural bug kinds (forgeline.tasks.mutations.KINDS) and the agent's tools
# (forgeline.agent.tools.AGENT_TOOLS); tests/test_config.py checks both lists against those.
Mutation = Literal["op_swap", "cmp_boundary", "bool_flip", "remove_stmt", "arg_swap", "const_change",
                   "invert_if"]
Tool = Literal["bash", "edit", "submit"]
Outcome = Literal["resolved", "failed", "timeout", "context_exceeded", "invalid", "step_limit"]
REPO_NAME = "^[A-Za-z0-9_.-]+$"
COMMIT = "^[0-9a-f]{40}$"
HUB_REPO = "^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"  # "org/name" on the hub


def spec(default: Any = MISSING, *, ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None, pattern: str | None = None,
         min_items: int | None = None, max_items: int | None = None, unique: bool = False,
         contains: Any = MISSING, min_chars: int | None = None, max_chars: int | None = None,
         absent_if_none: bool = False) -> Any:
    """A dataclass field with bounds. ge/gt/le/lt (>=, >, <=, <), `pattern` and min/max_chars
    bound a number or a string: for a list, each item; for a mapping, each value. min/max_items,
    `unique` and `contains` bound a list itself. `default`: only for a key params.yaml leaves
    out. `absent_if_none`: None means the key is left out; null is not a value it takes."""
    bounds = {"minimum": ge, "exclusiveMinimum": gt, "maximum": le, "exclusiveMaximum": lt,
              "pattern": pattern, "minLength": min_chars, "maxLength": max_chars}
    items = {"minItems": min_items, "maxItems": max_items, "uniqueItems": unique or None,
             "contains": None if contains is MISSING else {"const": contains}}
    metadata = {"bounds": {k: v for k, v in bounds.items() if v is not None},
                "items": {k: v for k, v in items.items() if v is not None},
                "absent_if_none": absent_if_none}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


# -- repos -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ReposConfig:
    """`repos`: the repository snapshots and the role of each."""

    root: str
    """folder with one snapshot per repository (package + tests/)"""
    pool: list[str] = spec(pattern=REPO_NAME, min_items=1, unique=True)
    """the RL task pool: its bugs are validated, filtered and split by repository"""
    sft: list[str] = spec(pattern=REPO_NAME, unique=True)
    """repositories for supervised training of the tiny base policy only (never RL or a panel)"""
    panel: list[str] = spec(pattern=REPO_NAME, unique=True)
    """a second evaluation panel of repositories used nowhere else"""


# -- sandbox -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class BaseImageConfig:
    """`sandbox.docker.base_image`: the image every repository image is built on."""

    source: Literal["mmdebstrap", "pull"]
    """mmdebstrap: built offline from Debian | pull: `ref`, by digest"""
    suite: str
    """the Debian suite; it also names the Python and glibc the pinned wheels are fetched for"""
    packages: list[str]
    """Debian packages in the image (pip installs a snapshot's pinned wheels)"""
    ref: str | None = spec(pattern="^[^@]+@sha256:[0-9a-f]{64}$")
    """for pull: REGISTRY/NAME@sha256:<64 hex>"""

    def problems(self) -> list[tuple[str, str]]:
        if self.source == "pull" and not self.ref:
            return [("ref", "a pulled base image must be named by digest (NAME@sha256:<64 hex>), "
                            "so every machine gets the same bytes")]
        return []


@dataclass(frozen=True, kw_only=True)
class DockerConfig:
    """`sandbox.docker`: the limits of one task container."""

    memory_mb: int = spec(ge=64)
    """memory limit in MiB (memory + swap)"""
    cpus: float = spec(gt=0)
    """CPU limit (cores)"""
    pids: int = spec(ge=16)
    """process-count limit: fork bombs stop here"""
    scratch_mb: int = spec(ge=16)
    """size in MiB of the writable tmpfs mounts (/testbed, /tmp)"""
    output_limit: int = spec(ge=1024)
    """bytes of a command's output kept (head + tail)"""
    warm: int = spec(ge=0)
    """started spare containers kept per image"""
    base_image: BaseImageConfig


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """`sandbox`: where task code runs."""

    backend: Literal["process", "docker"]
    """docker: isolated containers | process: development only (no isolation but the network)"""
    test_timeout_s: float = spec(gt=0)
    """wall-time limit of one test run, seconds"""
    docker: DockerConfig


# -- tasks -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class GenerateConfig:
    """`tasks.generate`: the bug generator (procedural modifications, SWE-smith style)."""

    max_per_repo: int = spec(ge=1)
    """candidates kept per repository after the tests have run"""
    max_per_pool_repo: int | None = spec(ge=1)
    """candidates kept per repos.pool repository (null: max_per_repo); difficulty uses max_tasks_per_repo"""
    max_per_panel_repo: int | None = spec(ge=1)
    """candidates kept per repos.panel repository (null: max_per_repo): the heldout panel's size"""
    max_tries_per_repo: int = spec(ge=1)
    """mutations tried per repository (each costs one test run)"""
    kinds: list[Mutation] = spec(min_items=1)
    """the mutation kinds tried"""
    threads: int = spec(ge=1)
    """cores a job holds (Snakemake threads): mutation test runs at once"""


@dataclass(frozen=True, kw_only=True)
class IngestHubConfig:
    """`tasks.ingest.hub`: upstream SWE-smith on the hub (Parquet shards), read by ingest_extra."""

    repo_id: str | None = spec(pattern=HUB_REPO)
    """the dataset repository, e.g. SWE-bench/SWE-smith (null: off)"""
    revision: str | None = spec(pattern=COMMIT)
    """the full 40-hex commit (a branch or tag moves, so it is refused)"""
    allow_patterns: list[str] = spec(min_items=1, min_chars=1)
    """the shards to fetch and read (hub glob patterns)"""
    max_records: int | None = spec(ge=1)
    """read at most this many rows over all shards, in file order (null: all)"""


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """`tasks.ingest`: SWE-smith-format records besides the generated bugs."""

    extra_sources: list[str]
    """SWE-smith-format files (JSONL, a JSON array or Parquet) to ingest"""
    max_record_bytes: int = spec(ge=1024)
    """a record larger than this is rejected, not parsed"""
    hub: IngestHubConfig


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    """`tasks.validate`: the checks a candidate task must pass."""

    gold_runs: int = spec(ge=1)
    """runs of the gold fix; a test whose verdict flips between them is flaky"""
    alignment: bool
    """the problem/test alignment heuristic"""
    strong_model: bool
    """solve with a strong model first (needs an endpoint)"""
    threads: int = spec(ge=1)
    """cores a job holds (Snakemake threads): test runs at once"""


@dataclass(frozen=True, kw_only=True)
class FractionsConfig:
    """Shares of the train, val and test splits."""

    train: float = spec(ge=0, le=1)
    """share of the train split"""
    val: float = spec(ge=0, le=1)
    """share of the validation split"""
    test: float = spec(ge=0, le=1)
    """share of the test split"""


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """`tasks.split`: the repository-disjoint train/val/test split."""

    fractions: FractionsConfig
    seed: int = spec(ge=0, le=MAX_SEED)
    """seed of the split"""
    frozen_digest: str | None = spec(pattern="^[0-9a-f]{64}$")
    """the semantic digest of a frozen split: a run that would change it fails (null: not frozen)"""
    frozen_manifest: str | None
    """a committed copy of the frozen split's split.json, to name each task that moved"""


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """`tasks.export`: the dataset card of export-dataset."""

    license: str = spec(pattern="^[a-z0-9][a-z0-9.+-]*$")
    """the card's license id (hub ids: mit, apache-2.0, other, ...)"""
    pretty_name: str = spec(min_chars=1, max_chars=200)
    """the card's title"""
    task_categories: list[str] = spec(pattern="^[a-z0-9][a-z0-9-]*$")
    """hub task categories of the card"""
    tags: list[str] = spec(pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """hub tags of the card"""


@dataclass(frozen=True, kw_only=True)
class DifficultyConfig:
    """`tasks.difficulty`: pass@k of the base policy; keeps the tasks it solves sometimes."""

    k: int = spec(ge=1)
    """episodes per task (seeds shared with every later rollout: paired)"""
    screen: int = spec(ge=0)
    """episodes per task first (0: off); a task none of them solves stops there, out of the band"""
    band: list[float] = spec(ge=0, le=1, min_items=2, max_items=2)
    """keep tasks solved in lo..hi of the k episodes (fractions, inclusive)"""
    max_tasks_per_repo: int = spec(ge=0)
    """evaluate at most this many validated tasks per repository (0: all)"""
    seeds: list[int] | None = spec(ge=0, le=MAX_SEED)
    """explicit episode seeds, k of them (null: derived from the root seed)"""
    threads: int = spec(ge=1)
    """cores the job holds (Snakemake threads); the engine generates on one thread either way"""

    def problems(self) -> list[tuple[str, str]]:
        out = []
        lo, hi = self.band
        if not lo <= hi:
            out.append(("band", f"{self.band}: expected lo <= hi"))
        if self.seeds is not None and len(self.seeds) != self.k:
            out.append(("seeds", f"{len(self.seeds)} seeds for k={self.k}"))
        if self.screen and self.screen >= self.k:
            out.append(("screen", f"{self.screen}: expected fewer episodes than k={self.k} (0: no screen)"))
        if self.screen and lo <= 0:
            out.append(("screen", f"{self.screen}: the screen drops unsolved tasks, which a band from "
                                  f"{lo} keeps; set screen: 0 or raise the band's lower end"))
        return out


@dataclass(frozen=True, kw_only=True)
class TasksConfig:
    """`tasks`: from repositories to a frozen split of validated tasks."""

    generate: GenerateConfig
    ingest: IngestConfig
    validate: ValidateConfig
    split: SplitConfig
    export: ExportConfig
    difficulty: DifficultyConfig


# -- policy ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class HubModelConfig:
    """`policy.base.hub`: a model on the hub at a pinned commit."""

    repo_id: str | None
    """the model repository, e.g. Kwai-Klear/Klear-AgentForge-8B-SFT"""
    revision: str | None = spec(pattern=COMMIT)
    """the full 40-hex commit (a branch or tag moves, so it is refused)"""
    allow_patterns: list[str] | None
    """files to fetch, e.g. ["*.json", "*.safetensors"] (null: all)"""


@dataclass(frozen=True, kw_only=True)
class BasePolicyConfig:
    """`policy.base`: the policy every RL stage starts from."""

    source: Literal["sft", "hub"]
    """sft: the tiny model after SFT (results/policy/sft) | hub: `hub`, copied to results/policy/hub"""
    hub: HubModelConfig


@dataclass(frozen=True, kw_only=True)
class TokenizerConfig:
    """`policy.init.tokenizer`: the byte-level BPE trained on the SFT repositories and stdlib."""

    vocab_size: int = spec(ge=300)
    """total ids, the special tokens included"""
    split: Literal["qwen", "words"]
    """pre-split: words (a name is the same ids everywhere) | qwen (Qwen3's regex)"""
    min_frequency: int = spec(ge=1)
    """a pair seen fewer times is never merged"""
    stdlib_max_bytes: int = spec(ge=0)
    """bytes of standard-library source sampled into the corpus (0: repositories only)"""
    max_file_bytes: int = spec(ge=1024)
    """corpus files larger than this are skipped"""
    model_max_length: int = spec(ge=128)
    """the tokenizer's declared context, tokens"""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """`policy.init.model`: the tiny base model (the Qwen3 architecture)."""

    hidden_size: int = spec(ge=8)
    """width"""
    layers: int = spec(ge=1)
    """decoder layers"""
    heads: int = spec(ge=1)
    """query heads"""
    kv_heads: int = spec(ge=1)
    """key/value heads (grouped-query attention)"""
    head_dim: int = spec(ge=4)
    """per-head width"""
    intermediate: int = spec(ge=8)
    """SwiGLU MLP width"""
    max_position_embeddings: int = spec(ge=128)
    """context length, tokens"""
    rope_theta: float = spec(gt=0)
    """RoPE base"""
    embedding_std: float | None = spec(gt=0)
    """init std of the tied embeddings (null: the architecture's initializer)"""


@dataclass(frozen=True, kw_only=True)
class RepeatPhaseConfig:
    """`policy.init.copy.repeat`: prefix, span, <sep>, span; learns to emit what it attends to."""

    steps: int = spec(ge=0)
    """optimizer steps at most (0: skip)"""
    until_accuracy: float | None = spec(ge=0, le=1)
    """end at the first curve point copying this share (null: all steps)"""
    batch: int = spec(ge=1)
    """sequences per step"""
    prefix: list[int] = spec(ge=0, min_items=2, max_items=2)
    """random ids before the span (min, max)"""
    span: list[int] = spec(ge=1, min_items=2, max_items=2)
    """ids in the repeated span (min, max)"""


@dataclass(frozen=True, kw_only=True)
class RecallPhaseConfig:
    """`policy.init.copy.recall`: stretches recur at random distances; learns to find them."""

    steps: int = spec(ge=0)
    """optimizer steps (0: skip)"""
    batch: int = spec(ge=1)
    """sequences per step"""
    length: int = spec(ge=8)
    """ids per sequence"""
    gap: list[int] = spec(ge=1, min_items=2, max_items=2)
    """fresh random ids between two copies (min, max)"""
    span: list[int] = spec(ge=2, min_items=2, max_items=2)
    """ids per copy (min, max)"""


@dataclass(frozen=True, kw_only=True)
class MatchPhaseConfig:
    """`policy.init.copy.match`: recall among few distinct ids: only the ids before tell which
    occurrence continues."""

    steps: int = spec(ge=0)
    """optimizer steps (0: skip)"""
    batch: int = spec(ge=1)
    """sequences per step"""
    length: int = spec(ge=8)
    """ids per sequence"""
    gap: list[int] = spec(ge=1, min_items=2, max_items=2)
    """fresh ids between two copies (min, max)"""
    span: list[int] = spec(ge=2, min_items=2, max_items=2)
    """ids per copy (min, max)"""
    pool: int | None = spec(ge=2)
    """distinct ids per sequence, drawn anew for each (null: the whole vocabulary)"""


@dataclass(frozen=True, kw_only=True)
class CopyConfig:
    """`policy.init.copy`: copy pre-training on random ids (forgeline.policy.copy_pretrain)."""

    repeat: RepeatPhaseConfig
    recall: RecallPhaseConfig
    match: MatchPhaseConfig
    lr: float = spec(gt=0)
    """AdamW learning rate, constant after warm-up"""
    warmup_steps: int = spec(ge=0)
    """linear warm-up steps"""
    grad_clip: float = spec(gt=0)
    """max global gradient norm"""
    log_every: int = spec(ge=1)
    """steps between points of copy_curve.json"""
    threads: int = spec(ge=1)
    """torch threads of the recall and match phases (the copy_pretrain job's cores)"""


@dataclass(frozen=True, kw_only=True)
class InitConfig:
    """`policy.init`: the tiny base model before SFT."""

    tokenizer: TokenizerConfig
    model: ModelConfig
    copy: CopyConfig
    threads: int = spec(ge=1)
    """torch threads of the policy_init job: the tokenizer, the model, the repeat phase"""


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """`policy`: the base policy and, when it is built here, the tiny model."""

    base: BasePolicyConfig
    init: InitConfig


# -- agent -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """`agent.rollout`: how episodes are batched."""

    concurrency: int = spec(ge=1)
    """episodes (sandbox sessions) at once"""
    seeding: Literal["batch", "episode"]
    """batch: one batched generate per round | episode: one seeded generate per episode"""
    lanes: int = spec(ge=1)
    """groups of episodes taking turns: one generates while the others' tools run"""


@dataclass(frozen=True, kw_only=True)
class OracleConfig:
    """`agent.oracle`: the scripted oracle's episodes (SFT data)."""

    max_lines: int = spec(ge=1)
    """lines of the function the oracle's grep shows"""
    max_guesses: int = spec(ge=0)
    """wrong candidate edits the scan may try before the fix (0: the fix right after the grep)"""


@dataclass(frozen=True, kw_only=True)
class ProcessWeightsConfig:
    """`agent.reward.process_weights`: weight of each per-turn label (+1 true, -1 false)."""

    well_formed_call: float = spec(ge=0, le=100)
    """the turn is one well-formed tool call"""
    command_ran: float = spec(ge=0, le=100)
    """the command ran (exit code 0, in time)"""
    no_error: float = spec(ge=0, le=100)
    """its output shows no error"""
    tests_improved: float = spec(ge=0, le=100)
    """more FAIL_TO_PASS tests pass than ever before"""


@dataclass(frozen=True, kw_only=True)
class RewardConfig:
    """`agent.reward`: the terminal reward and the process rewards (forgeline.agent.rewards)."""

    kind: Literal["terminal", "shaped"]
    """terminal (1 resolved, else 0) | shaped (SWE-Master: by outcome, minus a step penalty)"""
    success: float = spec(ge=-100, le=100)
    """shaped: reward of a resolved episode"""
    failure: float = spec(ge=-100, le=100)
    """shaped: reward of a failed, step_limit or invalid episode"""
    timeout: float = spec(ge=-100, le=100)
    """shaped: reward of an episode whose outcome is in timeout_outcomes"""
    timeout_outcomes: list[Outcome]
    """outcomes that get the timeout reward"""
    step_penalty_per_step: float = spec(ge=0)
    """shaped: minus min(steps x this, step_penalty_cap)"""
    step_penalty_cap: float = spec(ge=0)
    """shaped: the largest step penalty"""
    process_weight: float = spec(ge=0)
    """scale of the process rewards in the returns (0: off)"""
    process_weights: ProcessWeightsConfig


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """`agent`: the tool-calling agent, the same protocol for the tiny and a real model."""

    tools: list[Tool] = spec(contains="submit")
    """tools offered (submit among them)"""
    max_steps: int = spec(ge=1)
    """assistant turns per episode"""
    max_new_tokens: int = spec(ge=1)
    """generated tokens per turn"""
    max_total_tokens: int = spec(ge=0)
    """budget of input + output tokens over the episode (0: none)"""
    context_limit: int = spec(ge=64)
    """prompt + max_new_tokens must fit (lowered to the model's context)"""
    command_timeout_s: float = spec(gt=0)
    """CPU-time limit of one bash/edit command, seconds of its container's CPU (4x in wall time)"""
    wall_time_s: float = spec(gt=0)
    """wall-time limit of an episode, seconds (-> outcome timeout)"""
    max_tool_output_chars: int = spec(ge=64)
    """a tool result is cut to this many characters (head + tail)"""
    max_invalid_calls: int = spec(ge=1)
    """turns in a row without a well-formed call -> outcome invalid"""
    max_malformed_turns: int = spec(ge=0)
    """turns without a well-formed call in the whole episode -> outcome invalid (0: no limit)"""
    temperature: float = spec(ge=0)
    """sampling temperature (PPO optimises softmax(logits / T), what it samples)"""
    top_p: float = spec(gt=0, le=1)
    """nucleus sampling (PPO refuses < 1: its log-probs are of the whole softmax)"""
    normalize_pytest: bool
    """drop pytest run times and progress padding from tool outputs"""
    alignment: Literal["ids", "text"]
    """what alignment_valid requires: text (the stored ids decode to the rendering) | ids"""
    credit_unsubmitted: bool
    """count a passing diff as resolved without submit"""
    rollout: RolloutConfig
    oracle: OracleConfig
    reward: RewardConfig


# -- serving -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class VllmConfig:
    """`serving.vllm`: the server a stage starts (forgeline.policy.serve.ServeOptions)."""

    dtype: Literal["float32", "bfloat16", "float16", "auto"]
    """weights and activations dtype"""
    kv_cache_gib: float = spec(gt=0)
    """KV cache size on CPU, GiB (a GPU build sizes its own)"""
    max_model_len: int | None = spec(ge=64)
    """context in tokens (null: the model's)"""
    chunked_prefill: bool
    """split long prefills into chunks"""
    max_num_batched_tokens: int | None = spec(ge=64)
    """tokens per engine step (null: the context, at least 2048)"""
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
    """largest adapter rank served (PPO's lora.r must fit)"""
    startup_timeout_s: float = spec(gt=0)
    """a server not ready after this many seconds fails the stage with its log"""
    extra_args: list[str]
    """more server flags, verbatim"""


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    """`serving`: how the stages that generate run the policy."""

    engine: Literal["hf", "vllm", "openai"]
    """hf: transformers in process | vllm: the stage starts a server | openai: one already running"""
    base_url: str | None
    """engine openai: the server, e.g. http://127.0.0.1:8000/v1"""
    served_model: str | None
    """engine openai: the served model's name"""
    vllm: VllmConfig

    def problems(self) -> list[tuple[str, str]]:
        if self.engine == "openai" and not (self.base_url and self.served_model):
            return [("engine", "openai needs serving.base_url and serving.served_model")]
        return []


# -- train -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class SyntheticConfig:
    """`train.sft.synthetic`: mutation/fix conversations made without a sandbox."""

    examples: int = spec(ge=0)
    """how many"""
    stdlib: bool
    """draw sources from the interpreter's standard library"""
    repos: bool
    """... and from the SFT repositories' package code"""
    max_file_bytes: int = spec(ge=1)
    """larger source files are not used"""
    max_lines: int = spec(ge=1)
    """lines of the function shown (the window starts at the def)"""
    per_file: int = spec(ge=1)
    """examples per source file at most"""
    rename: float = spec(ge=0, le=1)
    """share with fresh function/folder/module names (to copy, not recall)"""
    max_guesses: int = spec(ge=0)
    """the fix reached by the scan after at most this many wrong edits (0: straight away)"""
    recovery: float = spec(ge=0, le=1)
    """share that first shows a broken call or a failed edit and its error, then the call done right"""
    kinds: list[Mutation] = spec(min_items=1)
    """mutation kinds"""


@dataclass(frozen=True, kw_only=True)
class SftConfig:
    """`train.sft`: supervised fine-tuning of the tiny model into the base policy."""

    max_seq_len: int = spec(ge=16)
    """tokens; longer examples are cut (their prefix kept)"""
    tokens_per_batch: int = spec(ge=16)
    """padded tokens per optimizer step (batch x longest example)"""
    sort_window: int = spec(ge=0)
    """examples sorted by length within windows of this many shuffled ones, then packed (0: off)"""
    epochs: int = spec(ge=1)
    """passes over the data (max_steps > 0 overrides)"""
    max_steps: int = spec(ge=0)
    """optimizer steps (0: epochs decide)"""
    lr: float = spec(gt=0)
    """peak AdamW learning rate"""
    min_lr_ratio: float = spec(ge=0, le=1)
    """final lr = lr x this"""
    warmup_steps: int = spec(ge=0)
    """linear warm-up steps"""
    schedule: Literal["cosine", "linear"]
    """decay after warm-up"""
    weight_decay: float = spec(ge=0)
    """AdamW weight decay (not on norms and biases)"""
    betas: list[float] = spec(ge=0, lt=1, min_items=2, max_items=2)
    """AdamW betas"""
    grad_clip: float = spec(gt=0)
    """max global gradient norm"""
    threads: int = spec(ge=1)
    """torch threads"""
    autocast: Literal["bfloat16"] | None
    """matmuls and attention in this dtype, weights, gradients and AdamW in float32 (null: none)"""
    oracle_repeat: int = spec(ge=1)
    """each resolved oracle episode appears this often per epoch"""
    synthetic: SyntheticConfig


@dataclass(frozen=True, kw_only=True)
class RolloutsConfig:
    """`train.rollouts`: offline multi-seed rollouts of the base policy (the critic's data)."""

    samples_per_task: int = spec(ge=1)
    """episodes per train task (seeds shared with difficulty and evaluation)"""
    threads: int = spec(ge=1)
    """cores the job holds (Snakemake threads); the hf engine generates on one thread either way"""


@dataclass(frozen=True, kw_only=True)
class AdapterConfig:
    """A LoRA adapter (PEFT)."""

    r: int = spec(ge=1)
    """rank"""
    alpha: int = spec(ge=1)
    """lora_alpha (scale alpha / r)"""
    dropout: float = spec(ge=0, lt=1)
    """lora_dropout"""
    target_modules: list[str]
    """the projections adapted in every layer"""


@dataclass(frozen=True, kw_only=True)
class CriticConfig:
    """`train.critic`: the value model, trained offline on the base policy's episodes."""

    gamma: float = spec(ge=0, le=1)
    """discount per action token in the targets"""
    lam: float = spec(ge=0, le=1)
    """lambda of the lambda-return targets"""
    heldout: Literal["split", "tasks"]
    """val/test episodes: split = on the frozen split's val/test tasks | tasks = a hash split of the train tasks"""
    split: FractionsConfig
    max_seq_len: int = spec(ge=16)
    """tokens; longer episodes are dropped (reason too_long)"""
    epochs: int = spec(ge=1)
    """passes over the train episodes; the best val-MSE epoch is kept"""
    tokens_per_batch: int = spec(ge=16)
    """padded tokens per optimizer step (batch x longest episode)"""
    lr: float = spec(gt=0)
    """AdamW learning rate (after warm-up; constant)"""
    warmup_steps: int = spec(ge=0)
    """linear warm-up steps"""
    weight_decay: float = spec(ge=0)
    """AdamW weight decay (not on norms and biases)"""
    betas: list[float] = spec(ge=0, lt=1, min_items=2, max_items=2)
    """AdamW betas"""
    grad_clip: float = spec(gt=0)
    """max global gradient norm"""
    mode: Literal["full", "lora"]
    """full: fine-tune the backbone | lora: frozen backbone + adapter"""
    lora: AdapterConfig
    threads: int = spec(ge=1)
    """torch threads"""

    def problems(self) -> list[tuple[str, str]]:
        total = self.split.train + self.split.val + self.split.test
        if abs(total - 1.0) > 1e-6:
            return [("split", f"train/val/test fractions sum to {total:g}, not 1")]
        return []


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """`train.ppo`: PPO of a LoRA adapter on the base policy against the critic."""

    steps: int = spec(ge=1)
    """PPO steps"""
    tasks_per_step: int = spec(ge=1)
    """B: tasks sampled from the train pool per step"""
    samples_per_task: int = spec(ge=1)
    """episodes per sampled task and step"""
    gamma: float = spec(ge=0, le=1)
    """discount per action token"""
    lam: float = spec(ge=0, le=1)
    """GAE lambda per action token (1: return - V(s_t))"""
    clip_ratio: float = spec(ge=0)
    """PPO ratio clip epsilon"""
    value_clip: float = spec(ge=0)
    """value clip around the values before the critic updates (0: off)"""
    kl_mode: Literal["loss", "penalty", "none"]
    """loss: kl_coef x KL in the actor loss | penalty: in the rewards | none"""
    kl_coef: float = spec(ge=0)
    """weight of the KL to the base policy (adapter disabled)"""
    kl_estimator: Literal["k1", "k2", "k3"]
    """Schulman's estimators; penalty mode always uses k1 per token"""
    entropy_coef: float = spec(ge=0)
    """entropy bonus weight"""
    whiten_advantages: bool
    """advantages -> zero mean, unit variance over the step's action tokens"""
    ppo_epochs: int = spec(ge=1)
    """actor passes over the step's episodes"""
    minibatches: int = spec(ge=1)
    """optimizer steps per pass (episodes split evenly, seeded order)"""
    critic_updates: int = spec(ge=0)
    """critic passes per step, before GAE is recomputed"""
    actor_lr: float = spec(ge=0)
    """AdamW lr of the adapter (constant)"""
    critic_lr: float = spec(ge=0)
    """AdamW lr of the critic (constant)"""
    betas: list[float] = spec(ge=0, lt=1, min_items=2, max_items=2)
    """AdamW betas (both optimizers)"""
    weight_decay: float = spec(ge=0)
    """AdamW weight decay (both optimizers)"""
    grad_clip: float = spec(ge=0)
    """max global gradient norm (each optimizer)"""
    lora: AdapterConfig
    critic_mode: Literal["full", "lora"]
    """full: train all critic weights | lora: frozen critic + adapter (critic_lora)"""
    critic_lora: AdapterConfig
    checkpoint_every: int = spec(ge=1)
    """steps between checkpoints (the last step always gets one)"""
    keep_checkpoints: int = spec(ge=0)
    """newest checkpoints kept (0: all)"""
    threads: int = spec(ge=1)
    """torch threads per process"""


@dataclass(frozen=True, kw_only=True)
class GRPOConfig:
    """`train.grpo`: GRPO of a LoRA adapter on the base policy: group-relative advantages, no critic."""

    steps: int = spec(ge=1)
    """GRPO steps"""
    tasks_per_step: int = spec(ge=1)
    """tasks sampled from the train pool per step"""
    group_size: int = spec(ge=2)
    """G: episodes per sampled task and step (one group)"""
    advantage: Literal["std", "mean", "loo"]
    """std: (r - group mean) / group std | mean: r - group mean | loo: r - mean of the others"""
    clip_low: float = spec(ge=0, lt=1)
    """eps_low: the ratio is clipped below at 1 - clip_low (negative advantages)"""
    clip_high: float = spec(ge=0)
    """eps_high: the ratio is clipped above at 1 + clip_high (positive advantages)"""
    kl_coef: float = spec(ge=0)
    """weight of the KL to the base policy (adapter disabled) in the loss (0: no KL term)"""
    kl_estimator: Literal["k1", "k2", "k3"]
    """Schulman's estimator of the KL term and of the logged KL"""
    epochs: int = spec(ge=1)
    """passes over the step's episodes"""
    minibatches: int = spec(ge=1)
    """optimizer steps per pass (episodes split evenly, seeded order)"""
    lr: float = spec(ge=0)
    """AdamW lr of the adapter (constant)"""
    betas: list[float] = spec(ge=0, lt=1, min_items=2, max_items=2)
    """AdamW betas"""
    weight_decay: float = spec(ge=0)
    """AdamW weight decay"""
    grad_clip: float = spec(ge=0)
    """max global gradient norm"""
    lora: AdapterConfig
    checkpoint_every: int = spec(ge=1)
    """steps between checkpoints (the last step always gets one)"""
    keep_checkpoints: int = spec(ge=0)
    """newest checkpoints kept (0: all)"""
    threads: int = spec(ge=1)
    """torch threads per process"""


@dataclass(frozen=True, kw_only=True)
class WarmStartConfig:
    """`train.warm_start.NAME`: a run started from a checkpoint of another (results/warm/NAME/):
    the parent's adapter (PPO: and critic), a fresh optimizer, its steps counted on from the parent's."""

    parent: str = spec(pattern=REPO_NAME)
    """the run it continues: ppo, grpo, or the name of another warm start"""
    step: int | None = spec(None, ge=1)
    """the parent's checkpoint it starts from (one of its series steps; null: its last step)"""
    steps: int = spec(ge=1)
    """steps it runs after the parent's, with the config of the parent's algorithm"""


def checkpoint_steps(first: int, last: int, every: int) -> list[int]:
    """The steps after which a PPO/GRPO run of steps first+1..last writes a checkpoint and a
    series entry: the multiples of `every` (counted from 0, as its parent's were) and the last."""
    return sorted({s for s in range(first + 1, last + 1) if s % every == 0} | {last})


# the runs a warm start can name as its parent besides other warm starts, and their artifacts
RL_RUNS = {"ppo": "results/adapter", "grpo": "results/adapter-grpo"}
WARM_DIR = "results/warm"


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """`train`: SFT of the tiny model, the offline rollouts, the critic, PPO and GRPO."""

    sft: SftConfig
    rollouts: RolloutsConfig
    critic: CriticConfig
    ppo: PPOConfig
    grpo: GRPOConfig
    warm_start: dict[str, WarmStartConfig]
    """name -> a run warm-started from another's checkpoint (results/warm/NAME/)"""

    def algorithm(self, run: str) -> str:
        """ppo or grpo: the algorithm of a run (a warm start's is its root parent's)."""
        seen = []
        while run in self.warm_start and run not in seen:
            seen.append(run)
            run = self.warm_start[run].parent
        return run

    def steps_of(self, run: str) -> tuple[int, int]:
        """(first, last): a run trains steps first+1..last (a warm start's first is the step of
        its parent's checkpoint)."""
        if run in RL_RUNS:
            return 0, int(getattr(self, run).steps)
        w = self.warm_start[run]
        first = w.step if w.step is not None else self.steps_of(w.parent)[1]
        return first, first + int(w.steps)

    def series_steps(self, run: str) -> list[int]:
        """The steps of a run's checkpoint series (checkpoint_steps)."""
        first, last = self.steps_of(run)
        return checkpoint_steps(first, last, int(getattr(self, self.algorithm(run)).checkpoint_every))

    def run_folder(self, run: str) -> str:
        return RL_RUNS.get(run) or f"{WARM_DIR}/{run}"

    def problems(self) -> list[tuple[str, str]]:
        out = []
        for name, w in sorted(self.warm_start.items()):
            if not re.match(REPO_NAME, name):
                out.append(("warm_start", f"{name!r}: a warm start's name is a folder name (letters, digits, _ . -)"))
            elif name in RL_RUNS:
                out.append(("warm_start", f"{name!r}: a warm start may not be named {' or '.join(RL_RUNS)}; rename it"))
            elif w.parent not in RL_RUNS and w.parent not in self.warm_start:
                out.append(("warm_start", f"{name}.parent: {w.parent!r} is none of ppo, grpo, "
                                          f"{', '.join(sorted(self.warm_start))}"))
            elif self.algorithm(name) not in RL_RUNS:
                out.append(("warm_start", f"{name}.parent: the parents of {name} form a cycle"))
            elif w.step is not None and w.step not in self.series_steps(w.parent):
                out.append(("warm_start", f"{name}.step: {w.step} is not a checkpoint of {w.parent} (its series: "
                                          f"steps {', '.join(map(str, self.series_steps(w.parent)))}; "
                                          f"checkpoint_every sets them)"))
        return out


# -- evaluation --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class EvalPolicyConfig:
    """One evaluated policy: an HF model folder, or a PEFT adapter and its base."""

    path: str
    """the model or adapter folder"""
    base: str | None = spec(None, absent_if_none=True)
    """an adapter's base model folder (left out: `path` is a whole model)"""
    step: int | None = spec(None, ge=1, absent_if_none=True)
    """a checkpoint of the run whose artifact `path` is: PATH/checkpoints/step-NNNNNN (left out: the final adapter)"""
    panels: list[str] | None = spec(None, min_items=1, unique=True, absent_if_none=True)
    """the panels it runs on (left out: every panel)"""


@dataclass(frozen=True, kw_only=True)
class EvalPairConfig:
    """`evaluation.pairs[i]`: one more paired comparison, besides every policy against the base."""

    policy: str
    """the policy judged (a key of policies)"""
    against: str
    """the policy it is compared with (a key of policies)"""


@dataclass(frozen=True, kw_only=True)
class EvalPowerConfig:
    """`evaluation.power`: each panel's minimal detectable effect, stated before its numbers."""

    level: float = spec(gt=0, lt=1)
    """the power at which a gain counts as detectable"""
    discordance: float = spec(ge=0, lt=1)
    """the share of pairs two equally good policies disagree on (the effect's noise floor)"""


@dataclass(frozen=True, kw_only=True)
class EvalGateConfig:
    """`evaluation.gate`: the continue/stop decision taken from one reported comparison."""

    policy: str
    """the policy the decision is about (a key of policies)"""
    against: str
    """what it must beat: the base, or the other side of a configured pair"""
    panel: str
    """the panel the comparison is read on (a key of panels)"""
    unit: Literal["pair", "task"]
    """pair: McNemar over (task, seed) pairs (on these tasks) | task: the task-level sign flip (over tasks)"""
    continue_if: Literal["better", "not_worse"]
    """better: significantly better (Holm-adjusted p < alpha) | not_worse: not significantly worse"""


# names the tables give a panel's own entries beside its policies (metrics.json)
RESERVED_POLICY_NAMES = ("mde", "gate")


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """`evaluation`: paired runs, every policy on every panel with the same tasks, config and seeds."""

    base: str
    """the policy every other one is compared with (a key of policies)"""
    policies: dict[str, EvalPolicyConfig]
    """name -> the policy's folders"""
    panels: dict[str, list[str]]
    """name -> task JSONL files"""
    k: int = spec(ge=1)
    """episodes per task (1: the unit of the paired test)"""
    k_per_panel: dict[str, int] = spec(ge=1)
    """panel -> its own k"""
    seeds: list[int] | None = spec(ge=0, le=MAX_SEED)
    """explicit episode seeds, k of them (null: derived from the root seed)"""
    alpha: float = spec(gt=0, lt=1)
    """significance level of the verdicts"""
    confidence: float = spec(gt=0, lt=1)
    """level of the Wilson intervals"""
    threads: int = spec(ge=1)
    """cores a job holds (Snakemake threads); the hf engine generates on one thread either way"""
    dtype: Literal["float32", "bfloat16", "float16"]
    """weights dtype of the hf engine"""
    pairs: list[EvalPairConfig]
    """comparisons besides every policy against the base (e.g. grpo against ppo)"""
    power: EvalPowerConfig
    gate: EvalGateConfig | None
    """the continue/stop rule (null: no decision is taken)"""

    def comparisons(self) -> list[tuple[str, str]]:
        """(policy, against) of every comparison the tables report: each policy against the base,
        then the configured pairs."""
        return [(p, self.base) for p in sorted(self.policies) if p != self.base] + \
            [(x.policy, x.against) for x in self.pairs]

    def panels_of(self, policy: str) -> list[str]:
        """The panels a policy runs on (its own list, or every panel)."""
        return list(self.policies[policy].panels or sorted(self.panels)) if policy in self.policies else []

    def policies_on(self, panel: str) -> list[str]:
        return [p for p in sorted(self.policies) if panel in self.panels_of(p)]

    def problems(self) -> list[tuple[str, str]]:
        out = []
        names = sorted(self.policies)
        for name in names:
            if name in RESERVED_POLICY_NAMES or "_vs_" in name:
                out.append(("policies", f"{name!r}: a policy may not be named {', '.join(RESERVED_POLICY_NAMES)} "
                                        f"or contain '_vs_' (the tables' own keys); rename it"))
        for i, pair in enumerate(self.pairs):
            for side in (pair.policy, pair.against):
                if side not in self.policies:
                    out.append((f"pairs.{i}", f"{side!r} is not a key of evaluation.policies ({', '.join(names)})"))
            if pair.policy == pair.against:
                out.append((f"pairs.{i}", f"{pair.policy} against itself"))
        pairs = self.comparisons()
        for i, pair in enumerate(pairs):
            if pair in pairs[:i] or pair[::-1] in pairs[:i]:
                out.append(("pairs", f"{pair[0]} against {pair[1]} is reported twice (every policy is compared "
                                     f"with the base, {self.base}, already); drop it from evaluation.pairs"))
        if self.gate is not None:
            g = self.gate
            if (g.policy, g.against) not in pairs:
                out.append(("gate", f"{g.policy} against {g.against} is not a reported comparison "
                                    f"({', '.join(f'{a} against {b}' for a, b in pairs)}); add it to evaluation.pairs"))
            if g.panel not in self.panels:
                out.append(("gate.panel", f"{g.panel!r} is not a key of evaluation.panels ({', '.join(sorted(self.panels))})"))
        for name, policy in sorted(self.policies.items()):
            for panel in policy.panels or ():
                if panel not in self.panels:
                    out.append(("policies", f"{name}.panels: {panel!r} is not a key of evaluation.panels "
                                            f"({', '.join(sorted(self.panels))})"))
        for policy, against in pairs:
            if not set(self.panels_of(policy)) & set(self.panels_of(against)):
                out.append(("pairs", f"{policy} against {against}: no panel runs both (their panels: "
                                     f"{', '.join(self.panels_of(policy))}; {', '.join(self.panels_of(against))})"))
        if self.gate is not None and self.gate.panel in self.panels \
                and not {self.gate.policy, self.gate.against} <= set(self.policies_on(self.gate.panel)):
            out.append(("gate.panel", f"{self.gate.panel} does not run both {self.gate.policy} and {self.gate.against} "
                                      f"(see their panels)"))
        if self.seeds is not None and len(self.seeds) != self.k:
            out.append(("seeds", f"{len(self.seeds)} seeds for k={self.k}"))
        for panel, k in sorted(self.k_per_panel.items()):
            if self.seeds is not None and k != self.k:
                out.append(("k_per_panel", f"{panel}={k} with explicit evaluation.seeds (k={self.k}): "
                                           f"set seeds to null, or k_per_panel.{panel} to {self.k}"))
        return out


# -- publish -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class PublishCardConfig:
    """`publish.card`: the metadata of the adapter's model card (rule publish_adapter)."""

    license: str = spec(pattern="^[a-z0-9][a-z0-9.+-]*$")
    """the card's license id (hub ids: apache-2.0, mit, other, unknown, ...)"""
    tags: list[str] = spec(pattern="^[A-Za-z0-9][A-Za-z0-9._:-]*$", unique=True)
    """hub tags of the card"""


@dataclass(frozen=True, kw_only=True)
class PublishHubConfig:
    """`publish.hub`: where `forgeline publish` uploads the two folders (a user action, not a rule)."""

    adapter_repo: str | None = spec(pattern=HUB_REPO)
    """the model repository of results/publish/adapter, "org/name" (null: not configured)"""
    dataset_repo: str | None = spec(pattern=HUB_REPO)
    """the dataset repository of results/dataset/hf, "org/name" (null: not configured)"""
    private: bool
    """create the repositories private (an existing public one is refused while this is true)"""
    connect_timeout_s: float = spec(gt=0, le=120)
    """seconds to wait for the hub endpoint before stopping, with nothing uploaded"""


@dataclass(frozen=True, kw_only=True)
class PublishConfig:
    """`publish`: the hub-ready adapter repository and the upload of it and the dataset."""

    card: PublishCardConfig
    hub: PublishHubConfig


# -- the whole config --------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ParamsConfig:
    """params.yaml and its overlays, merged."""

    seed: int = spec(ge=0, le=MAX_SEED)
    """the root seed; each stage derives its own from it and its name"""
    repos: ReposConfig
    sandbox: SandboxConfig
    tasks: TasksConfig
    policy: PolicyConfig
    agent: AgentConfig
    serving: ServingConfig
    train: TrainConfig
    evaluation: EvaluationConfig
    publish: PublishConfig

    def problems(self) -> list[tuple[str, str]]:
        """A policy that names a checkpoint of a run of this config names one of its series, and
        no policy reads the base folder of the other policy.base.source (nothing would build it)."""
        out = []
        source = self.policy.base.source
        unbuilt = f"results/policy/{'hub' if source == 'sft' else 'sft'}"
        for name, policy in sorted(self.evaluation.policies.items()):
            for key in ("path", "base"):
                if (getattr(policy, key) or "").rstrip("/") == unbuilt:
                    out.append(("evaluation", f"evaluation.policies.{name}.{key}: {unbuilt} is not built when "
                                              f"policy.base.source is {source}; use results/policy/{source}"))
        runs = {self.train.run_folder(r): r for r in [*RL_RUNS, *self.train.warm_start]}
        for name, policy in sorted(self.evaluation.policies.items()):
            run = runs.get(policy.path.rstrip("/"))
            if policy.step is not None and run is not None and policy.step not in self.train.series_steps(run):
                out.append(("evaluation", f"evaluation.policies.{name}.step: {policy.step} is not a checkpoint of "
                                          f"{run} ({policy.path}: steps "
                                          f"{', '.join(map(str, self.train.series_steps(run)))})"))
        return out
