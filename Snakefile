# forgeline: the DAG of a code-agent RL experiment, one artifact per target.
# Table of contents only: each phase lives in rules/<phase>.smk and calls the `forgeline` CLI.
from pathlib import Path
import re
import sys

from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from forgeline.workflow.dag import (all_repos, checked_config, checked_yaml, config_args, params_of,
                                    parent_checkpoint, policy_folder, repo_files, stage_code)

# A config error ends the parse with one message that names the file and line (no stack frames).
checked_yaml("params.yaml")
configfile: "params.yaml"

# params.yaml plus any --configfile overlays, in the order Snakemake merged them.
CONFIG_FILES = ["params.yaml", *[str(f) for f in workflow.overwrite_configfiles]]
# the same config, typed (forgeline.params.ParamsConfig): for what the rules compute from it
PARAMS = checked_config(config, CONFIG_FILES)
CONFIG = config_args(CONFIG_FILES)
REPOS_ROOT = config["repos"]["root"]
POOL = config["repos"]["pool"]
PANEL = config["repos"]["panel"]
SFT = config["repos"]["sft"]
# The policy every RL stage starts from: the tiny model after SFT (embedded default), or a
# trained agent from the hub at a pinned commit (policy.base.source: hub, real scale).
BASE_SOURCE = config["policy"]["base"]["source"]
BASE_POLICY = f"results/policy/{BASE_SOURCE}"
ALL_REPOS = all_repos(config)
DOCKER = config["sandbox"]["backend"] == "docker"
# Scheduler priority of the chain to the adapter (images, tasks, base policy, difficulty -> split
# -> rollouts -> critic -> PPO). Snakemake's priorities do not pass to a job's inputs, so every
# rule upstream of that chain holds it too: with few cores, a job off the chain (the base
# policy's heldout evaluation) would otherwise take the cores before the last repository's
# generate and validate, and delay everything after them.
CRITICAL_PATH = 10
# The task front (images, generate, ingest, validate) goes first of all: difficulty jobs hold
# one core each and run in pairs, and a two-core job left until then (the last repository's
# generate) waits for a pair to end with a core idle, then runs its difficulty job alone.
TASK_FRONT = CRITICAL_PATH + 1


def image_of(wildcards):
    """The repo's image record, for jobs that run its tests in containers (docker backend)."""
    return f"results/images/{wildcards.repo}.json" if DOCKER else []


# The phases in DAG order: environments, tasks, the base policy, RL, evidence, publishing.
include: "rules/images.smk"
include: "rules/tasks.smk"
include: "rules/policy.smk"
include: "rules/train.smk"
include: "rules/evaluation.smk"
include: "rules/publish.smk"


rule all:
    default_target: True
    input:
        rules.funnel.output,
        rules.harbor.output,
        rules.export_dataset.output,
        rules.tables.output,
        rules.report.output,
        rules.publish_adapter.output,
        expand("results/images/{repo}.json", repo=ALL_REPOS if DOCKER else []),
