# Phase 5: evidence. Every policy runs on every panel under one protocol (same tasks, agent
# config and seeds); the paired tables and the report are built from those results.

PANELS = config["evaluation"]["panels"]
POLICIES = PARAMS.evaluation.policies
EVAL_BASE = config["evaluation"]["base"]
# the (panel, policy) cells evaluated: each policy on its panels (every panel unless it names some)
EVAL_CELLS = [(panel, policy) for policy in sorted(POLICIES) for panel in PARAMS.evaluation.panels_of(policy)]


def eval_files(suffix):
    return [f"results/eval/{panel}/{policy}{suffix}" for panel, policy in EVAL_CELLS]


# every artifact's manifest, for the report's sha256 table (folders carry theirs inside)
MANIFEST_FILES = [
    *expand("results/{step}/{repo}.manifest.json", step=["candidates", "tasks", "validated"], repo=ALL_REPOS),
    *expand("results/images/{repo}.manifest.json", repo=ALL_REPOS if DOCKER else []),
    *expand("results/sft/oracle/{repo}.manifest.json", repo=SFT if BASE_SOURCE == "sft" else []),
    *expand("results/pool/{repo}.manifest.json", repo=POOL),
    "results/tasks/extra/manifest.json", "results/split/manifest.json",
    "results/report/rulegraph.manifest.json",
    "results/tasks/funnel.manifest.json", "results/harbor/manifest.json",
    "results/rollouts/episodes.manifest.json",
    *eval_files(".manifest.json"),
    "results/eval/tables/manifest.json",
]
# How the base policy was made, for the report, when the tiny model is built here (source sft):
# its SFT loss curve and, if copy pre-training ran any step, its copy curve (none at 0 steps).
# (the schema requires every copy phase's `steps`, so the config is read as it is)
COPY_PRETRAINED = BASE_SOURCE == "sft" and any(
    phase["steps"] for phase in config["policy"]["init"]["copy"].values() if isinstance(phase, dict))
BASE_CURVES = [*(["copy_curve"] if COPY_PRETRAINED else []), *(["sft_curve"] if BASE_SOURCE == "sft" else [])]
# the report's figures (PNG + caption .rst each; every one but the DAG also as CSV: DVC plots)
REPORT_PLOTS = ["success", "outcomes", "dag", "funnel", *BASE_CURVES, "difficulty", "critic_curve", "rl_curves",
                "ppo_curve"]
# the RL runs (name -> adapter folder): PPO, GRPO and the warm starts of train.warm_start
RL_RUNS = {name: PARAMS.train.run_folder(name) for name in ["ppo", "grpo", *sorted(WARM)]}
MANIFEST_DIRS = [*(["results/policy/tokenizer", "results/policy/repeat", "results/policy/init"]
                   if BASE_SOURCE == "sft" else []),
                 BASE_POLICY, "results/critic", *RL_RUNS.values()]


rule evaluate:
    input:
        tasks=lambda w: PANELS[w.panel],
        policy=lambda w: POLICIES[w.policy].path,
        base=lambda w: POLICIES[w.policy].base or [],
        images=expand("results/images/{repo}.json", repo=ALL_REPOS if DOCKER else []),
        code=stage_code("forgeline.evaluation.evaluate"),
    output:
        results="results/eval/{panel}/{policy}.jsonl",
        episodes="results/eval/{panel}/{policy}.episodes.jsonl",
        manifest="results/eval/{panel}/{policy}.manifest.json",
    params:
        # what evaluate reads of `evaluation` (the tables' alpha, pairs, power and gate rerun no episode)
        conf=params_of(config, "seed", "repos.root", "sandbox", "agent", "serving", "evaluation.k",
                       "evaluation.k_per_panel", "evaluation.seeds", "evaluation.threads", "evaluation.dtype"),
        base=lambda w, input: f"--base {input.base}" if input.base else "",
        # a checkpoint of the run's series, or the folder itself
        policy=lambda w: policy_folder(POLICIES[w.policy]),
    wildcard_constraints:
        panel="|".join(PANELS),
        policy="|".join(POLICIES),
    log:
        "logs/evaluate/{panel}/{policy}.log",
    threads: config["evaluation"]["threads"]
    resources:
        mem_mb=4000,
        runtime=120,
    shell:
        "forgeline evaluate {CONFIG} --tasks {input.tasks} --panel {wildcards.panel}"
        " --policy {params.policy} {params.base} --name {wildcards.policy}"
        " --out {output.results} --episodes {output.episodes} --manifest {output.manifest} --log {log}"


rule tables:
    input:
        results=eval_files(".jsonl"),
        # the episode records: how each episode ended (outcome classes, sandbox errors included)
        episodes=eval_files(".episodes.jsonl"),
        code=stage_code("forgeline.evaluation.tables"),
    output:
        markdown="results/eval/tables/tables.md",
        csv="results/eval/tables/tables.csv",
        json="results/eval/tables/tables.json",
        metrics="results/eval/tables/metrics.json",
        manifest="results/eval/tables/manifest.json",
    params:
        conf=params_of(config, "evaluation.base", "evaluation.alpha", "evaluation.confidence", "evaluation.pairs",
                       "evaluation.power", "evaluation.gate"),
    log:
        "logs/tables.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "forgeline tables {CONFIG} --results {input.results} --episodes {input.episodes} --base {EVAL_BASE}"
        " --out-dir results/eval/tables --manifest {output.manifest} --log {log}"


rule rulegraph:
    input:
        "Snakefile",
        CONFIG_FILES,
        sorted(Path("rules").glob("*.smk")),
        code=stage_code("forgeline.workflow.rulegraph"),
    output:
        dot="results/report/rulegraph.dot",
        manifest="results/report/rulegraph.manifest.json",
    log:
        "logs/rulegraph.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "forgeline rulegraph {CONFIG} --out {output.dot} --manifest {output.manifest} --log {log}"


rule report:
    input:
        dag="results/report/rulegraph.dot",
        funnel="results/tasks/funnel.json",
        split="results/split/split.json",
        images=expand("results/images/{repo}.json", repo=ALL_REPOS if DOCKER else []),
        difficulty=expand("results/pool/{repo}.difficulty.json", repo=POOL),
        init=["results/policy/init"] if COPY_PRETRAINED else [],
        sft=["results/policy/sft"] if BASE_SOURCE == "sft" else [],
        critic="results/critic",
        runs=list(RL_RUNS.values()),
        tables="results/eval/tables/metrics.json",
        tables_json="results/eval/tables/tables.json",
        manifests=MANIFEST_FILES,
        folders=sorted(set(MANIFEST_DIRS)),
        code=stage_code("forgeline.evaluation.report"),
    params:
        folder_manifests=[f"{d}/manifest.json" for d in sorted(set(MANIFEST_DIRS))],
        copy_curve=lambda w, input: f"--copy-curve {input.init}/copy_curve.json" if input.init else "",
        sft_curve=lambda w, input: f"--sft-curve {input.sft}/loss_curve.json" if input.sft else "",
        runs=" ".join(f"{name}={folder}" for name, folder in RL_RUNS.items()),
    output:
        html=report("results/report/report.html", caption="../docs/report-caption.rst",
                    category="evidence"),
        figures=report(expand("results/report/{plot}.png", plot=REPORT_PLOTS),
                       caption="../docs/report-caption.rst", category="plots"),
        captions=expand("results/report/{plot}.rst", plot=REPORT_PLOTS),
        plot_tables=expand("results/report/{plot}.csv", plot=[p for p in REPORT_PLOTS if p != "dag"]),
        manifest="results/report/manifest.json",
    log:
        "logs/report.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline report {CONFIG} --out-dir results/report --dag {input.dag} --funnel {input.funnel}"
        " --split {input.split} --images {input.images} {params.copy_curve} {params.sft_curve}"
        " --difficulty {input.difficulty}"
        " --critic {input.critic}/metrics.json --runs {params.runs}"
        " --metrics {input.tables} --tables-md results/eval/tables/tables.md --tables-json {input.tables_json}"
        " --manifests {input.manifests} {params.folder_manifests} --manifest {output.manifest} --log {log}"
