"""The JSON Schemas shipped with the package (graphcheck/schemas/) hold for what graphcheck
really writes: reports of every kind, the error document, and graphcheck.lock. A schema
that accepted anything would pass these, so each is also shown a document it must refuse."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest
from harness import ROOT

from graphcheck.cli import main
from graphcheck.schemas import schema

REF = "fixtures/reference.py:reference"


def _validator(name: str) -> jsonschema.protocols.Validator:
    found = schema(name)
    cls = jsonschema.validators.validator_for(found)
    cls.check_schema(found)
    return cls(found)


def _json(capsys, argv: list[str], code: int) -> dict:
    assert main([*argv, "--format", "json", "--no-cache"]) == code
    return json.loads(capsys.readouterr().out)


def _errors(name: str, document) -> list[str]:
    return [e.message for e in _validator(name).iter_errors(document)]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["verify", REF, "--cuts", "4"], 0),
        (["verify", "fixtures/violations.py:skip_connection", "--cuts", "4"], 1),
        (["map", REF], 0),
        (["plan", REF, "--stages", "2"], 0),
        (["verify", REF, "--cuts", "x"], 2),
    ],
    ids=["verify", "verify-violation", "map", "plan", "error"],
)
def test_every_kind_of_report_holds_to_the_report_schema(capsys, monkeypatch, argv, code):
    monkeypatch.chdir(ROOT)
    document = _json(capsys, argv, code)
    assert _errors("report", document) == []


def test_a_gate_report_holds_to_the_report_schema():
    from graphcheck.results.gate import ByteCheck, ExactCheck, GateReport, IsolationCheck
    from graphcheck.results.gate import Crossing as Leak

    report = GateReport(
        model="m.py:f", num_layers=2, cuts=[1], docs=(3,), seed=0, static_verdict="pass",
        bytes=ByteCheck("equal"), isolation=IsolationCheck("bitwise"),
    )  # fmt: skip
    assert _errors("report", json.loads(json.dumps(report.as_dict()))) == []
    leak = Leak("perturb", document=2, token=13, layer=3, layer_fqn="model.layers.3")
    report.isolation = IsolationCheck("fail", perturb=ExactCheck("perturb", "fail", leak))
    assert _errors("report", json.loads(json.dumps(report.as_dict()))) == []


def test_the_report_schema_refuses_what_is_not_a_report():
    assert _errors("report", {"graphcheck": "0.1.0", "mode": "verify"})
    assert _errors("report", {"error": "x", "detail": [], "exit_code": 1})


def test_a_written_lock_holds_to_the_lock_schema(tmp_path, monkeypatch, capsys):
    shutil.copy(ROOT / "fixtures/lockable.py", tmp_path / "lockable.py")
    (tmp_path / "graphcheck.toml").write_text(
        'require_stage_programs = false\n[[checks]]\nname = "lockable"\n'
        'model = "lockable.py:lockable"\ncuts = [3]\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert main(["lock", "--no-cache"]) == 0
    capsys.readouterr()
    lock = json.loads((tmp_path / "graphcheck.lock").read_text(encoding="utf-8"))
    assert _errors("lock", lock) == []
    broken = {**lock, "lock": 2}
    assert _errors("lock", broken)
