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
STAMP := $(VENV)/.installed

.PHONY: setup system-packages lock repro test lint ui bench dag profile mlflow-server mlflow-stop

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

# The environment is part of what is reproducible: requirements.lock pins every package with its
# hashes (CPU torch included); set-up installs exactly the lock with uv. pyproject.toml keeps the
# ranges; `make lock` re-resolves them into the lock (commit both).
LOCK := requirements.lock
UV_VERSION := 0.13.9
UV := $(BIN)/uv
# CPU torch: a local wheel folder where the machine has one, else PyTorch's CPU index.
TORCH_WHEELS ?= $(wildcard /opt/wheels)
TORCH_SOURCE := $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)

# --compile-bytecode: every package is installed with its .pyc, so no stage, test or dvc call compiles
# them again (where PYTHONDONTWRITEBYTECODE is set, Python never writes them, and torch's import alone
# takes twice as long in every process).
$(STAMP): $(LOCK) pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(UV) || $(BIN)/python -m pip install -q uv==$(UV_VERSION) $(PIPQUIET)
	$(UV) pip sync -q --compile-bytecode --python $(BIN)/python --require-hashes $(TORCH_SOURCE) $(LOCK)
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	$(BIN)/dvc config core.analytics false
	@touch $(STAMP)

lock:
	@test -x $(UV) || $(BIN)/python -m pip install -q uv==$(UV_VERSION) $(PIPQUIET)
	$(UV) pip compile -q pyproject.toml --extra dev --generate-hashes --no-header $(TORCH_SOURCE) \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 -o $(LOCK)

# dvc.yaml is generated from the study declarations and the params files (pipeline/graph.py).
PY ?= $(BIN)/python
dag:
	$(PY) -m pipeline.graph

# Switch the active profile: `make profile P=paper`, then `dvc repro` (or `make repro`).
profile:
	@test -n "$(P)" || { echo "usage: make profile P=smoke|gpu_medium|paper" >&2; exit 2; }
	$(PY) -m pipeline.graph --profile $(P)

repro: setup dag
	$(BIN)/dvc repro

# Independent tests run on every core (pytest-xdist); work stealing keeps the long pipeline slices
# from queueing behind each other at the end.
test: setup
	$(BIN)/python -m pytest -n auto --dist worksteal --durations=15

lint: setup
	$(BIN)/ruff check .

# the stages' tracking journals go into MLflow first (pipeline/tracking.py), then the UI starts
ui: setup
	$(BIN)/python -m pipeline.tracking sync
	@echo "runs: http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
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
