# `make run`: set everything up and build every artifact of the embedded default pipeline
# (`make run CONFIG=configs/NAME.yaml`: with that overlay on params.yaml).
# `make test`: set everything up and run the test suite.
# Both create and reuse .venv/ and install what is missing (system packages via apt, as root).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.forgeline-installed
CORES ?= 2
# overlays on params.yaml for `make run`, later files win (the Snakefile's --configfile)
CONFIG ?=
TORCH ?= torch==2.13.0
# A CPU build of torch lies in /opt/wheels on machines of this kind; elsewhere PyPI's is used.
PIP_FIND := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
export PYTHONHASHSEED := 0
export TZ := UTC
export LC_ALL := C.UTF-8
export DVC_NO_ANALYTICS := 1
# the rules (and dvc.yaml's commands) call `forgeline`, `snakemake` and `dvc` by name
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run test setup system dvc.yaml dag clean services pull

# the per-stage times of the last measured run on a machine of this kind (bench/README.md)
TIMINGS := bench/make_run_timings.json
# warm processes with torch, transformers and PEFT imported, one per job thread count, that run
# the torch jobs' `forgeline` commands in forks (forgeline.workflow.zygote): ~4.6 s of CPU less a job
ZYGOTES := $(CURDIR)/.forgeline/zygote

run: setup
	@backend=$$($(BIN)/forgeline config-get sandbox.backend --config params.yaml \
	  $(foreach f,$(CONFIG),--config $(f))) || exit 1; \
	  if [ "$$backend" = docker ]; then bash scripts/services.sh start docker; fi
	@$(if $(CONFIG),,$(BIN)/forgeline timings --expected --reference $(TIMINGS))
	@start=$$(date +%s); cpu=$$(head -1 /proc/stat 2>/dev/null); \
	  zygotes=$(ZYGOTES); trap '$(BIN)/python -m forgeline.workflow.zygote stop '$$zygotes EXIT; \
	  $(BIN)/python -m forgeline.workflow.zygote start $$zygotes 1 $(CORES); \
	  FORGELINE_ZYGOTE=$$zygotes $(BIN)/snakemake --cores $(CORES) $(if $(CONFIG),--configfile $(CONFIG)); rc=$$?; \
	  $(BIN)/forgeline timings --since $$start --cpu-start "$$cpu" --timeline logs/run_timeline.png \
	    $(if $(CONFIG),,--reference $(TIMINGS)); exit $$rc

test: setup
	$(BIN)/pytest

setup: system $(STAMP)

# git (patches, code version) and util-linux (unshare) are what every stage needs; the Docker
# engine, the registry and Slurm are installed and started by scripts/services.sh and
# scripts/slurm.sh (`make run` starts docker when the merged config selects the docker backend).
system:
	@command -v git >/dev/null && command -v unshare >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends git util-linux; \
	  else echo "install git and util-linux (unshare), e.g. sudo apt-get install git util-linux"; exit 1; fi; }

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PIP_FIND) '$(TORCH)'
	$(BIN)/pip install -q $(PIP_FIND) -e '.[test]'
	touch $@

# `make pull` in a checkout of a tagged run: its artifacts from the DVC remote, verified
pull: setup
	$(BIN)/dvc pull
	$(BIN)/forgeline verify

dvc.yaml: setup
	$(BIN)/forgeline export-dvc

dag: setup
	$(BIN)/snakemake --rulegraph | dot -Tsvg > docs/dag.svg

services:
	bash scripts/services.sh start all

clean:
	rm -rf results logs .snakemake

# `make bench-trl`: the venv of the TRL side of bench/ppo_throughput.py (bench/trl_ppo_step.py).
# TRL's PPOTrainer.step() on an externally generated batch ended with trl 0.11, which needs
# transformers 4.x (4.51 is the first with Qwen3); forgeline pins 5.x, hence a venv of its own.
# rich: trl 0.11.4 imports it without declaring it.
TRL_VENV := bench/.venv-trl
TRL_PINS := transformers==4.51.3 trl==0.11.4 peft==0.15.2 accelerate==1.6.0 datasets==5.0.1 tyro==1.0.17 rich==15.0.0
.PHONY: bench-trl
bench-trl:
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install -q --upgrade pip
	$(TRL_VENV)/bin/pip install -q $(PIP_FIND) '$(TORCH)'
	$(TRL_VENV)/bin/pip install -q $(TRL_PINS)

# `make bench-trl-grpo`: the venv of the TRL side of bench/grpo_throughput.py (bench/trl_grpo_step.py).
# A recent TRL (its GRPOTrainer takes an external batch in `_compute_loss`, with a tool mask for
# multi-turn episodes) on forgeline's own transformers, peft and accelerate, so that only the
# trainers differ; a venv of its own so that forgeline does not depend on TRL.
TRL_GRPO_VENV := bench/.venv-trl-grpo
TRL_GRPO_PINS := trl==1.16.0 transformers==5.25.0 peft==0.21.2 accelerate==1.16.0 datasets==5.2.0
.PHONY: bench-trl-grpo
bench-trl-grpo:
	test -x $(TRL_GRPO_VENV)/bin/python || $(PYTHON) -m venv $(TRL_GRPO_VENV)
	$(TRL_GRPO_VENV)/bin/pip install -q --upgrade pip
	$(TRL_GRPO_VENV)/bin/pip install -q $(PIP_FIND) '$(TORCH)'
	$(TRL_GRPO_VENV)/bin/pip install -q $(TRL_GRPO_PINS)

# `make graders`: the venvs of the reference graders that tests/test_conformance.py and
# bench/grader_agreement.py grade forgeline's tasks with (scripts/reference_grade.py):
# .venv-swebench/ (swebench 5.0.2) and .venv-swesmith/ (swesmith 0.0.9, which needs swebench 4.1.0,
# hence two). Same code as the tests' fixtures (tests/venvs.py: pinned envs/*-requirements.txt,
# a sha256 stamp, a lock), so `make test` creates them on demand too and reuses these.
.PHONY: graders
graders: setup
	$(BIN)/python tests/venvs.py swebench swesmith
