# Phase 1: tasks. Bugs are generated per repository, ingested together (with any external
# SWE-smith-format files) into one file per repository, validated per repository by running
# tests, then split by repository.


rule generate:
    input:
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        code=stage_code("forgeline.tasks.generate"),
    output:
        tasks="results/candidates/{repo}.jsonl",
        manifest="results/candidates/{repo}.manifest.json",
    params:
        conf=params_of(config, "seed", "repos.root", "sandbox", "tasks.generate"),
    log:
        "logs/generate/{repo}.log",
    threads: 2
    resources:
        mem_mb=1000,
        runtime=30,
    shell:
        "forgeline generate {CONFIG} --repo {wildcards.repo} --threads {threads}"
        " --out {output.tasks} --manifest {output.manifest} --log {log}"


rule ingest:
    input:
        candidates=expand("results/candidates/{repo}.jsonl", repo=ALL_REPOS),
        extra=config["tasks"]["ingest"].get("extra_sources", []),
        code=stage_code("forgeline.tasks.ingest"),
    output:
        # one file per repository, so a change in one repo's tasks reruns only its validation
        tasks=expand("results/tasks/{repo}.jsonl", repo=ALL_REPOS),
        rejections="results/tasks/rejections.jsonl",
        report="results/tasks/ingest-report.json",
        manifest="results/tasks/ingest.manifest.json",
    params:
        conf=params_of(config, "repos", "tasks.ingest"),
    log:
        "logs/ingest.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline ingest {CONFIG} --sources {input.candidates}"
        " --out-dir results/tasks --rejections {output.rejections} --report {output.report}"
        " --manifest {output.manifest} --log {log}"


rule validate:
    input:
        tasks="results/tasks/{repo}.jsonl",
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
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
    threads: 2
    resources:
        mem_mb=1000,
        runtime=30,
    shell:
        "forgeline validate {CONFIG} --repo {wildcards.repo} --tasks {input.tasks}"
        " --threads {threads} --out {output.tasks} --rejections {output.rejections}"
        " --report {output.report} --manifest {output.manifest} --log {log}"


rule split:
    input:
        tasks=expand("results/validated/{repo}.jsonl", repo=POOL),
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
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline split {CONFIG} --tasks {input.tasks} --out-dir results/split"
        " --manifest {output.manifest} --log {log}"
