"""The command-line contract: exit status, one-line errors, JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness import ROOT, spec

REFERENCE = spec("reference:reference")


def test_exit_0_when_every_cut_is_proven(cli):
    code, out, _ = cli("verify", REFERENCE, "--cuts", "4")
    assert code == 0
    assert "verdict: PASS" in out


def test_exit_1_on_violation(cli):
    code, out, _ = cli("verify", spec("violations:skip_connection"), "--cuts", "4")
    assert code == 1
    assert "GC201" in out


def test_json_report_schema(cli, tmp_path):
    target = tmp_path / "report.json"
    code, out, _ = cli(
        "verify", spec("violations:tied_embeddings"), "--cuts", "4",
        "--format", "json", "--output", str(target),
    )  # fmt: skip
    assert code == 1  # stdout: the one-line verdict, for the CI log
    assert out.startswith("graphcheck: FAIL (0/1 cuts proven")
    assert out.endswith(f"; report written to {target}\n")
    data = json.loads(target.read_text())
    assert data["graphcheck"] == "0.1.0"
    assert (data["verdict"], data["num_layers"]) == ("fail", 8)
    assert data["stages"][0] == {"index": 0, "layers": [0, 3], "modules": ["model.embed_tokens"]}
    (cut,) = data["cuts"]
    assert cut["position"] == 4 and cut["verdict"] == "fail"
    assert {"node", "role", "dtype", "shape", "producer", "consumers"} == set(cut["crossing"][0])
    (diag,) = data["diagnostics"]
    assert (diag["code"], diag["name"], diag["cut"], diag["stage"]) == (
        "GC205",
        "parameter-shared-across-stages",
        4,
        1,
    )
    assert {"message", "node", "module", "source", "severity"} <= set(diag)


def test_map_prints_legal_cuts(cli):
    code, out, _ = cli("map", spec("violations:collected_outputs"))
    assert code == 1
    assert out.rstrip().endswith("legal cuts: 0, 1, 8")


BAD_INPUTS = [
    (["verify", "fixtures/missing.py:model", "--cuts", "4"], "not found"),
    (["verify", f"{ROOT}/fixtures/reference.py:missing", "--cuts", "4"], "no callable"),
    (["verify", spec("violations:factory_raises"), "--cuts", "4"], "raised ValueError"),
    (["verify", REFERENCE, "--cuts", "4,x"], "GC101"),
    (["verify", REFERENCE, "--cuts", "99"], "GC101"),
    (["verify", REFERENCE, "--cuts", "5,3"], "GC101"),
    (["verify", REFERENCE, "--stages", "9"], "GC101"),
    (["verify", REFERENCE, "--cuts", "4", "--layers", "model.blocks"], "not found"),
    (["verify", "no-colon", "--cuts", "4"], "model spec"),
    (["verify", REFERENCE], "--cuts or --stages"),
    (["verify", REFERENCE, "--cuts", "4", "--stage-builder", "keep-idx"], "stage builder"),
    (["verify", REFERENCE, "--cuts", "4", "--stage-builder", "none.py:build"], "not found"),
]


@pytest.mark.parametrize(("argv", "words"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2(cli, argv, words):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("graphcheck: error:")
    assert words in err


def test_no_traceback_from_the_installed_command():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphcheck",
            "verify",
            spec("violations:export_fails"),
            "--cuts",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    first, *detail = proc.stderr.splitlines()
    assert first.startswith("graphcheck: error: torch.export failed")
    assert detail and all(line.startswith("  ") for line in detail)  # the user's frame
    assert "Traceback" not in proc.stderr


def test_rules_table_lists_every_code(cli):
    code, out, _ = cli("rules")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        "GC101", "GC102", "GC201", "GC202", "GC203", "GC204", "GC205", "GC206",
        "GC301", "GC302", "GC303", "GC304", "GC401", "GC402", "GC403", "GC404", "GC501",
    ]  # fmt: skip


def test_a_bug_in_graphcheck_is_one_line_exit_2(cli, monkeypatch):
    from graphcheck import api

    def broken(*args, **kwargs):
        raise AttributeError("'Node' object has no attribute 'shape'")

    monkeypatch.setattr(api, "cut_map", broken)
    code, out, err = cli("map", REFERENCE)
    assert (code, out) == (2, "")
    assert err == (
        "graphcheck: internal error: AttributeError: 'Node' object has no attribute 'shape' "
        "(nothing was proven; GRAPHCHECK_TRACEBACK=1 shows where)\n"
    )
    monkeypatch.setenv("GRAPHCHECK_TRACEBACK", "1")
    with pytest.raises(AttributeError):
        cli("map", REFERENCE)
