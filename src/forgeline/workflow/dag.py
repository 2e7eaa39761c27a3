"""Helpers the Snakefile calls at parse time. Kept cheap: every cluster job re-parses the DAG."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Iterable

from forgeline import config as config_mod
from forgeline.provenance import stage_sources
from forgeline.tasks.repos import snapshot_files


def config_args(files: Iterable[str | Path]) -> str:
    """`--config A --config B`: how every rule hands the same config files to the CLI."""
    return " ".join(f"--config {shlex.quote(str(f))}" for f in files)


def stage_code(module: str, root: str | Path = ".") -> list[str]:
    """Source files of a stage (its module and what it imports), relative to the workdir."""
    root = Path(root).resolve()
    return [str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
            for p in stage_sources(module)]


def repo_files(repos_root: str | Path, repo: str) -> list[str]:
    """Every file of one repository snapshot: the inputs of that repo's jobs."""
    root = Path(repos_root) / repo
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: repository listed in params.yaml (repos.*) is missing; "
                                f"add it under {repos_root}/ or remove it from the list")
    return [str(p) for p in snapshot_files(root)]


def checked_config(config: dict, files: Iterable[str | Path]) -> None:
    """Validate Snakemake's merged config with forgeline's schema, naming file and line."""
    config_mod.validate(config, [Path(f) for f in files])


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
    return sorted(set(repos["pool"]) | set(repos.get("sft", [])) | set(repos.get("panel", [])))


__all__ = ["all_repos", "checked_config", "config_args", "params_of", "repo_files", "stage_code"]
