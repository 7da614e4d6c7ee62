# One-command set-up: `make train` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/small.yaml

# Corpora: ../shared/data when it exists (CI, this workplace), else ./data.
ATTNCLI_DATA_DIR ?= $(if $(wildcard ../shared/data/README.md),$(abspath ../shared/data),$(abspath data))
export ATTNCLI_DATA_DIR

.PHONY: train test lint bench gpu-check argos-env lt-env argos-check libretranslate-check clean

# The Argos Translate clients, each in an environment of its own (LibreTranslate's fork of
# argostranslate installs the same module name), to check `attncli export --to argos` with them
# (docs/deploying.md#into-libretranslate). argostranslate needs stanza, which needs torch:
# pinned first, the CPU build, as for attncli. onnx builds the offline MiniSBD placeholder.
ARGOS_VENV := .venv-argos
LT_VENV    := .venv-lt

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

$(ARGOS_VENV)/.done:
	test -x $(ARGOS_VENV)/bin/python || $(PYTHON) -m venv $(ARGOS_VENV)
	$(ARGOS_VENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0
	$(ARGOS_VENV)/bin/pip install -q --disable-pip-version-check argostranslate==1.11.0 onnx==1.23.2
	touch $@

$(LT_VENV)/.done:
	test -x $(LT_VENV)/bin/python || $(PYTHON) -m venv $(LT_VENV)
	$(LT_VENV)/bin/pip install -q --disable-pip-version-check libretranslate==1.9.6 libretranslatepy==2.1.4 onnx==1.23.2
	touch $@

argos-env: $(ARGOS_VENV)/.done
lt-env: $(LT_VENV)/.done

# argostranslate installs and translates an exported tiny run (tests/test_argos_package.py,
# which `make test` runs too once .venv-argos exists, as .ci/run makes it).
argos-check: $(BIN)/.dev $(ARGOS_VENV)/.done
	ATTNCLI_ARGOS_PYTHON=$(abspath $(ARGOS_VENV))/bin/python $(BIN)/python -m pytest -q tests/test_argos_package.py

# LibreTranslate serving two packages offline: make libretranslate-check PACKAGES="a.argosmodel b.argosmodel"
libretranslate-check: $(LT_VENV)/.done
	unshare -n sh -c 'ip link set lo up && $(LT_VENV)/bin/python benchmarks/libretranslate_check.py $(PACKAGES)'

bench: $(BIN)/.base
	$(BIN)/attncli bench --device cpu

# On a machine with CUDA (see benchmarks/gpu_check.py): CUDA tests, bench, a timed base.yaml run.
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) $(ARGOS_VENV) $(LT_VENV) .pytest_cache .ruff_cache
