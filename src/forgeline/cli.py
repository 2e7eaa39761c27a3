"""`forgeline`: one subcommand per pipeline stage, plus the tools around them.

Snakemake rules and dvc.yaml stages call these commands, with the same text. This module only
parses arguments and hands them to the stage's module (imported lazily, so a stage's code
version is the code of its own module and what it imports, not of every stage).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from forgeline import config as config_mod
from forgeline.workflow import handover

log = logging.getLogger("forgeline")

# subcommand -> (module that implements it, help). The module has `add_arguments(parser)` and
# `run(cfg, args)`; the module's name is also what Snakemake/DVC hash as the stage's code.
STAGES: dict[str, tuple[str, str]] = {
    "generate": ("forgeline.tasks.generate", "make bug candidates for one repository"),
    "ingest-extra": ("forgeline.tasks.extra", "read external SWE-smith files once; shard by repo"),
    "ingest": ("forgeline.tasks.ingest", "one repository's tasks; report every rejection"),
    "validate": ("forgeline.tasks.validate", "run the validation checks for one repository"),
    "split": ("forgeline.tasks.split", "repository-disjoint split with its semantic digest"),
    "export-dataset": ("forgeline.tasks.export", "the split as SWE-smith JSONL + a hub dataset folder and card"),
    "funnel": ("forgeline.tasks.funnel", "count the tasks at each step of the task front"),
    "image": ("forgeline.sandbox.images", "build (or reuse) one repository's docker image"),
    "harbor": ("forgeline.tasks.harbor", "export the split as Harbor task folders"),
    "policy-init": ("forgeline.policy.init_stage", "train the tokenizer, initialise the tiny model"),
    "policy-hub": ("forgeline.policy.hub", "the base policy from the hub at a pinned commit"),
    "agent-oracle": ("forgeline.agent.oracle", "oracle trajectories through the real tools (SFT data)"),
    "agent-rollout": ("forgeline.agent.rollout", "episodes of a policy on tasks, resumable"),
    "sft": ("forgeline.train.sft", "supervised fine-tuning on oracle + synthetic trajectories"),
    "difficulty": ("forgeline.agent.difficulty", "pass@k of the base policy; keep tasks in the band"),
    "critic": ("forgeline.train.critic", "pretrain the value model on offline rollouts"),
    "ppo": ("forgeline.train.ppo", "PPO of a LoRA adapter on the train pool (torchrun for several processes)"),
    "grpo": ("forgeline.train.grpo", "GRPO of a LoRA adapter on the train pool: group-relative advantages, no critic"),
    "evaluate": ("forgeline.evaluation.evaluate", "one policy on one panel, paired seeds, resumable"),
    "tables": ("forgeline.evaluation.tables", "paired tables: success, CI, wins/ties/losses, McNemar p"),
    "report": ("forgeline.evaluation.report", "the HTML evidence page, plots and dvc-plots CSVs"),
    "publish-adapter": ("forgeline.publish.adapter", "the PPO adapter as a hub-ready repository with its model card"),
}
# the stages that load torch, transformers and PEFT: a zygote saves each ~4.6 s of CPU. The
# others run in their own process (a fork of the zygote cost a generate job ~0.5 s more)
WARM = {"policy-init", "policy-hub", "agent-oracle", "agent-rollout", "sft", "difficulty", "critic", "ppo",
        "grpo", "evaluate"}
TOOLS: dict[str, tuple[str, str]] = {
    "export-dvc": ("forgeline.workflow.dvc_export", "write dvc.yaml from the Snakemake DAG"),
    "timings": ("forgeline.workflow.timings", "print the per-stage time table of a run"),
    "rulegraph": ("forgeline.workflow.rulegraph", "the DAG of rules as DOT, for the report"),
    "code-deps": ("forgeline.codedeps", "the code each stage runs, and its stamp (digest)"),
    "check-config": ("forgeline.workflow.dag",
                     "check config files as the Snakefile does (schema, files they name)"),
    "config-get": ("forgeline.config", "print one value of the merged config (e.g. sandbox.backend)"),
    "verify": ("forgeline.workflow.verify",
               "check results/ against the manifests; mark them current for Snakemake"),
    "publish": ("forgeline.publish.upload",
                "check the adapter and dataset folders against their cards, then upload them to the hub"),
}


def _setup_logging(log_file: str | None, verbose: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that subcommand's module is imported (stages import torch)."""
    parser = argparse.ArgumentParser(prog="forgeline", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version",
                        version=f"forgeline {importlib.import_module('forgeline').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in (STAGES | TOOLS).items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--config", action="append", metavar="YAML",
                       help="config file(s), merged in order (default: params.yaml)")
        p.add_argument("--log", metavar="FILE", help="also write the log to FILE")
        p.add_argument("-v", "--verbose", action="store_true")
        p.set_defaults(_module=module)
        if only in (None, name):
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Stable time zone: artifacts must not depend on the shell they ran in.
    os.environ.setdefault("TZ", "UTC")
    own = argv is None
    argv = sys.argv[1:] if own else argv
    wanted = next((a for a in argv if not a.startswith("-")), None)
    if own and wanted in WARM:  # the process's own command: a warm zygote runs it where one serves
        handover.hand_over(argv)
    args = build_parser(wanted if wanted in (STAGES | TOOLS) else None).parse_args(argv)
    _setup_logging(args.log, args.verbose)
    if handover.serving():
        log.debug("running in a fork of the zygote in %s", os.environ.get(handover.ENV))
    try:
        cfg = config_mod.load(args.config)
        importlib.import_module(args._module).run(cfg, args)
    except config_mod.ConfigError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        log.error("interrupted; no partial artifact was left under its final name")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
