"""First use answers at once: ``import graphcheck``, ``--help``, ``rules`` and argument
errors never import torch (it loads only when a model is built).

Each case runs in a fresh interpreter and reports whether ``torch`` is in ``sys.modules``
afterwards: a behaviour, not a timing (``benchmarks/bench_startup.py`` has the times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs ``main(argv)`` (or only the import, argv None) and prints what it left behind.
PROBE = """
import contextlib, io, json, sys
out, err = io.StringIO(), io.StringIO()
argv = json.loads(sys.argv[1])
code = None
import graphcheck
if argv is not None:
    from graphcheck.cli import main
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
print(json.dumps({"torch": "torch" in sys.modules, "code": code,
                  "out": out.getvalue(), "err": err.getvalue()}))
"""


def _probe(argv: list[str] | None, path: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(path)} if path is not None else None
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True, env=env,
    )  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (None, None, ""),
        (["--help"], 0, "usage: graphcheck"),
        (["verify", "--help"], 0, "--stage-builder"),
        (["rules"], 0, "GC203  error"),
        (["rules", "GC203"], 0, "GC203 boundary-not-materialized (error)"),
        (["rules", "GC999"], 2, "unknown rule 'GC999'"),
        (["verify"], 2, "the following arguments are required: MODEL"),
        (["map", "m.py:f", "--format", "nope"], 2, "invalid choice: 'nope'"),
        (["--version"], 0, "graphcheck 0.1.0"),
    ],
    ids=["import", "help", "verify-help", "rules", "rules-code", "unknown-rule", "usage",
         "bad-format", "version"],
)  # fmt: skip
def test_answers_without_importing_torch(argv, code, says):
    result = _probe(argv)
    assert result["code"] == code
    assert says in result["out"] + result["err"]
    assert not result["torch"], f"{argv} imported torch"


REF = "fixtures/reference.py:reference"

# Argument errors the arguments alone decide: (argv, words of the one error line).
ARGUMENT_ERRORS = [
    (["verify", REF, "--cuts", "x"], "--cuts 'x' is not a comma-separated list"),
    (["gate", REF, "--cuts", "4,x"], "--cuts '4,x' is not a comma-separated list"),
    (["verify", REF, "--layout", "E|x|L"], "--layout 'E|x|L' holds 'x'"),
    (["verify", REF, "--layout", "t*4|t*4L"], "the embedding E must open the first stage"),
    (["verify", REF, "--fqns-per-stage", "[["], "is not a JSON list of lists"),
    (["map", REF, "--select", "GC9"], "--select GC9: no graphcheck code starts with GC9"),
    (["verify", REF, "--cuts", "4", "--ignore", "XY1"], "--ignore XY1"),
    (["verify", REF, "--cuts", "4", "--format", "html"], "use it with graphcheck map or plan"),
    (["plan", REF, "--stages", "2", "--format", "markdown"], "does not render graphcheck plan"),
    (["map", REF, "--output", "/nonexistent/r.json"], "the folder /nonexistent does not exist"),
    (["map", REF, "--html", "/nonexistent/x.html"], "the folder /nonexistent does not exist"),
    (["map", REF, "--docs", "a"], "--docs 'a' is not a count"),
    (["map", REF, "--tokens", "1"], "--tokens 1 cannot hold"),
    (["map", REF, "--token-multiple", "0"], "--token-multiple must be a positive"),
    (["map", "hf:llama", "--set", "layers"], "--set 'layers' is not KEY=VALUE"),
    (["map", REF, "--allow-fp32", "["], "the '[' is never closed"),
    (["map", REF, "--doc-length", "0"], "--doc-length 0 must be at least 1"),
    (["map", REF, "--cache-dir", "README.md"], "--cache-dir README.md: not a folder"),
    (["map", REF, "--kernels", "missing.py"], "kernels file not found: missing.py"),
    (["verify", "nosuch.py:f", "--cuts", "2"], "file not found: nosuch.py"),
    (["verify", "fixtures/refrence.py:reference"], "did you mean fixtures/reference.py?"),
    (["verify", "fixtures", "--cuts", "2"], "is a directory"),
    (["verify", "fixtures/reference.py", "--cuts", "2"], "names no factory"),
    (["map", "fixtures/configs/llama-3.1-8b.json"], "is a JSON file: write hf:"),
    (["verify", "no-colon", "--cuts", "2"], "is not 'path/to/file.py:factory'"),
    (["map", "hf:nosuch/config.json"], "config not found: nosuch/config.json"),
    (["map", "hf:"], "hf: needs a model type"),
    (["check", "--config", "nosuch.toml"], "--config nosuch.toml: no such file"),
    (["check", "-k", "x"], "no graphcheck.toml or pyproject.toml with [tool.graphcheck]"),
    (["lock", "--config", "examples/graphcheck.toml", "-k", "nothing"], "selects no check"),
]  # fmt: skip

# Runs every case in one fresh interpreter; after each, its exit status, its error line
# and whether torch is loaded (once loaded it stays: the first case that loads it shows).
LOOP = """
import contextlib, io, json, sys
from graphcheck.cli import main
found = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    found.append([code, err.getvalue(), "torch" in sys.modules])
print(json.dumps(found))
"""


def test_argument_errors_answer_without_importing_torch(tmp_path):
    """Each case is exit 2 with its one line, torch not loaded; a last case that builds a
    model shows the loop sees torch (an empty stand-in package: no real torch import)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    argvs = [argv for argv, _ in ARGUMENT_ERRORS] + [["verify", REF, "--cuts", "1"]]
    done = subprocess.run(
        [sys.executable, "-c", LOOP, json.dumps(argvs)], capture_output=True, text=True,
        cwd=ROOT, timeout=120, check=True, env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    *found, built = json.loads(done.stdout)
    for (argv, words), (code, err, torch) in zip(ARGUMENT_ERRORS, found, strict=True):
        assert (code, err.count("\n")) == (2, 1), (argv, err)
        assert err.startswith("graphcheck: error: ") and words in err, (argv, err)
        assert not torch, f"{argv} imported torch"
    assert built[2], "the loop did not see torch loaded by a model build"


def test_reporter_kinds_read_from_source_are_the_modules_own():
    """``renders`` reads each reporter's ``KINDS`` from its source (no torch): the same
    set the module itself holds."""
    import importlib

    from graphcheck.report import _kinds, formats

    for fmt in formats():
        module = importlib.import_module(f"graphcheck.reporters.{fmt}")
        assert _kinds(fmt) == getattr(module, "KINDS", None), fmt


def test_the_probe_sees_torch_when_a_model_is_built(tmp_path):
    """The probe above would pass if it could not see torch: building a model imports it
    (here an empty stand-in package, so the check costs no real torch import)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    result = _probe(["verify", "fixtures/reference.py:reference", "--cuts", "1"], tmp_path)
    assert result["code"] == 2
    assert result["torch"]


def test_rule_metadata_read_from_source_is_the_modules_own():
    from graphcheck import rules

    for info, module in zip(rules.INFO, rules.RULES, strict=True):
        assert (info.code, info.name, info.severity, info.summary) == (
            module.CODE, module.NAME, module.SEVERITY, module.SUMMARY,
        )  # fmt: skip
        assert info.doc == module.__doc__
        assert info.owns == hasattr(module, "OWNS")
    assert rules.by_code()["GC203"] is rules.RULES[4]


def test_lazy_names_resolve_and_gate_stays_the_function():
    import graphcheck
    import graphcheck.gate.report  # the package import sets graphcheck.gate: still the function
    from graphcheck.gate.run import gate

    assert graphcheck.gate is gate
    assert set(graphcheck.__all__) <= set(dir(graphcheck))
    for name in graphcheck.__all__:
        assert getattr(graphcheck, name) is not None
    assert graphcheck.Report.__module__ == "graphcheck.report"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        graphcheck.nope  # noqa: B018


def test_the_progress_hook_imports_neither_torch_nor_rich():
    """api and the gate import the hook; the display's library loads only when shown."""
    code = (
        "import sys, graphcheck.phases, graphcheck.console.progress; "
        "print('torch' in sys.modules, 'rich' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_subpackages_load_on_first_attribute_access():
    """``import graphcheck; graphcheck.rules...`` works as it did when the package imported
    everything at once (here a subpackage that needs no torch, in a fresh interpreter)."""
    code = "import sys, graphcheck; print(graphcheck.rules.INFO[0].code, 'torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["GC101", "False"]
