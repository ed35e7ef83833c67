# make demo: create .venv, install the project, run the main job.
# make test: create .venv, install the project with test extras, run every test.
# constraints.txt pins a known-good set (pip would otherwise backtrack for minutes
# over boto3/botocore/aiobotocore); regenerate it with `pip freeze` after upgrades.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.demo-installed: $(BIN)/python pyproject.toml setup.py kvstore/_speedups.c constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml setup.py kvstore/_speedups.c constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench]'
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python -m lakehouse.demo

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q

lint: $(VENV)/.test-installed
	$(BIN)/ruff check kvstore lakehouse tests fuzz
	$(BIN)/ruff format --check kvstore lakehouse tests fuzz
	$(BIN)/mypy

bench: $(VENV)/.test-installed
	$(BIN)/python -m kvstore.bench

clean:
	rm -rf $(VENV) build *.egg-info kvstore/*.so .pytest_cache .mypy_cache .ruff_cache
