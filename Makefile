# Two commands from a fresh clone: `make repro` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
# pip configs that list missing local index folders warn once per package; keep logs readable
PIPQUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export MPLBACKEND := Agg
# Which torch build set-up installs, decided here only: CUDA (requirements-cuda.lock) where nvidia-smi
# reports a driver version of at least 580.65.06, compared in full (PyPI's torch 2.13.0 is a CUDA 13 build),
# else CPU (requirements.lock), with a warning where nvidia-smi exists but fails or prints no version.
# `make setup TORCH=cpu|cuda` overrides.
MIN_DRIVER := 580.65.06
ifeq ($(origin TORCH),undefined)
# nothing without nvidia-smi; else "new|old VERSION" (the first GPU's driver) or "none STATUS OUTPUT"
NVSMI := $(shell command -v nvidia-smi >/dev/null 2>&1 || exit 0; \
  out=$$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1); rc=$$?; \
  v=$$(head -n1 <<<"$$out" | tr -d ' \r' | grep -xE '[0-9]+(\.[0-9]+)*'); \
  if [ $$rc -ne 0 ] || [ -z "$$v" ]; then echo "none $$rc $$out"; \
  elif [ "$$(printf '%s\n' $(MIN_DRIVER) "$$v" | sort -V | head -n1)" = $(MIN_DRIVER) ]; then echo "new $$v"; \
  else echo "old $$v"; fi)
TORCH := $(if $(filter new,$(firstword $(NVSMI))),cuda,cpu)
ifeq ($(firstword $(NVSMI)),old)
$(warning NVIDIA driver $(word 2,$(NVSMI)) is older than $(MIN_DRIVER), which the locked CUDA 13 torch needs: the CPU build is installed (update the driver, or TORCH=cuda to force))
endif
ifeq ($(firstword $(NVSMI)),none)
$(warning nvidia-smi failed or printed no driver version (exit $(word 2,$(NVSMI)), printed: $(or $(wordlist 3,$(words $(NVSMI)),$(NVSMI)),nothing)): the CPU build is installed (fix the driver, or TORCH=cuda to force))
endif
endif
ifneq ($(words $(TORCH)) $(words $(filter cpu cuda,$(TORCH))),1 1)
$(error TORCH=$(TORCH): use TORCH=cpu or TORCH=cuda)
endif
LOCK := $(if $(filter cuda,$(TORCH)),requirements-cuda.lock,requirements.lock)
# the stamp names the build it installed, so switching builds syncs again
STAMP := $(VENV)/.installed-$(TORCH)

.PHONY: setup system-packages lock repro test lint ui bench dag profile mlflow-server mlflow-stop cluster-2node \
  cluster-2node-stop gpu-check gpu-data gpu-headline plan-headline

setup: $(STAMP) system-packages

# Debian packages: chromium (gallery and MLflow UI tests), Fashion-MNIST, the Droid font, PostgreSQL
# (the team MLflow server).
# Installed only where apt exists and we run as root; elsewhere install them yourself (README).
system-packages:
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  for p in chromium dataset-fashion-mnist fonts-droid-fallback postgresql; do \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "apt-get install$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "system packages: not root or no apt; see README (chromium, dataset-fashion-mnist)"; fi

# The environment is part of what is reproducible: each lock pins every package with its hashes,
# requirements.lock with the CPU torch, requirements-cuda.lock with PyPI's CUDA torch and its nvidia-*
# wheels (both pin the triton the CUDA torch pins: the CPU build runs the fused route's kernels under Triton's
# interpreter); set-up installs exactly $(LOCK) with uv. pyproject.toml keeps the ranges;
# `make lock` re-resolves them into both locks (commit all three).
UV_VERSION := 0.13.9
UV := $(BIN)/uv
# CPU torch: a local wheel folder where the machine has one, else PyTorch's CPU index.
TORCH_WHEELS ?= $(wildcard /opt/wheels)
CPU_TORCH_SOURCE := $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
TORCH_SOURCE := $(if $(filter cpu,$(TORCH)),$(CPU_TORCH_SOURCE))
LOCK_FLAGS := --extra dev --generate-hashes --no-header --python-version 3.11 --python-platform x86_64-manylinux_2_28
# every version the CPU lock pins but torch's, a constraint of the CUDA lock: both differ only in torch
# and the CUDA wheels (uv names a constraint file in every `# via`; that line is dropped)
CPU_PINS := <(grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements.lock | grep -v '^torch==')

# --compile-bytecode: every package is installed with its .pyc, so no stage, test or dvc call compiles
# them again (where PYTHONDONTWRITEBYTECODE is set, Python never writes them, and torch's import alone
# takes twice as long in every process).
$(STAMP): $(LOCK) pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(UV) || $(BIN)/python -m pip install -q uv==$(UV_VERSION) $(PIPQUIET)
	@rm -f $(VENV)/.installed $(VENV)/.installed-*
	$(UV) pip sync -q --compile-bytecode --python $(BIN)/python --require-hashes $(TORCH_SOURCE) $(LOCK)
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	$(BIN)/dvc config core.analytics false
	@touch $(STAMP)

lock:
	@test -x $(UV) || $(BIN)/python -m pip install -q uv==$(UV_VERSION) $(PIPQUIET)
	$(UV) pip compile -q pyproject.toml $(LOCK_FLAGS) $(CPU_TORCH_SOURCE) -o requirements.lock
	$(UV) pip compile -q pyproject.toml $(LOCK_FLAGS) -c $(CPU_PINS) -o requirements-cuda.lock
	sed -i '\|^    #   -c /dev/fd/|d' requirements-cuda.lock

# dvc.yaml is generated from the study declarations and the params files (pipeline/graph.py).
PY ?= $(BIN)/python
dag:
	$(PY) -m pipeline.graph

# Switch the active profile: `make profile P=paper`, then `dvc repro` (or `make repro`).
profile:
	@test -n "$(P)" || { echo "usage: make profile P=smoke|gpu_medium|paper|headline" >&2; exit 2; }
	$(PY) -m pipeline.graph --profile $(P)

# What a profile costs before it starts: every stage's runs, groups, FLOPs and estimated time here
# (`make plan`, `make plan P=paper`; calibrated once per shape, cached in .trainscape/plan/). `CAL=<file>`: the
# plan of the machine that wrote that cache file (a GPU's, brought back), probing nothing here.
plan:
	$(PY) -m pipeline.plan $(if $(P),--profile $(P)) $(if $(DETAIL),--detail) $(if $(CAL),--calibration $(CAL))

# Beside dvc repro, a follow sync (pipeline/tracking/) replays each stage's tracking journal into MLflow while
# the next stages run, on the core a stage leaves idle, so the gallery stage's own sync finds little left
# (benchmarks/README.md, "Whole builds"). It stops with dvc repro, its lines in .trainscape/follow.log.
# Beside `dvc repro`: the MLflow sync, and a warm host (pipeline/warm.py) that runs each stage command in a
# forked child with torch, numpy, pandas, matplotlib and plotly imported once for the whole build.
WARM_HOST := $(CURDIR)/.trainscape/warm.sock
repro: setup dag
	@mkdir -p .trainscape
	@echo "dvc repro (MLflow sync alongside: .trainscape/follow.log; warm host: .trainscape/warm.log)"
	@$(BIN)/python -m pipeline.tracking sync --follow > .trainscape/follow.log 2>&1 & follow=$$!; \
	$(BIN)/python -m pipeline.warm serve $(WARM_HOST) > .trainscape/warm.log 2>&1 & warm=$$!; \
	trap 'kill $$follow $$warm 2>/dev/null; wait $$follow $$warm 2>/dev/null' EXIT; \
	TRAINSCAPE_WARM_HOST=$(WARM_HOST) $(BIN)/dvc repro

# Independent tests run on every core (pytest-xdist); work stealing keeps the long pipeline slices
# from queueing behind each other at the end.
test: setup
	$(BIN)/python -m pytest -n auto --dist worksteal --durations=15

lint: setup
	$(BIN)/ruff check .

# the stages' tracking journals go into MLflow first (pipeline/tracking/), then the UI starts with a
# follow sync beside it (running stages show as they go), which stops with the UI
ui: setup
	$(BIN)/python -m pipeline.tracking sync
	@echo "runs: http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
	$(BIN)/python -m pipeline.tracking sync --follow & follow=$$!; \
	trap 'kill $$follow 2>/dev/null; wait $$follow' EXIT; \
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui \
	  --backend-store-uri $${MLFLOW_TRACKING_URI:-sqlite:///$(CURDIR)/mlflow.db} \
	  --host 127.0.0.1 --port 5000 --workers 1

bench: setup
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

# A team MLflow: PostgreSQL in .cluster/ (unix socket, peer authentication, no password) and
# `mlflow server` on 127.0.0.1:$(MLFLOW_PORT); stages log to it with MLFLOW_TRACKING_URI set.
MLFLOW_PORT ?= 5000
mlflow-server: setup
	MLFLOW_PORT=$(MLFLOW_PORT) PY=$(BIN)/python cluster/mlflow-server start

mlflow-stop:
	MLFLOW_PORT=$(MLFLOW_PORT) cluster/mlflow-server stop

# Two Ray nodes on this machine (root): network namespaces joined by a veth pair, head 10.77.0.1 and
# worker 10.77.0.2, one CPU each (TRAINSCAPE_RAY_CPUS), Ray's token of their own; a stage runs on
# them from the head's namespace: cluster/ray-2node exec-head env TRAINSCAPE_EXECUTOR=ray dvc repro ...
cluster-2node: setup
	PY=$(BIN)/python cluster/ray-2node start

cluster-2node-stop:
	cluster/ray-2node stop

# First contact with CUDA (benchmarks/gpu_check.py): on a GPU machine with the system's torch (no .venv,
# dvc, mlflow or plotly needed), `make gpu-check OUT=<dir>` runs the gpu tests, the Hessian crossover,
# benchmarks/pc_gpu.py and two gpu_medium sweeps, and writes OUT/summary.txt and summary.json; without CUDA
# it says so in one line. The sweeps read MNIST's idx .gz files from gpu-data/mnist: `make gpu-data` writes
# them (and Fashion-MNIST's, in gpu-data/fashion_mnist) on a machine that can fetch them (copy the folder
# along to a machine that cannot). `GPU_CHECK_ARGS="--steps routes analysis bp spectra"`: the engine's two routes
# at the paper's deepest stack, the paper's mupc_analysis planned and partly trained on the card (a call each), a
# BP step sliced per layer against one unbind (benchmarks/bp_step.py), and hessian_init's largest spectra on the
# GPU against the CPU's band route on every core (benchmarks/hessian_spectrum.py; it needs gpu-data/pylib, which
# `make gpu-data` fills with the scipy-openblas32 package).
GPU_PY ?= python3
gpu-check:
	$(GPU_PY) benchmarks/gpu_check.py $(if $(OUT),--out $(OUT)) $(GPU_CHECK_ARGS)

gpu-data: setup
	$(BIN)/python benchmarks/gpu_check.py --write-data gpu-data

# The paper's Figure 1 at its own scale (benchmarks/gpu_headline.py): on a GPU machine, as gpu-check, the
# headline profile's slice of mupc_training trained, extracted and judged in one command, reading gpu-data/;
# OUT/summary.txt, summary.json and headline.tar.gz (the fixture). `make plan-headline`: its plan here.
gpu-headline:
	$(GPU_PY) benchmarks/gpu_headline.py $(if $(OUT),--out $(OUT)) $(GPU_HEADLINE_ARGS)

plan-headline: setup
	$(BIN)/python benchmarks/gpu_headline.py --plan
