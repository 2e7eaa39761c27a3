"""The tiny policy's tokenizer: byte-level BPE trained here, with Qwen3's special tokens and
a Qwen3-style chat template (tools in the system prompt, `<tool_call>` / `<tool_response>`).

No tokenizer can be downloaded on this machine, so one is trained locally on Python source and
English text (the project's repositories and Python's own standard library). What it must share
with the real base policy (a Qwen3-8B SFT) is not its vocabulary but its protocol: the same
special tokens, each a single id, and the same chat format, so the agent loop, the tool-call
parser and the trainer's masks are the same code for both.

Determinism: the corpus is a sorted list of files chosen by a hash of their paths; training
the same corpus with the same parameters gives a byte-identical tokenizer.json.
"""
from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# Qwen3's special tokens. The first three are control tokens (special=True: dropped by
# decode(skip_special_tokens=True)); the tool and think markers are ordinary added tokens
# (special=False), as in Qwen3's tokenizer, so decoded text keeps them for the parser.
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CONTROL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                 "<think>", "</think>")
SPECIAL_TOKENS = CONTROL_TOKENS + MARKUP_TOKENS

# Qwen2/Qwen3's pre-tokenizer split: contractions, letter runs with one leading non-letter,
# single digits, punctuation runs, newlines and other whitespace.
QWEN_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                      r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Copy-friendly pre-split: letters, groups of up to 3 digits, punctuation runs and whitespace are
# each their own pre-token, so a name or a number is the same token ids wherever it stands
# (after a dot in a statement, after a space in a command, at a line start in a tool output).
# With Qwen's pattern a leading space or dot is glued to the word (`.un|changed` vs
# ` un|changed`), and copying a name means mapping between different ids.
WORDS_SPLIT_PATTERN = r"\p{L}+|\p{N}{1,3}|[^\s\p{L}\p{N}]+|\s+"
SPLIT_PATTERNS = {"qwen": QWEN_SPLIT_PATTERN, "words": WORDS_SPLIT_PATTERN}

# A Qwen3-style chat template. Differences from Qwen3's own, on purpose:
# - assistant turns are rendered as written (Qwen3 drops the <think> block of turns before the
#   last user message and strips whitespace), so rendering is prefix-stable: the render of a
#   conversation is the render of its first k turns followed by the next turn's text. The
#   agent loop and the PPO token alignment rely on that.
# - `reasoning_content` (if given) is rendered as <think>...</think> before the content.
# - the tools are listed as signatures, `edit(path, old, new, line?): <description>`, not as
#   JSON schemas: every prompt of the tiny model pays for them (~130 tokens instead of ~440).
#   The calls themselves are Qwen3's <tool_call> JSON blocks, as with the real model.
CHAT_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {%- set f = tool.function if tool.function is defined else tool %}
        {%- set required = f.parameters.required if f.parameters.required is defined else [] %}
        {{- "\n" + f.name + "(" }}
        {%- for name in f.parameters.properties %}
            {{- (", " if not loop.first else "") + name + ("" if name in required else "?") }}
        {%- endfor %}
        {{- "): " + f.description }}
    {%- endfor %}
    {{- "\n</tools>\n\nCall a tool as <tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}
            {{- raise_exception('a system message is only allowed first') }}
        {%- endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- if message.reasoning_content is string %}
            {{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}
        {%- endif %}
        {{- content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
""".strip()


@dataclass(frozen=True)
class CorpusFile:
    """One training document: a stable name (for the corpus digest) and its text."""

    name: str
    text: str


# -- corpus ---------------------------------------------------------------------------------

def stdlib_dir() -> Path:
    """The running interpreter's standard-library source folder (what `stdlib:` names mean)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _stable_rank(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def select_by_budget(names_and_sizes: Sequence[tuple[str, int]], max_bytes: int,
                     max_file_bytes: int) -> list[str]:
    """Pick files for a corpus, deterministically; returns the chosen names, sorted.

    Inputs: (name, size in bytes) pairs, a total budget and a per-file cap (bytes). Files over
    the cap are skipped (a few generated giants would dominate the merges); the rest are taken
    in the order of sha256(name), a fixed pseudo-random order, until the budget is reached.
    """
    chosen, total = [], 0
    for name, size in sorted(names_and_sizes, key=lambda ns: (_stable_rank(ns[0]), ns[0])):
        if size > max_file_bytes or total + size > max_bytes:
            continue
        chosen.append(name)
        total += size
    return sorted(chosen)


def collect_corpus(repo_dirs: Iterable[str | Path], stdlib: str | Path | None = None,
                   stdlib_max_bytes: int = 4_000_000, max_file_bytes: int = 65_536) -> list[CorpusFile]:
    """Read the training corpus: every *.py and README.md under `repo_dirs`, then a sample of
    the standard library's *.py (no tests, no site-packages) of at most `stdlib_max_bytes`.

    Names are `repo:<dir name>/<relpath>` and `stdlib:<relpath>`; the list is sorted by name.
    Undecodable files are skipped.
    """
    files: list[CorpusFile] = []
    for repo in sorted(Path(r) for r in repo_dirs):
        for path in sorted(repo.rglob("*")):
            if not path.is_file() or not (path.suffix == ".py" or path.name == "README.md"):
                continue
            if "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            files.append(CorpusFile(f"repo:{repo.name}/{path.relative_to(repo).as_posix()}", text))
    if stdlib is not None and stdlib_max_bytes > 0:
        root = Path(stdlib)
        sizes = []
        for path in root.rglob("*.py"):
            rel = path.relative_to(root)
            if {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"} \
                    & set(rel.parts):
                continue
            sizes.append((rel.as_posix(), path.stat().st_size))
        for rel in select_by_budget(sizes, stdlib_max_bytes, max_file_bytes):
            try:
                text = (root / rel).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            files.append(CorpusFile(f"stdlib:{rel}", text))
    return sorted(files, key=lambda f: f.name)


def corpus_digest(corpus: Sequence[CorpusFile]) -> str:
    """sha256 over the sorted lines `name\\0sha256(text)\\n`: what the tokenizer was trained on."""
    lines = sorted(f"{f.name}\0{hashlib.sha256(f.text.encode()).hexdigest()}\n" for f in corpus)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


# -- training -------------------------------------------------------------------------------

def train_bpe(corpus: Sequence[CorpusFile], vocab_size: int = 4096, min_frequency: int = 2,
              split: str = "qwen"):
    """Train a byte-level BPE `tokenizers.Tokenizer` on `corpus` with the pre-split `split`
    (a key of SPLIT_PATTERNS); returns it.

    The vocabulary holds exactly `vocab_size` entries: the 3 control tokens (ids 0-2), the 256
    byte symbols, the learned merges, then the 6 tool/think markers (the last ids). Same corpus
    and parameters => same tokenizer.json bytes.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, trainers

    if split not in SPLIT_PATTERNS:
        raise ValueError(f"split={split!r}: expected one of {sorted(SPLIT_PATTERNS)}")
    n_markup = len(MARKUP_TOKENS)
    floor = len(CONTROL_TOKENS) + 256 + n_markup
    if vocab_size < floor:
        raise ValueError(f"vocab_size={vocab_size} is below the {floor} ids that the special "
                         f"tokens and the 256 byte symbols need")
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERNS[split]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_markup, min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # The corpus is fed as one document per file, in name order: the order is part of the
    # input, so it is fixed here.
    tok.train_from_iterator((f.text for f in sorted(corpus, key=lambda f: f.name)),
                            trainer=trainer, length=len(corpus))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok


def wrap(tok, model_max_length: int = 4096):
    """Wrap a trained `tokenizers.Tokenizer` as a transformers fast tokenizer with Qwen3's
    eos (<|im_end|>) and pad (<|endoftext|>) tokens and the chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=ENDOFTEXT, bos_token=None,
        unk_token=None, chat_template=CHAT_TEMPLATE, model_max_length=model_max_length,
        clean_up_tokenization_spaces=False, padding_side="right")


def build_tokenizer(corpus: Sequence[CorpusFile], vocab_size: int = 4096, min_frequency: int = 2,
                    model_max_length: int = 4096, split: str = "qwen"):
    """Train and wrap in one step; returns a PreTrainedTokenizerFast."""
    return wrap(train_bpe(corpus, vocab_size, min_frequency, split), model_max_length)


def portable_tokenizer_config(path: Path) -> None:
    """Name the tokenizer class `PreTrainedTokenizerFast` in a saved tokenizer_config.json
    (transformers 5 writes its own `TokenizersBackend`, which transformers 4 - e.g. in a vLLM
    environment - cannot load), and drop how this process loaded it (`is_local`,
    `local_files_only`: transformers 5 saves them for a tokenizer read from a folder), so a
    tokenizer saved again is the file it was read from."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only"):
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


def check_special_tokens(tokenizer) -> dict[str, int]:
    """Return {token: id} for every special token; raise if one does not encode to one id."""
    ids = {}
    for token in SPECIAL_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"special token {token!r} encodes to {len(encoded)} ids: {encoded}")
        ids[token] = encoded[0]
    return ids
