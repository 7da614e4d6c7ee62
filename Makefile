# One-command set-up: `make train` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/small.yaml

# Corpora: ../shared/data when it exists (CI, this workplace), else ./data.
ATTNCLI_DATA_DIR ?= $(if $(wildcard ../shared/data/README.md),$(abspath ../shared/data),$(abspath data))
export ATTNCLI_DATA_DIR

.PHONY: train test lint bench gpu-check clean

# torch first, pinned: with no torch installed a loose requirement would pull the newest build.
$(BIN)/.base: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[zh]'
	touch $@

$(BIN)/.dev: $(BIN)/.base
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

train: $(BIN)/.base
	$(BIN)/attncli train $(CONFIG)

test: $(BIN)/.dev
	$(BIN)/ruff check attncli tests benchmarks
	$(BIN)/lint-imports  # the layers of pyproject.toml's [tool.importlinter]
	$(BIN)/python -m pytest

lint: $(BIN)/.dev
	$(BIN)/ruff check attncli tests benchmarks
	$(BIN)/lint-imports

bench: $(BIN)/.base
	$(BIN)/attncli bench --device cpu

# On a machine with CUDA (see benchmarks/gpu_check.py): CUDA tests, bench, a timed base.yaml run.
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
