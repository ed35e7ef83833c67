# make demo: create .venv, install the project, run the main job.
# make test: create .venv, install the project with test extras, run every test.
# constraints.txt pins a known-good set (pip would otherwise backtrack for minutes
# over boto3/botocore/aiobotocore); regenerate it with `pip freeze` after upgrades.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-metadata test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.demo-installed: $(BIN)/python pyproject.toml setup.py kvstore/_speedups.c constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[spark]'
	touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml setup.py kvstore/_speedups.c constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench,spark]'
	touch $@

# The main job: a PySpark pipeline building a lakehouse with data (lakehouse/spark_demo.py).
# `make demo-metadata` runs the earlier metadata-only narration (lakehouse/demo.py).
demo: $(VENV)/.demo-installed
	$(BIN)/python -m lakehouse.spark_demo

demo-metadata: $(VENV)/.demo-installed
	$(BIN)/python -m lakehouse.demo

# The whole suite, then the format, corruption, compaction and model-based tests
# again on the pure-Python code paths (what runs where the C accelerator is not built).
PURE_TESTS := tests/test_formats.py tests/test_state_machine.py tests/test_corruption.py \
	tests/test_compaction.py fuzz/fuzz_decoders.py

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q
	KVSTORE_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(PURE_TESTS)

lint: $(VENV)/.test-installed
	$(BIN)/ruff check kvstore lakehouse tests fuzz
	$(BIN)/ruff format --check kvstore lakehouse tests fuzz
	$(BIN)/mypy

bench: $(VENV)/.test-installed
	$(BIN)/python -m kvstore.bench
	$(BIN)/python -m lakehouse.bench

clean:
	rm -rf $(VENV) build *.egg-info kvstore/*.so .pytest_cache .mypy_cache .ruff_cache
