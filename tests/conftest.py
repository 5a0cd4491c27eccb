"""Shared test set-up: import paths, and which tests are the slow sweeps.

``make test`` runs everything but the slow tests (``-m "not slow"``: the node-id prefixes
of ``tests/slow.txt``); ``make test-slow`` runs them; CI runs both. A test is slow because
it exports many models, runs many stage processes or one heavy model, not because it
checks something the fast run does not touch: each class it covers has a representative
in the fast run (FAST keeps some listed ones there).
"""

import os
import sys
from pathlib import Path

import pytest

# the export cache stays off unless a test turns it on with --cache-dir (tests/cache/test_cache.py):
# no test reads or writes the user's cache, subprocesses included
os.environ["GRAPHCHECK_NO_CACHE"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))

# node-id prefixes of the slow tests (tests/slow.txt), and representatives kept out of them
SLOW = tuple(
    line.strip()
    for line in (Path(__file__).parent / "slow.txt").read_text("utf-8").splitlines()
    if line.strip() and not line.lstrip().startswith("#")
)
FAST = (
    "tests/model/test_families.py::test_dense_families_pass_at_every_legal_cut[llama]",
    "tests/analysis/test_optable.py::test_table_covers_every_op_of_the_family[llama]",
    "tests/gate/test_gate.py::test_static_pass_implies_equal_bytes[reference:reference-4-None]",
    "tests/gate/test_gate.py::test_static_pass_implies_equal_bytes"
    "[violations:ignores_cu_seqlens-4-isolation]",
    "tests/analysis/test_adversarial.py::test_static_pass_implies_gate_agrees[roll_masked_shift-4]",
    "tests/analysis/test_adversarial.py::test_static_pass_implies_gate_agrees[token_choice_moe-4]",
)


# the commands that prove stage programs by default
STAGED = ("verify", "plan")


@pytest.fixture
def cli(capsys):
    """The command line run in this process: ``cli("verify", MODEL, ...)`` returns
    ``(exit status, stdout, stderr)``. The tests using it are about the other rules:
    ``verify`` and ``plan`` get ``--stage-builder none`` unless they name a builder (the
    default has its own tests: tests/stages/test_stage_default.py, with ``cli_default``)."""
    return _runner(capsys, opt_out=True)


@pytest.fixture
def cli_default(capsys):
    """The command line as a user runs it: stage programs proven by default."""
    return _runner(capsys, opt_out=False)


def _runner(capsys, opt_out: bool):
    from graphcheck.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        args = [str(a) for a in argv]
        if opt_out and args and args[0] in STAGED and "--stage-builder" not in args:
            args += ["--stage-builder", "none"]
        code = main(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.replace("\\", "/")
        if nodeid.startswith(SLOW) and nodeid not in FAST:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def exports(monkeypatch):
    """How many times a model was exported (graphcheck.api's export, counted)."""
    from graphcheck import api

    calls = []
    real = api.export_model

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "export_model", counted)
    return calls
