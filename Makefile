# Two commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# CPU build first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	-$(BIN)/graphcheck verify fixtures/reference.py:reference --cuts 4
	-$(BIN)/graphcheck verify fixtures/violations.py:skip_connection --cuts 4
	$(BIN)/graphcheck map fixtures/violations.py:collected_outputs || test $$? -eq 1

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_export.py

clean:
	rm -rf $(VENV) .pytest_cache
