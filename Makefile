# make demo: create .venv, install the project, run the main job.
# make test: create .venv, install the project with test extras, run every test.
# constraints.txt pins a known-good set (pip would otherwise backtrack for minutes
# over boto3/botocore/aiobotocore); regenerate it with `pip freeze` after upgrades.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# DuckDB 1.5.5 with its DuckLake and Iceberg extensions needs a virtualenv of its own (the test
# extras pin duckdb 2.x, the extension packages are built for 1.5.5): DuckLake is an anchor of the
# scale benchmark (python -m lakehouse.bench --only scale), and the Iceberg tests read the
# lakehouse through DuckDB's iceberg extension (tests/test_iceberg_clients.py).
DUCKLAKE_VENV := .venv-ducklake

.PHONY: demo demo-metadata test lint bench clean $(DUCKLAKE_VENV)

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

test: $(VENV)/.test-installed $(DUCKLAKE_VENV)/.installed-iceberg-avro
	$(BIN)/python -m pytest -q
	KVSTORE_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(PURE_TESTS)

lint: $(VENV)/.test-installed
	$(BIN)/ruff check kvstore lakehouse tests fuzz
	$(BIN)/ruff format --check kvstore lakehouse tests fuzz
	$(BIN)/mypy

bench: $(VENV)/.test-installed
	$(BIN)/python -m kvstore.bench
	$(BIN)/python -m lakehouse.bench

# `make .venv-ducklake`: built by `make test` (the Iceberg client tests need it); the scale
# bench reports DuckLake as not available without it.
$(DUCKLAKE_VENV): $(DUCKLAKE_VENV)/.installed-iceberg-avro

# iceberg needs the avro extension (and httpfs for a REST catalog); all loaded by path, offline.
$(DUCKLAKE_VENV)/.installed-iceberg-avro:
	rm -rf $(DUCKLAKE_VENV)
	$(PY) -m venv $(DUCKLAKE_VENV)
	$(DUCKLAKE_VENV)/bin/python -m pip install -q duckdb==1.5.5 duckdb-extension-ducklake==1.5.5 \
		duckdb-extension-iceberg==1.5.5 duckdb-extension-avro==1.5.5 \
		duckdb-extension-httpfs==1.5.5 pyarrow==26.0.1
	touch $@

clean:
	rm -rf $(VENV) $(DUCKLAKE_VENV) build *.egg-info kvstore/*.so .pytest_cache .mypy_cache .ruff_cache
