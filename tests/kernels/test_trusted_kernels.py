"""Custom kernels trusted for the values they receive (fixtures/trusted_kernels.py).

A kernel outside ATen is trusted to keep documents apart when an argument's value is
proven to be the batch's document structure, whatever the argument is called:
FlashAttention's ``cu_seqlens_q`` / ``cu_seqlens_k`` and a user namespace's ``bounds``
alike. Given boundaries of one document over the whole batch, it is GC401, and the
byte gate shows the leak; an op with two outputs gives one finding, at the op.
"""

from __future__ import annotations

import pytest
from harness import ROOT, explorer, spec

from graphcheck.gate import Gate

KERNELS = str(ROOT / "fixtures/kernels/flash_attn.py")
LAYERS = {"model.layers.2.mixer", "model.layers.5.mixer"}


def _verified(name: str):
    return explorer(f"trusted_kernels:{name}", kernels=KERNELS).verify([4])


@pytest.mark.parametrize("name", ["flash_attn_varlen", "flash_attn_lse", "segment_attention_mixer"])
def test_kernel_given_the_batchs_boundaries_is_trusted(name):
    report = _verified(name)
    assert (report.verdict, report.codes) == ("pass", set())


FA = "`flash_attn._flash_attn_varlen_forward.default` is given `cu_seqlens_q`, `cu_seqlens_k`, "
FA += "which are not the batch's document structure"
MYLIB = "`mylib.segment_attention.default` is given `bounds`, which is not the batch's"


@pytest.mark.parametrize(
    ("name", "message"),
    [("flash_attn_whole_batch", FA), ("flash_attn_lse_whole_batch", FA),
     ("segment_attention_whole_batch", MYLIB)],
)  # fmt: skip
def test_kernel_given_other_boundaries_is_one_leak_per_call(name, message):
    """One GC401 per layer, at the kernel (none at the ``getitem`` of a tuple's outputs),
    naming the arguments whose values are not the document structure."""
    report = _verified(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert {d.module for d in report.errors} == LAYERS and len(report.errors) == 2
    assert all(message in d.message for d in report.errors)


def test_unreadable_op_with_two_outputs_fails_closed_once_per_call():
    report = _verified("fused_norm_two_outputs")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert len(report.errors) == 2 and {d.module for d in report.errors} == LAYERS
    assert all("`mylib.rms_norm_rstd.default` is not in" in d.message for d in report.errors)


@pytest.mark.parametrize(
    ("name", "isolated"), [("flash_attn_varlen", True), ("flash_attn_whole_batch", False)]
)
def test_gate_agrees_with_the_static_verdict(name, isolated):
    """The kernels file's CPU implementation runs in the gate: given the batch's
    boundaries no document's bytes change with the others; given ``[0, T]`` they do."""
    fixture = f"trusted_kernels:{name}"
    found = explorer(fixture, kernels=KERNELS)
    gate = Gate(spec(fixture), explorer=found, kernels=KERNELS)
    gated = gate.run([4], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation
