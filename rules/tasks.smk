# Phase 2: tasks. External SWE-smith-format files and the upstream hub dataset are read once
# and sharded by repository. Per repository: bugs are generated, ingested (with its shard) and
# validated by running tests; the pool repositories' tasks of the right difficulty
# (rules/policy.smk) are split, and the split is exported as a dataset. Per-repository jobs keep
# a change in one repository to its own chain.

# Upstream SWE-smith from the hub (tasks.ingest.hub): no file of the workflow, so its repo_id,
# revision and patterns reach ingest_extra as params (a new revision reruns it).
HUB_DATASET = bool(config["tasks"]["ingest"]["hub"]["repo_id"])


rule generate:
    input:
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        image=image_of,
        code=stage_code("forgeline.tasks.generate"),
    output:
        tasks="results/candidates/{repo}.jsonl",
        manifest="results/candidates/{repo}.manifest.json",
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "tasks.generate"),
        role=lambda w: "pool" if w.repo in POOL else "panel" if w.repo in PANEL else "other",  # max_per_{role}_repo
    log:
        "logs/generate/{repo}.log",
    priority: TASK_FRONT
    threads: config["tasks"]["generate"]["threads"]
    resources:
        mem_mb=1000,
        runtime=30,
    shell:
        "forgeline generate {CONFIG} --repo {wildcards.repo} --threads {threads}"
        " --out {output.tasks} --manifest {output.manifest} --log {log}"


rule ingest_extra:
    input:
        extra=config["tasks"]["ingest"]["extra_sources"],
        code=stage_code("forgeline.tasks.extra"),
    output:
        shards=expand("results/tasks/extra/{repo}.jsonl", repo=ALL_REPOS),
        rejections="results/tasks/extra/rejections.jsonl",
        unattributed="results/tasks/extra/unattributed.jsonl",
        report="results/tasks/extra/report.json",
        manifest="results/tasks/extra/manifest.json",
    params:
        conf=params_of(config, "repos", "tasks.ingest"),
    log:
        "logs/ingest_extra.log",
    priority: TASK_FRONT
    threads: 1
    resources:
        mem_mb=16000 if HUB_DATASET else 2000,  # upstream: ~60k instances held until sharded
        runtime=60 if HUB_DATASET else 10,
    shell:
        "forgeline ingest-extra {CONFIG} --out-dir results/tasks/extra"
        " --manifest {output.manifest} --log {log}"


rule ingest:
    input:
        candidates="results/candidates/{repo}.jsonl",
        extra="results/tasks/extra/{repo}.jsonl",
        code=stage_code("forgeline.tasks.ingest"),
    output:
        tasks="results/tasks/{repo}.jsonl",
        rejections="results/tasks/{repo}.rejections.jsonl",
        report="results/tasks/{repo}.report.json",
        manifest="results/tasks/{repo}.manifest.json",
    params:
        conf=params_of(config, "tasks.ingest.max_record_bytes"),
    log:
        "logs/ingest/{repo}.log",
    priority: TASK_FRONT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline ingest {CONFIG} --repo {wildcards.repo} --sources {input.candidates} {input.extra}"
        " --out {output.tasks} --rejections {output.rejections} --report {output.report}"
        " --manifest {output.manifest} --log {log}"


rule validate:
    input:
        tasks="results/tasks/{repo}.jsonl",
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        image=image_of,
        code=stage_code("forgeline.tasks.validate"),
    output:
        tasks="results/validated/{repo}.jsonl",
        rejections="results/validated/{repo}.rejections.jsonl",
        report="results/validated/{repo}.report.json",
        manifest="results/validated/{repo}.manifest.json",
    params:
        conf=params_of(config, "repos.root", "sandbox", "tasks.validate"),
    log:
        "logs/validate/{repo}.log",
    priority: TASK_FRONT
    threads: config["tasks"]["validate"]["threads"]
    resources:
        mem_mb=1000,
        runtime=30,
    shell:
        "forgeline validate {CONFIG} --repo {wildcards.repo} --tasks {input.tasks}"
        " --threads {threads} --out {output.tasks} --rejections {output.rejections}"
        " --report {output.report} --manifest {output.manifest} --log {log}"


rule split:
    input:
        tasks=expand("results/pool/{repo}.jsonl", repo=POOL),
        frozen=config["tasks"]["split"]["frozen_manifest"] or [],
        code=stage_code("forgeline.tasks.split"),
    output:
        train="results/split/train.jsonl",
        val="results/split/val.jsonl",
        test="results/split/test.jsonl",
        summary="results/split/split.json",
        manifest="results/split/manifest.json",
    params:
        conf=params_of(config, "tasks.split"),
    log:
        "logs/split.log",
    priority: CRITICAL_PATH
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline split {CONFIG} --tasks {input.tasks} --out-dir results/split"
        " --manifest {output.manifest} --log {log}"


rule funnel:
    input:
        generate=expand("results/candidates/{repo}.manifest.json", repo=ALL_REPOS),
        ingest=expand("results/tasks/{repo}.report.json", repo=ALL_REPOS),
        validate=expand("results/validated/{repo}.report.json", repo=ALL_REPOS),
        extra="results/tasks/extra/report.json",
        split="results/split/split.json",
        code=stage_code("forgeline.tasks.funnel"),
    output:
        metrics="results/tasks/funnel.json",
        manifest="results/tasks/funnel.manifest.json",
    params:
        conf=params_of(config, "repos"),
    log:
        "logs/funnel.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "forgeline funnel {CONFIG} --generate-manifests {input.generate} --ingest-reports {input.ingest}"
        " --validate-reports {input.validate} --extra-report {input.extra} --split {input.split}"
        " --out {output.metrics} --manifest {output.manifest} --log {log}"


rule harbor:
    input:
        split=expand("results/split/{name}.jsonl", name=["train", "val", "test"]),
        summary="results/split/split.json",
        repos=[f for repo in POOL for f in repo_files(REPOS_ROOT, repo)],
        code=stage_code("forgeline.tasks.harbor"),
    output:
        train=directory("results/harbor/train"),
        val=directory("results/harbor/val"),
        test=directory("results/harbor/test"),
        index="results/harbor/index.json",
        manifest="results/harbor/manifest.json",
    params:
        conf=params_of(config, "repos.root", "sandbox.test_timeout_s", "sandbox.docker.cpus",
                       "sandbox.docker.memory_mb", "sandbox.docker.base_image"),
    log:
        "logs/harbor.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    shell:
        "forgeline harbor {CONFIG} --split-dir results/split --out-dir results/harbor"
        " --manifest {output.manifest} --log {log}"


rule export_dataset:
    input:
        split=expand("results/split/{name}.jsonl", name=["train", "val", "test"]),
        summary="results/split/split.json",
        images=expand("results/images/{repo}.json", repo=POOL if DOCKER else []),
        funnel="results/tasks/funnel.json",
        code=stage_code("forgeline.tasks.export"),
    output:
        swe_smith=expand("results/dataset/swe-smith/{name}.jsonl", name=["train", "val", "test"]),
        hf=directory("results/dataset/hf"),
        manifest="results/dataset/manifest.json",
    params:
        conf=params_of(config, "sandbox.backend", "tasks.export"),
    log:
        "logs/export_dataset.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline export-dataset {CONFIG} --split-dir results/split --images {input.images}"
        " --funnel {input.funnel} --out-dir results/dataset --manifest {output.manifest} --log {log}"
