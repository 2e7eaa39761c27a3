# Phase 1: environments. One image per repository snapshot (built offline from Debian's
# packages by default); the record is a pure function of the build inputs, so an unchanged
# rebuild leaves downstream jobs alone. Jobs that run tests depend on their repo's record
# when the docker backend is configured.


rule image:
    input:
        repo=lambda w: repo_files(REPOS_ROOT, w.repo),
        dockerfile="envs/repo.Dockerfile",
        container=sorted(str(p) for p in Path("src/forgeline/sandbox/container").iterdir() if p.is_file()),
        code=stage_code("forgeline.sandbox.images"),
    output:
        record="results/images/{repo}.json",
        manifest="results/images/{repo}.manifest.json",
    params:
        conf=params_of(config, "repos.root", "sandbox.docker.base_image"),
    log:
        "logs/image/{repo}.log",
    priority: TASK_FRONT
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "forgeline image {CONFIG} --repo {wildcards.repo} --out {output.record}"
        " --manifest {output.manifest} --log {log}"
