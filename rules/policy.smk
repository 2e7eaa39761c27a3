# Phase 3: the base policy. A tiny Qwen3 (its tokenizer trained here, first and alone, so the
# SFT repositories' oracle need not wait for copy pre-training) is pre-trained to copy
# (policy_init: the repeat phase on one core beside the task front; copy_pretrain: recall and
# match on both), then taught the agent's protocol on oracle trajectories of the SFT
# repositories plus synthetic fixes of other Python source; at real scale the base is a hub
# model at a pinned commit instead. pass@k of the base policy then keeps the pool tasks of the
# configured difficulty, per repository, and the split is taken over what it keeps.


rule policy_hub:
    input:
        code=stage_code("forgeline.policy.hub"),
    output:
        policy=directory("results/policy/hub"),
    params:
        conf=params_of(config, "policy.base"),
    log:
        "logs/policy_hub.log",
    priority: CRITICAL_PATH
    threads: 2
    resources:
        mem_mb=4000,
        runtime=240,
    shell:
        "forgeline policy-hub {CONFIG} --out {output.policy} --log {log}"


rule tokenizer:
    input:
        corpus=lambda w: [f for r in SFT for f in repo_files(REPOS_ROOT, r)],
        code=stage_code("forgeline.policy.init_stage"),
    output:
        tokenizer=directory("results/policy/tokenizer"),
    params:
        conf=params_of(config, "repos.root", "repos.sft", "policy.init.tokenizer"),
    log:
        "logs/tokenizer.log",
    priority: TASK_FRONT + 2
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline policy-init {CONFIG} --tokenizer-only --out {output.tokenizer} --log {log}"


rule policy_init:
    input:
        tokenizer="results/policy/tokenizer",
        code=stage_code("forgeline.policy.init_stage"),
    output:
        policy=directory("results/policy/repeat"),
    params:
        conf=params_of(config, "seed", "policy.init.tokenizer", "policy.init.model",
                       "policy.init.copy.repeat", "policy.init.copy.lr",
                       "policy.init.copy.warmup_steps", "policy.init.copy.grad_clip",
                       "policy.init.copy.log_every", "policy.init.threads"),
    log:
        "logs/policy_init.log",
    # above the task front's: it starts first and trains on its own core while the task front's
    # one-core jobs take the other (neither needs the other)
    priority: TASK_FRONT + 1
    threads: config["policy"]["init"]["threads"]
    resources:
        mem_mb=4000,
        runtime=20,
    shell:
        "forgeline policy-init {CONFIG} --tokenizer {input.tokenizer} --phases repeat --out {output.policy}"
        " --threads {threads} --log {log}"


rule copy_pretrain:
    input:
        policy="results/policy/repeat",
        code=stage_code("forgeline.policy.init_stage"),
    output:
        policy=directory("results/policy/init"),
    params:
        conf=params_of(config, "seed", "policy.init.copy"),
    log:
        "logs/copy_pretrain.log",
    priority: TASK_FRONT + 1
    threads: config["policy"]["init"]["copy"]["threads"]
    resources:
        mem_mb=4000,
        runtime=20,
    shell:
        "forgeline policy-init {CONFIG} --resume {input.policy} --phases recall match --out {output.policy}"
        " --threads {threads} --log {log}"


rule agent_oracle:
    input:
        tasks="results/validated/{repo}.jsonl",
        tokenizer="results/policy/tokenizer",  # all it needs of the policy
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        image=image_of,
        code=stage_code("forgeline.agent.oracle"),
    output:
        episodes="results/sft/oracle/{repo}.jsonl",
        manifest="results/sft/oracle/{repo}.manifest.json",
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "agent"),
    wildcard_constraints:
        repo="|".join(SFT),
    log:
        "logs/agent_oracle/{repo}.log",
    priority: CRITICAL_PATH
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    shell:
        "forgeline agent-oracle {CONFIG} --tasks {input.tasks} --tokenizer {input.tokenizer}"
        " --out {output.episodes} --manifest {output.manifest} --log {log}"


rule sft:
    input:
        init="results/policy/init",
        oracle=expand("results/sft/oracle/{repo}.jsonl", repo=SFT),
        corpus=lambda w: [f for r in SFT for f in repo_files(REPOS_ROOT, r)],
        code=stage_code("forgeline.train.sft"),
    output:
        policy=directory("results/policy/sft"),
    params:
        conf=params_of(config, "seed", "repos", "agent.tools", "agent.max_tool_output_chars",
                       "train.sft"),
    log:
        "logs/sft.log",
    priority: CRITICAL_PATH
    threads: config["train"]["sft"]["threads"]
    resources:
        mem_mb=6000,
        runtime=120,
    shell:
        "forgeline sft {CONFIG} --init {input.init} --oracle {input.oracle}"
        " --out {output.policy} --log {log}"


rule difficulty:
    input:
        tasks="results/validated/{repo}.jsonl",
        policy=BASE_POLICY,
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        image=image_of,
        code=stage_code("forgeline.agent.difficulty"),
    output:
        pool="results/pool/{repo}.jsonl",
        report="results/pool/{repo}.difficulty.json",
        episodes="results/pool/{repo}.episodes.jsonl",
        manifest="results/pool/{repo}.manifest.json",
    params:
        conf=params_of(config, "seed", "repos", "sandbox", "agent", "serving", "tasks.difficulty"),
    wildcard_constraints:
        repo="|".join(POOL),
    log:
        "logs/difficulty/{repo}.log",
    priority: CRITICAL_PATH
    threads: config["tasks"]["difficulty"]["threads"]
    resources:
        mem_mb=4000,
        runtime=60,
    shell:
        "forgeline difficulty {CONFIG} --tasks {input.tasks} --policy {input.policy}"
        " --out {output.pool} --report {output.report} --episodes {output.episodes}"
        " --manifest {output.manifest} --log {log}"
