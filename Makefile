# Two commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-slow fuzz lint bench coverage docs clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# CPU build first, from PyTorch's own CPU index as pytorch.org's install guide does: a
	# bare `torch` from PyPI is the CUDA build (about 3 GB of nvidia-* packages). --retries 1:
	# where that index is out of reach (an offline mirror), pip falls back at once to the
	# indexes and find-links configured instead of retrying every package for minutes.
	$(BIN)/pip install --quiet --retries 1 --timeout 15 \
		--index-url https://download.pytorch.org/whl/cpu torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	# torchtitan (tests/model/test_torchtitan.py) without its dependency on a second torch
	$(BIN)/pip install --quiet --no-deps spmd_types==0.2.3 tyro==1.0.17 typeguard==4.6.1 \
		docstring-parser==0.18.0 triton==3.9.0 torchtitan==0.3.0
	# Liger's kernels (tests/kernels/test_liger.py), pure Python over the torch and triton above
	$(BIN)/pip install --quiet --no-deps liger-kernel==0.8.5
	touch $(STAMP)

# Exit status 1 means "violations found": expected for the violating fixtures.
demo: $(STAMP)
	@echo "== a legal cut: one bf16 residual crosses =="
	$(BIN)/graphcheck verify fixtures/reference.py:reference --cuts 4
	@echo "== a skip connection: the embedding output crosses too =="
	$(BIN)/graphcheck verify fixtures/violations.py:skip_connection --cuts 4 || test $$? -eq 1
	@echo "== the legal-cut map of a model that collects every layer's output =="
	$(BIN)/graphcheck map fixtures/violations.py:collected_outputs || test $$? -eq 1

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# `make test`: lint and every test but the slow sweeps, on both cores (under 5 minutes).
test: lint
	$(BIN)/pytest -n 2 -m "not slow"

# The inner loop: no lint, stop at the first failure.
test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow" -x

# The slow sweeps: every family at every cut, stage processes, gate agreement (CI runs them).
test-slow: $(STAMP)
	$(BIN)/pytest -n 2 -m slow

# The differential fuzzer at length: thousands of composed decoders against the gate.
fuzz: $(STAMP)
	GRAPHCHECK_FUZZ_EXAMPLES=2000 $(BIN)/pytest tests/analysis/test_fuzz.py -k "static_pass and not at_length"

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_export.py
	$(BIN)/python benchmarks/bench_stage_programs.py
	$(BIN)/python benchmarks/bench_plan.py
	$(BIN)/python benchmarks/bench_cache.py
	$(BIN)/python benchmarks/bench_locality.py
	$(BIN)/python benchmarks/bench_backward.py
	$(BIN)/python benchmarks/bench_validation.py
	$(BIN)/python benchmarks/bench_startup.py

# Every transformers causal-LM family through `graphcheck map`, and `graphcheck gate` for
# every family proven or with a GC401/GC402 finding: the coverage table of
# docs/explanation/coverage.md.
coverage: $(STAMP)
	$(BIN)/python scripts/coverage.py --evidence --write --json docs/coverage.json

# The documentation site (mkdocs.yml, docs/): the reference pages are generated as it builds;
# --strict fails on a broken link or a missing page. The cut explorer guide shows the
# screenshot the Chromium test takes and the notebook as its test ran it: those run first.
docs: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/reporters/test_view.py \
		-k "click_shows or example_notebook"
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) .pytest_cache site
