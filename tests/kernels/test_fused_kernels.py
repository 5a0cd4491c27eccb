"""Custom ops held to their trust by execution (graphcheck/kernels/validation.py).

The decoder of fixtures/fused_kernels.py is built from fused custom ops graphcheck
cannot read: three declared token-local by fixtures/kernels/fused.py, one attention
trusted because it is given the batch's cu_seq_lens. Each trust is checked by running
the op's own implementation; a leak is GC401 at the op with the packing that shows
it, and the gate agrees with every verdict.
"""

from __future__ import annotations

import pytest
from harness import ROOT, RuleExplorer, explorer, spec

from graphcheck.analysis.locality import custom
from graphcheck.gate import Gate
from graphcheck.kernels import validation

KERNELS = str(ROOT / "fixtures/kernels/fused.py")
OPS = {"fused::rms_norm", "fused::rope", "fused::swiglu", "fused::varlen_attention"}


def _report(name: str, **options):
    return explorer(f"fused_kernels:{name}", kernels=KERNELS, **options).verify([4])


def test_a_model_of_fused_ops_proves_with_every_op_validated():
    report = _report("fused")
    assert (report.verdict, report.codes) == ("pass", set())
    assert {k["op"]: k["status"] for k in report.kernels} == dict.fromkeys(OPS, "validated")
    claims = {k["op"]: k["claim"] for k in report.kernels}
    assert claims["fused::varlen_attention"] == "document-local"
    assert claims["fused::rms_norm"] == "token-local"


def test_a_declared_token_local_op_that_mixes_tokens_is_gc401_with_the_packing():
    report = _report("fused_norm_over_tokens")
    assert report.codes == {"GC401"}
    found = [d for d in report.errors if d.code == "GC401"]
    assert len(found) == 16  # both norms of every layer
    assert all(d.node.startswith("rms_norm_over_tokens") for d in found)
    assert "`fused::rms_norm_over_tokens` is declared token-local, but its own " in (
        found[0].message
    )
    assert "over 15 tokens, token 0's output changed when the other tokens were redrawn" in (
        found[0].message
    )


def test_an_op_given_the_boundaries_that_ignores_them_is_gc401_with_the_packing():
    report = _report("fused_attention_ignores_boundaries")
    assert report.codes == {"GC401"}
    found = [d for d in report.errors if d.code == "GC401"]
    assert {d.layer for d in found} == set(range(8))
    assert "with documents of [5, 3, 7] tokens, the output of document 1 (tokens 5..7) " in (
        found[0].message
    )
    leaked = next(k for k in report.kernels if k["op"] == "fused::whole_row_attention")
    assert leaked["status"] == "leaks"


def test_an_op_that_cannot_run_here_is_trusted_and_the_report_says_so():
    report = _report("fused_unchecked_norm")
    assert report.verdict == "pass"
    (unchecked,) = [k for k in report.kernels if k["op"] == "fused::rms_norm_unchecked"]
    assert unchecked["status"] == "trusted, not verified"
    assert "NotImplementedError: a GPU kernel" in unchecked["detail"]
    assert report.summary().endswith("; 1 custom op trusted, not verified by execution")


def test_without_the_declaration_the_fused_norm_fails_closed():
    report = explorer("fused_kernels:fused").verify([4])
    assert report.codes == {"GC401"}
    assert any(d.node.startswith("rms_norm") for d in report.errors)


def test_a_warm_run_does_not_execute_the_ops_again(tmp_path, monkeypatch):
    runs = []
    real = validation._run_tests
    monkeypatch.setattr(validation, "_run_tests", lambda s: runs.append(s) or real(s))
    monkeypatch.setattr(custom, "op_cache", lambda: tmp_path)
    fixture = spec("fused_kernels:fused")  # fresh explorers: each analyses its export
    cold = RuleExplorer(fixture, kernels=KERNELS).verify([4])
    # once per op and shape class: the rope of the queries (4 heads) and of the keys (2)
    assert sorted(s.node.name for s in runs) == [
        "rms_norm", "rope", "rope_1", "swiglu", "varlen_attention"
    ]  # fmt: skip
    assert not any(k["cached"] for k in cold.kernels)
    warm = RuleExplorer(fixture, kernels=KERNELS).verify([4])
    assert len(runs) == 5 and all(k["cached"] for k in warm.kernels)
    assert len(list(tmp_path.glob("*.json"))) == 5


@pytest.mark.parametrize(
    ("name", "isolated"),
    [("fused", True), ("fused_norm_over_tokens", False), ("fused_attention_ignores_boundaries",
                                                          False)],
)  # fmt: skip
def test_the_gate_agrees(name, isolated):
    fixture = f"fused_kernels:{name}"
    found = explorer(fixture, kernels=KERNELS)
    gated = Gate(spec(fixture), explorer=found, kernels=KERNELS).run([4], docs=(23, 9, 31, 4))
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation


def test_ops_declared_on_the_command_line_are_held_to_it_as_a_kernels_files():
    declared = ["fused::rms_norm", "fused::rope", "fused::swiglu"]
    report = RuleExplorer(spec("fused_kernels:fused"), token_local_ops=declared).verify([4])
    assert (report.verdict, report.codes) == ("pass", set())
    assert {k["op"] for k in report.kernels} == OPS
    leaking = RuleExplorer(
        spec("fused_kernels:fused_norm_over_tokens"),
        token_local_ops=["fused::rms_norm_over_tokens", "fused::rope", "fused::swiglu"],
    ).verify([4])
    assert leaking.codes == {"GC401"}
