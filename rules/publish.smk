# Phase 6: publish. The PPO adapter as a hub-ready repository: its PEFT files, its base where the
# base is on no hub, and a model card read from the run's artifacts. Uploading it (and
# results/dataset/hf) is a user action, `forgeline publish`, never a rule (docs/publish.md).


rule publish_adapter:
    input:
        adapter="results/adapter",
        base=[BASE_POLICY] if BASE_SOURCE == "sft" else [],
        split=expand("results/split/{name}.jsonl", name=["train", "val", "test"]),
        summary="results/split/split.json",
        tables="results/eval/tables/tables.json",
        code=stage_code("forgeline.publish.adapter"),
    output:
        folder=directory("results/publish/adapter"),
        manifest="results/publish/adapter.manifest.json",
    params:
        conf=params_of(config, "publish.card", "evaluation.policies", "evaluation.panels"),
        base=lambda w, input: f"--base {input.base}" if input.base else "",
    log:
        "logs/publish_adapter.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "forgeline publish-adapter {CONFIG} --adapter {input.adapter} {params.base} --split-dir results/split"
        " --tables {input.tables} --out {output.folder} --manifest {output.manifest} --log {log}"
