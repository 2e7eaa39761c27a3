"""Helpers the Snakefile calls at parse time. Kept cheap: every cluster job re-parses the DAG."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Iterable

from forgeline import config as config_mod
from forgeline.codedeps import write_stamp
from forgeline.params import EvalPolicyConfig, ParamsConfig
from forgeline.sandbox.snapshot import snapshot_files
from forgeline.train.series import SERIES, series_dir


def config_args(files: Iterable[str | Path]) -> str:
    """`--config A --config B`: how every rule hands the same config files to the CLI."""
    return " ".join(f"--config {shlex.quote(str(f))}" for f in files)


def stage_code(module: str) -> list[str]:
    """The input that stands for a stage's code: its stamp, rewritten here (at parse time) only
    when the code the stage can run changes (`forgeline.codedeps`)."""
    return [str(write_stamp(module))]


def repo_files(repos_root: str | Path, repo: str) -> list[str]:
    """Every file of one repository snapshot: the inputs of that repo's jobs."""
    root = Path(repos_root) / repo
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: repository listed in params.yaml (repos.*) is missing; "
                                f"add it under {repos_root}/ or remove it from the list")
    return [str(p) for p in snapshot_files(root)]


def checked_yaml(*files: str | Path) -> None:
    """Parse each config file before Snakemake's `configfile:` does: a YAML error names the
    file and line (Snakemake's own message names neither). Exits with the message alone."""
    try:
        for f in files:
            config_mod.read_file(f)
    except config_mod.ConfigError as exc:
        raise SystemExit(f"forgeline: {exc}") from None


def checked_config(config: dict, files: Iterable[str | Path]) -> ParamsConfig:
    """Validate Snakemake's merged config with forgeline's schema, naming file and line, and
    check that the files it names exist; returns it typed. A problem ends the parse with the
    message alone (no stack frames): SystemExit, which Snakemake prints as it is."""
    paths = [Path(f) for f in files]
    try:
        config_mod.validate(config, paths)
        missing_extra_sources(config, paths)
    except config_mod.ConfigError as exc:
        raise SystemExit(f"forgeline: {exc}") from None
    return config_mod.build(ParamsConfig, config)


def policy_folder(policy: EvalPolicyConfig) -> str:
    """The folder an evaluated policy is loaded from: its path, or a checkpoint of its series."""
    return f"{policy.path}/{SERIES}/{series_dir(policy.step)}" if policy.step is not None else policy.path


def parent_checkpoint(params: ParamsConfig, name: str) -> str:
    """The series folder a warm start `name` starts from."""
    w = params.train.warm_start[name]
    step = w.step if w.step is not None else params.train.steps_of(w.parent)[1]
    return f"{params.train.run_folder(w.parent)}/{SERIES}/{series_dir(step)}"


def missing_extra_sources(config: dict, files: list[Path]) -> None:
    """ConfigError for each `tasks.ingest.extra_sources` entry that is not a file. Snakemake would
    skip ingest_extra on a finished tree (its outputs exist) and never notice the missing input."""
    sources = config["tasks"]["ingest"]["extra_sources"]
    missing = [(i, s) for i, s in enumerate(sources) if not Path(s).is_file()]
    if not missing:
        return
    key = ("tasks", "ingest", "extra_sources")
    where = "config"
    lines: dict = {}
    for f in reversed(files):  # lists are replaced whole: the last file that sets it holds it
        lines = config_mod._key_lines(f, f.read_text(encoding="utf-8"))
        if key in lines:
            where = str(f)
            break
    raise config_mod.ConfigError("\n  ".join(
        ["tasks.ingest.extra_sources names files that do not exist:"]
        + [f"{where}:{lines.get(key + (i,), lines.get(key, 1))}: {src}: no such file "
           f"(relative to {Path.cwd()}); fix the path, or remove it from the list"
           for i, src in missing]))


# `forgeline check-config`: the parse-time checks without Snakemake. Snakemake reads
# `--configfile` overlays itself before the Snakefile runs and reports a YAML error there
# without file or line; this names both (the CLI loads the files with forgeline.config).
def add_arguments(parser) -> None:
    pass


def run(cfg, args) -> None:
    try:
        missing_extra_sources(cfg.data, list(cfg.files))
    except config_mod.ConfigError as exc:
        raise SystemExit(f"forgeline: {exc}") from None
    print(f"config OK: {', '.join(map(str, cfg.files))}")


def params_of(config: dict, *sections: str) -> dict:
    """{dotted section: value} for the config sections a rule reads. Snakemake reruns the rule
    when one changes; the dvc.yaml export lists exactly their leaf keys as the stage's params."""
    out = {}
    for dotted in sections:
        node = config
        for part in dotted.split("."):
            node = node[part]
        out[dotted] = node
    return out


def all_repos(config: dict) -> list[str]:
    repos = config["repos"]
    return sorted(set(repos["pool"]) | set(repos["sft"]) | set(repos["panel"]))


__all__ = ["all_repos", "checked_config", "checked_yaml", "config_args", "params_of", "parent_checkpoint",
           "policy_folder", "repo_files", "stage_code"]
