"""The adapter's model card (README.md of results/publish/adapter), rendered from plain data.

`adapter_card(facts, license, tags)` returns the card: YAML metadata that
`huggingface_hub.ModelCard` parses (base_model for a hub base, library_name: peft, license,
tags, pipeline_tag), then the adapter, its base, the training data, the paired evaluation, what
the card does not claim, how to load it, every file with its bytes and sha256, and provenance.
Every number in it is a value of `facts`, which the stage (`forgeline.publish.adapter`) reads
from the run's artifacts and manifests; nothing here is typed by hand.

`facts` (plain data):

    adapter:    r, alpha, dropout, target_modules, tensors, tensor_bytes (the weights' payload),
                weights_bytes (adapter_model.safetensors), steps
    base:       {"kind": "hub", repo_id, revision}, or {"kind": "bundled", dir, source,
                tree_sha256, parameters}: a local base copied into the folder
    training:   algorithm, split (the split it trained on), tasks, repos, episodes, kept,
                split_digest, digest_scheme, counts {split: tasks}, split_sha256
    evaluation: policy, base, panels {panel: {pairs, trained_on, rows {policy: the tables' row},
                comparison (the tables' comparison of policy vs base, verdict included)}}
    code:       forgeline, commit, dirty (the adapter's manifest)
    files:      {path in the folder: {bytes, sha256}}, the card itself aside

`files_table` / `card_files`: the "## Files" table (one row per file: `path`, bytes, `sha256`)
and its parse; `forgeline publish` checks a folder against it before uploading. The dataset
card of `forgeline export-dataset` writes the same rows.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

CARD = "README.md"
FILES_HEADING = "## Files"
_FILE_ROW = re.compile(r"^\| `(?P<path>[^`|]+)` \| (?P<bytes>\d+) \| `(?P<sha256>[0-9a-f]{64})` \|$")


# -- the files table ---------------------------------------------------------------------------

def files_table(files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown lines of the files table: {path: {bytes, sha256}} -> header + one row per path,
    sorted."""
    return ["| file | bytes | sha256 |", "|---|---|---|",
            *(f"| `{path}` | {files[path]['bytes']} | `{files[path]['sha256']}` |" for path in sorted(files))]


def card_files(text: str) -> dict[str, dict[str, Any]]:
    """{path: {bytes, sha256}} of the rows under the card's "## Files" heading (up to the next
    heading). ValueError when the card has no such section, it lists no file, or a path twice."""
    lines = text.splitlines()
    try:
        start = lines.index(FILES_HEADING)
    except ValueError:
        raise ValueError(f"the card has no '{FILES_HEADING}' section") from None
    out: dict[str, dict[str, Any]] = {}
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if m := _FILE_ROW.match(line.strip()):
            if m["path"] in out:
                raise ValueError(f"the card lists {m['path']} twice")
            out[m["path"]] = {"bytes": int(m["bytes"]), "sha256": m["sha256"]}
    if not out:
        raise ValueError(f"the card's '{FILES_HEADING}' section lists no file")
    return out


# -- pieces of the card ------------------------------------------------------------------------

def _p(p: float) -> str:
    """An exact p as the tables print it: 4 decimals, scientific below 1e-4."""
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def card_metadata(facts: Mapping[str, Any], license: str, tags: list[str]) -> dict[str, Any]:
    """The card's YAML header. `base_model` only for a hub base: the hub links it as a model id,
    and a bundled base has none."""
    meta: dict[str, Any] = {}
    if facts["base"]["kind"] == "hub":
        meta["base_model"] = facts["base"]["repo_id"]
    meta.update({"library_name": "peft", "license": license, "tags": list(tags),
                 "pipeline_tag": "text-generation"})
    return meta


def panel_lines(panel: str, p: Mapping[str, Any], policy: str, base: str) -> list[str]:
    """One panel of the paired evaluation: base and policy rows, then the tables' verdict sentence
    for policy vs base, as tables.md prints it."""
    c, confidence = p["comparison"], p["rows"][policy]["confidence"]
    task = "task_p" in c
    what = ", the tasks PPO trained on" if p["trained_on"] else ""
    lines = [f"### Panel `{panel}` ({p['pairs']} task x seed pairs{what})", "",
             f"| policy | resolved | % | {confidence:.0%} CI (Wilson) | W / T / L vs {base} | McNemar p "
             f"| tasks up / same / down | task-level p | mean input tokens | mean steps |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    paired = [f"{c['wins']} / {c['ties']} / {c['losses']}", _p(c["mcnemar_p"]),
              f"{c['task_up']} / {c['task_same']} / {c['task_down']}" if task else "-",
              _p(c["task_p"]) if task else "-"]
    for name in (base, policy):
        row = p["rows"][name]
        cells = paired if name == policy else ["-"] * 4
        lines.append(f"| {name} | {row['resolved']}/{row['n']} | {100 * row['success_rate']:.1f} "
                     f"| {100 * row['ci_low']:.1f}-{100 * row['ci_high']:.1f} | {' | '.join(cells)} "
                     f"| {_num(row.get('mean_input_tokens'), '.1f')} | {_num(row.get('mean_steps'), '.2f')} |")
    return lines + ["", f"**Verdict:** {c['verdict']}.", ""]


def non_claims(facts: Mapping[str, Any]) -> list[str]:
    """What the card does not claim, one sentence each, from the evaluation's own numbers."""
    ev, out = facts["evaluation"], []
    policy, base = ev["policy"], ev["base"]
    for panel, p in ev["panels"].items():
        c = p["comparison"]
        if not c["significant"]:
            # with several comparisons on the panel `significant` reads the Holm-adjusted p: say which
            holm = f", Holm-adjusted over {c['holm_m']} comparisons" if c.get("holm_m", 1) > 1 else ""
            decided_by = c.get("mcnemar_p_holm", c["mcnemar_p"]) if holm else c["mcnemar_p"]
            out.append(f"That {policy} solves more (or fewer) tasks than {base} on panel `{panel}`: the paired "
                       f"test found no significant difference there (McNemar p = {_p(decided_by)}{holm}, "
                       f"alpha {c['alpha']}).")
        elif "task_p" in c and not c.get("task_significant"):
            out.append(f"That the difference on panel `{panel}` carries over to other tasks: it is significant "
                       f"over these task x seed pairs (McNemar p = {_p(c['mcnemar_p'])}), not over tasks as a "
                       f"sample (task-level p = {_p(c['task_p'])}, {c['task_up']} up, {c['task_same']} same, "
                       f"{c['task_down']} down).")
        if p["trained_on"]:
            out.append(f"That it generalises from panel `{panel}`: those are the tasks PPO trained on.")
    out.append("Anything about other benchmarks (SWE-bench Verified, SWE-smith at large), other agent "
               "protocols, step or token budgets, or other base models: the panels above, under one agent "
               "config and seeds shared by both policies, are all it was measured on.")
    if facts["base"]["kind"] == "bundled":
        out.append(f"A useful coding assistant: the base is a tiny model trained from scratch in this run "
                   f"({facts['base']['parameters']:,} parameters); the adapter shows the pipeline, not a "
                   f"capability.")
    out.append("Any speed: runtimes are machine-dependent and left out.")
    return out


def load_lines(facts: Mapping[str, Any]) -> list[str]:
    """How to load the adapter (and, for a bundled base, from a download)."""
    base = facts["base"]
    if base["kind"] == "hub":
        return ["```python", "from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer", "",
                "folder = \"<this folder, or the hub repository it was uploaded to>\"",
                "model = AutoPeftModelForCausalLM.from_pretrained(folder)  # fetches the base at its pinned commit",
                f"tokenizer = AutoTokenizer.from_pretrained(\"{base['repo_id']}\", revision=\"{base['revision']}\")",
                "```", ""]
    d = base["dir"]
    return ["In the checkout that built it (any working directory): `adapter_config.json` names the "
            f"absolute path of `{d}/` there.", "",
            "```python", "from peft import AutoPeftModelForCausalLM", "",
            "folder = \"<this folder>\"",
            "model = AutoPeftModelForCausalLM.from_pretrained(folder)", "```", "",
            f"Anywhere else (a download, a copy): the path recorded there does not exist, so give the base "
            f"in `{d}/` explicitly.", "",
            "```python", "from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
            "folder = \"<this folder, or the hub repository's snapshot_download() folder>\"",
            f"base = AutoModelForCausalLM.from_pretrained(f\"{{folder}}/{d}\")",
            "model = PeftModel.from_pretrained(base, folder)",
            f"tokenizer = AutoTokenizer.from_pretrained(f\"{{folder}}/{d}\")", "```", ""]


def adapter_card(facts: Mapping[str, Any], license: str, tags: list[str]) -> str:
    """The model card (README.md) of the published adapter folder; see the module docstring."""
    import yaml

    a, base, t, ev, code = (facts[k] for k in ("adapter", "base", "training", "evaluation", "code"))
    meta = yaml.safe_dump(card_metadata(facts, license, tags), sort_keys=False, allow_unicode=True, width=1000)
    files = facts["files"]
    base_name = f"`{base['repo_id']}`" if base["kind"] == "hub" else "a tiny Qwen3 trained in this run"
    lines = [f"---\n{meta}---", "", f"# {t['algorithm']} LoRA adapter of {base_name} (forgeline)", "",
             f"A LoRA adapter trained with {t['algorithm']} by forgeline on {t['tasks']} SWE-smith-style tasks "
             f"(split `{t['split']}`: {', '.join(t['repos'])}), through forgeline's tool-calling agent and "
             f"sandbox. Every number on this card is read from the run's artifacts and manifests by the rule "
             f"`publish_adapter`; `forgeline publish` checks each file against the table under Files before "
             f"it uploads anything.", "",
             "## Adapter", "",
             "| | |", "|---|---|",
             f"| LoRA rank r | {a['r']} |",
             f"| LoRA alpha | {a['alpha']} |",
             f"| LoRA dropout | {a['dropout']} |",
             f"| target modules | {', '.join(a['target_modules'])} |",
             f"| tensors | {a['tensors']} |",
             f"| tensor bytes (the weights' payload) | {a['tensor_bytes']} |",
             f"| `adapter_model.safetensors` | {a['weights_bytes']} bytes |",
             f"| this folder | {sum(f['bytes'] for f in files.values())} bytes in {len(files)} files, "
             f"this card aside |",
             f"| {t['algorithm']} steps | {a['steps']} |", "",
             "## Base model", ""]
    if base["kind"] == "hub":
        lines += [f"`{base['repo_id']}` at its pinned commit `{base['revision']}`: `adapter_config.json` names "
                  f"it (`base_model_name_or_path`, `revision`), so PEFT fetches exactly that commit.", ""]
    else:
        lines += [f"The tiny Qwen3 this run trained (`{base['source']}`, {base['parameters']:,} parameters). It "
                  f"is on no hub, so it travels in `{base['dir']}/` (its files are listed below); it is byte for "
                  f"byte the folder {t['algorithm']} trained from (tree sha256 `{base['tree_sha256']}`, as the "
                  f"adapter's manifest records it).", ""]
    lines += ["## Training data", "",
              f"{t['algorithm']} trained on split `{t['split']}`: {t['tasks']} tasks from {', '.join(t['repos'])} "
              f"(`{t['split']}.jsonl` sha256 `{t['split_sha256']}`, as the adapter's manifest records it); "
              f"{t['episodes']} episodes over {a['steps']} steps, {t['kept']} kept by the validity gates.", "",
              f"Split digest ({t['digest_scheme']}): `{t['split_digest']}`, over "
              + ", ".join(f"{name} {n}" for name, n in t["counts"].items())
              + " tasks. `forgeline export-dataset` publishes the same split; its card names this digest.", "",
              "## Evaluation", "",
              f"Paired: {ev['policy']} (this adapter) and {ev['base']} (the base) ran on the same tasks with "
              f"the same seeds and agent config (the tables of rule `tables`).", ""]
    for panel, p in ev["panels"].items():
        lines += panel_lines(panel, p, ev["policy"], ev["base"])
    lines += ["McNemar p: exact two-sided binomial test on the discordant pairs (wins vs losses). With several "
              "seeds per task, task-level p asks whether the difference carries over to tasks as a sample "
              "(exact paired sign-flip test of the per-task differences).", "",
              "## What this card does not claim", "",
              *(f"- {s}" for s in non_claims(facts)), "",
              "## How to load", "",
              *load_lines(facts),
              FILES_HEADING, "",
              *files_table(files), "",
              "## Provenance", "",
              f"Trained by forgeline {code['forgeline']} at commit `{code['commit']}`"
              f"{' with uncommitted changes' if code['dirty'] else ''} (the adapter's manifest). "
              f"The weights and checkpoint-summary.json are byte for byte those of the run's adapter; the "
              f"manifest of this folder lies beside it (`adapter.manifest.json`), outside what is uploaded.", ""]
    return "\n".join(lines)


__all__ = ["CARD", "FILES_HEADING", "adapter_card", "card_files", "card_metadata", "files_table", "non_claims"]
