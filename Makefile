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

# The oldest nvidia-ml-py pyproject allows (slurm_triage/simulate/bindings.py OLDEST): the
# NVML tests run once more with it first on the import path. pip fetches the 37 kB wheel
# once; offline, point PIP_FIND_LINKS at a folder holding it and set PIP_NO_INDEX=1.
NVML_OLDEST := 12.535.77
NVML_OLDEST_DIR := build/nvidia-ml-py-$(NVML_OLDEST)
NVML_TESTS := tests/unit/test_nvml_bindings.py tests/unit/test_simulate.py tests/unit/test_gpu_ids.py

.PHONY: venv test test-unit test-integration test-nvml-oldest demo bench check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@echo "setup: creating $(VENV) and installing slurm-triage with pip (first use: a minute or two)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,analytics]'
	@echo "setup: $(VENV) ready"
	touch $(STAMP)

test: venv
	$(BIN)/pytest

test-unit: venv
	$(BIN)/pytest -m "not integration"

test-nvml-oldest: venv $(NVML_OLDEST_DIR)/pynvml.py
	PYTHONPATH=$(CURDIR)/$(NVML_OLDEST_DIR) $(BIN)/pytest -m "not integration" -q $(NVML_TESTS)

$(NVML_OLDEST_DIR)/pynvml.py:
	$(BIN)/pip install --quiet --no-deps --target $(NVML_OLDEST_DIR) nvidia-ml-py==$(NVML_OLDEST)

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
