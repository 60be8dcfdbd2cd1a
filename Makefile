# slurm-triage developer targets. `make test` and `make demo` work on a fresh Debian/Ubuntu
# machine as root: they create .venv, and the integration fixture installs Slurm if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Which Slurm the dev cluster runs for `make test`/`make demo`: 22.05 (Debian's, default) or
# 25.11 (../shared/slurm). SLURM=25.11 BACKEND=pyslurm runs it through pyslurm.
SLURM ?= 22.05
BACKEND ?= auto
export SLURM_TRIAGE_DEVCLUSTER_SLURM := $(SLURM)
export SLURM_TRIAGE_DEVCLUSTER_BACKEND := $(BACKEND)
# pyslurm lives beside its Slurm (devcluster installs it there), never in the venv.
ifeq ($(BACKEND),pyslurm)
export PYTHONPATH := /opt/slurm-$(SLURM)/python
endif

.PHONY: venv test test-unit test-integration demo bench check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,analytics]'
	touch $(STAMP)

test: venv
	$(BIN)/pytest

test-unit: venv
	$(BIN)/pytest -m "not integration"

test-integration: venv
	$(BIN)/pytest -m integration

demo: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m slurm_triage.devcluster.demo

bench: venv
	$(BIN)/python -m bench

check: venv
	$(BIN)/ruff check slurm_triage tests bench
	$(BIN)/ruff format --check slurm_triage tests bench
	$(BIN)/mypy slurm_triage

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
