# Phase 4: RL. Multi-seed rollouts of the base policy on the train split pretrain the critic
# (selected and scored on its rollouts on the val and test splits' tasks: train.critic.heldout);
# PPO then trains a LoRA adapter of the actor on the train split with that critic. GRPO trains
# another adapter from the same base, split and sandbox with no critic (group-relative
# advantages). Each adapter folder carries its checkpoint series (checkpoints/step-NNNNNN/); a
# warm start (train.warm_start) continues a run from one of them. Resume state is not an
# artifact: it lives in .forgeline/, outside results/.

WARM = PARAMS.train.warm_start
# heldout: split: the critic's val and test episodes are the base policy's on those splits' tasks
CRITIC_HELDOUT = ["val", "test"] if PARAMS.train.critic.heldout == "split" else []


rule offline_rollouts:
    input:
        tasks=expand("results/split/{part}.jsonl", part=["train", *CRITIC_HELDOUT]),
        policy=BASE_POLICY,
        images=expand("results/images/{repo}.json", repo=POOL if DOCKER else []),
        code=stage_code("forgeline.agent.rollout"),
    output:
        episodes="results/rollouts/episodes.jsonl",
        manifest="results/rollouts/episodes.manifest.json",
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "agent", "serving", "train.rollouts"),
    log:
        "logs/offline_rollouts.log",
    priority: CRITICAL_PATH
    threads: config["train"]["rollouts"]["threads"]
    resources:
        mem_mb=4000,
        runtime=120,
    shell:
        "forgeline agent-rollout {CONFIG} --tasks {input.tasks} --policy {input.policy} --name base"
        " --samples {config[train][rollouts][samples_per_task]} --threads {threads}"
        " --out {output.episodes} --manifest {output.manifest} --log {log}"


rule critic:
    input:
        policy=BASE_POLICY,
        episodes="results/rollouts/episodes.jsonl",
        heldout=expand("results/split/{part}.jsonl", part=CRITIC_HELDOUT),
        code=stage_code("forgeline.train.critic"),
    output:
        critic=directory("results/critic"),
    params:
        conf=params_of(config, "seed", "agent.reward", "agent.context_limit", "train.critic"),
        heldout=" ".join(f"--{part}-tasks results/split/{part}.jsonl" for part in CRITIC_HELDOUT),
    log:
        "logs/critic.log",
    priority: CRITICAL_PATH
    threads: config["train"]["critic"]["threads"]
    resources:
        mem_mb=6000,
        runtime=120,
        gpus=0,
    shell:
        "forgeline critic {CONFIG} --policy {input.policy} --episodes {input.episodes} {params.heldout}"
        " --out {output.critic} --log {log}"


rule ppo:
    input:
        policy=BASE_POLICY,
        critic="results/critic",
        tasks="results/split/train.jsonl",
        images=expand("results/images/{repo}.json", repo=POOL if DOCKER else []),
        code=stage_code("forgeline.train.ppo"),
    output:
        adapter=directory("results/adapter"),
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "agent", "serving", "train.ppo"),
    log:
        "logs/ppo.log",
    priority: CRITICAL_PATH
    threads: config["train"]["ppo"]["threads"]
    resources:
        mem_mb=8000,
        runtime=240,
        gpus=0,
    shell:
        "forgeline ppo {CONFIG} --policy {input.policy} --critic {input.critic}"
        " --tasks {input.tasks} --out {output.adapter} --checkpoints .forgeline/ppo-checkpoints"
        " --log {log}"


rule grpo:
    input:
        policy=BASE_POLICY,
        tasks="results/split/train.jsonl",
        images=expand("results/images/{repo}.json", repo=POOL if DOCKER else []),
        code=stage_code("forgeline.train.grpo"),
    output:
        adapter=directory("results/adapter-grpo"),
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "agent", "serving", "train.grpo"),
    log:
        "logs/grpo.log",
    # not on the way to PPO's adapter, but a two-core job: left behind the one-core evaluations,
    # it would wait for each of them and then run alone at the end
    priority: CRITICAL_PATH
    threads: config["train"]["grpo"]["threads"]
    resources:
        mem_mb=8000,
        runtime=240,
        gpus=0,
    shell:
        "forgeline grpo {CONFIG} --policy {input.policy} --tasks {input.tasks} --out {output.adapter}"
        " --checkpoints .forgeline/grpo-checkpoints --log {log}"


rule warm_start:
    input:
        policy=BASE_POLICY,
        parent=lambda w: PARAMS.train.run_folder(WARM[w.name].parent),
        tasks="results/split/train.jsonl",
        images=expand("results/images/{repo}.json", repo=POOL if DOCKER else []),
        code=lambda w: stage_code(f"forgeline.train.{PARAMS.train.algorithm(w.name)}"),
    output:
        adapter=directory("results/warm/{name}"),
    params:
        conf=lambda w: params_of(config, "seed", "repos.root", "sandbox", "agent", "serving",
                                 f"train.{PARAMS.train.algorithm(w.name)}", f"train.warm_start.{w.name}"),
        algorithm=lambda w: PARAMS.train.algorithm(w.name),
        parent=lambda w: parent_checkpoint(PARAMS, w.name),
        steps=lambda w: WARM[w.name].steps,
    wildcard_constraints:
        name="|".join(map(re.escape, WARM)) or "(?!)",
    log:
        "logs/warm_start/{name}.log",
    threads: lambda w: getattr(PARAMS.train, PARAMS.train.algorithm(w.name)).threads
    resources:
        mem_mb=8000,
        runtime=240,
        gpus=0,
    shell:
        "forgeline {params.algorithm} {CONFIG} --policy {input.policy} --parent {params.parent}"
        " --steps {params.steps} --tasks {input.tasks} --out {output.adapter}"
        " --checkpoints .forgeline/warm-checkpoints/{wildcards.name} --log {log}"
