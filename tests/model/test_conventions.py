"""The input-convention table: which framework's forward a model has, the override, the
model's own declaration, and the one line for a forward that fits none."""

from __future__ import annotations

import pytest
from harness import spec
from torch import nn

from graphcheck import api
from graphcheck.errors import UsageError
from graphcheck.model.conventions import CONVENTIONS, Convention, MaskSource, detect, register

TITAN = spec("conventions:titan_style")
FORWARDING = spec("conventions:forwarding")
DECLARED = spec("conventions:declared")
UNADAPTED = spec("conventions:unadapted")


class _HF(nn.Module):
    def forward(self, input_ids, position_ids=None, cu_seq_lens_q=None): ...


class _Kwargs(nn.Module):
    def forward(self, **kwargs): ...


class _Titan(nn.Module):
    def forward(self, tokens, positions=None, attention_masks=None): ...

    def get_attention_masks(self, positions): ...


class _TitanWithoutMasks(nn.Module):
    def forward(self, tokens, positions=None, attention_masks=None): ...


class _Plain(nn.Module):
    def forward(self, x): ...


@pytest.mark.parametrize(
    ("module", "name"),
    [(_HF, "transformers"), (_Kwargs, "transformers"), (_Titan, "torchtitan")],
)
def test_detects_the_convention_from_the_forward(module, name):
    assert detect(module()).name == name


def test_torchtitan_needs_the_mask_method_too():
    with pytest.raises(UsageError, match="fits no input convention"):
        detect(_TitanWithoutMasks())


def test_the_override_wins_and_needs_what_the_row_needs():
    assert detect(_Titan(), "transformers").name == "transformers"
    with pytest.raises(UsageError, match="has no get_attention_masks"):
        detect(_Kwargs(), "torchtitan")
    with pytest.raises(UsageError, match="unknown --inputs-from 'titan'"):
        detect(_Titan(), "titan")


def test_a_forward_that_fits_none_is_one_line_naming_the_rows_and_the_flag():
    with pytest.raises(UsageError) as err:
        detect(_Plain())
    message = str(err.value)
    assert "\n" not in message and "_Plain.forward(x)" in message
    for word in ("transformers", "torchtitan", "--inputs-from", "graphcheck_inputs"):
        assert word in message


def test_a_registered_row_is_detected():
    row = Convention("plain", "x", "pos", MaskSource.ARGUMENTS, summary="x")
    register(row)
    try:
        assert detect(_Plain()).name == "plain"
    finally:
        del CONVENTIONS["plain"]
    with pytest.raises(UsageError):
        detect(_Plain())


def test_unadapted_model_exits_2(cli):
    """(tests/commands/test_bad_inputs.py's table has it too: caught before the export.)"""
    code, out, err = cli("verify", UNADAPTED, "--cuts", "1")
    assert code == 2 and out == ""
    line, *rest = err.splitlines()
    assert rest == [] and "Traceback" not in err
    assert line.startswith("graphcheck: error: Unadapted.forward(x) fits no input convention")
    assert "--inputs-from NAME" in line


def test_forwarding_model_needs_the_flag(cli):
    pytest.importorskip("torchtitan")  # the torchtitan row hands over its VarlenMetadata
    code, _, err = cli("verify", FORWARDING, "--cuts", "1")
    assert code == 2 and "unexpected keyword argument 'input_ids'" in err
    code, out, _ = cli("verify", FORWARDING, "--cuts", "1", "--inputs-from", "torchtitan")
    assert code == 0 and "verdict: PASS" in out


def test_model_declares_its_convention():
    pytest.importorskip("torchtitan")
    report = api.verify(DECLARED, cuts=[1], stage_builder="none")
    assert (report.verdict, report.codes) == ("pass", set())
    names = {v.node for v in report.cut(1).crossing}
    assert {"cu_seq_lens_q", "max_length_q"} <= names


def test_titan_style_stages_by_torchtitans_split():
    """The default stage builder of a torchtitan-convention model is torchtitan's split."""
    pytest.importorskip("torchtitan")
    report = api.verify(TITAN, cuts=[1])
    proof = report.stage_proof
    assert (proof.proven, proof.builder, proof.default) == (True, "torchtitan", True)
    assert report.stage_summary() == "2 stage programs, 0 differences"
    assert report.verdict == "pass"


def test_torchtitans_split_needs_a_model_built_per_stage():
    """The split works in place: a model given as an object (built once) is refused by
    name, and by default its stage programs are not proven, saying how to prove them."""
    pytest.importorskip("torchtitan")
    from graphcheck.model.load import resolve_factory

    titan_style = resolve_factory(TITAN)
    with pytest.raises(UsageError, match=r"give it as FILE\.py:factory"):
        api.verify(titan_style().bfloat16(), cuts=[1], stage_builder="torchtitan")
    report = api.verify(titan_style().bfloat16(), cuts=[1])
    assert report.verdict == "pass" and not report.stage_proof.proven
    assert "FILE.py:factory" in report.stage_proof.reason


def test_a_row_without_a_batch_dim_is_refused():
    from graphcheck.analysis.export import accepted_inputs
    from graphcheck.errors import ExportError

    flat = Convention("flat", "x", "pos", MaskSource.ARGUMENTS, batch_dim=False)
    with pytest.raises(ExportError, match="without a batch dim"):
        accepted_inputs(_Plain(), flat)
    assert accepted_inputs(_Plain(), Convention("plain", "x", "pos", MaskSource.ARGUMENTS)) == (
        ("input_ids",), False,  # forward(x) takes the tokens first: called positionally
    )  # fmt: skip


# --- what torchtitan's models hand their attention: log-sum-exp, masks by name -------------

SINKS, SINKS_MIXED = spec("conventions:titan_sinks"), spec("conventions:titan_sinks_mixed")
FLEX_MASKS, FLEX_CAUSAL = (
    spec("conventions:titan_flex_masks"),
    spec("conventions:titan_flex_masks_causal"),
)


def _leaks(report) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for d in report.diagnostics:
        if d.code == "GC401":
            found.setdefault(d.layer, []).append(d.message)
    return found


def test_attention_sinks_scale_each_token_by_its_own_log_sum_exp():
    """Varlen attention's log-sum-exp ``[N, T]`` has the token dim of its own shape (not
    the output's ``[T, N, H]``): transposed and reshaped to ``[T, N]`` it scales each
    token's output, document-local. The twin subtracts its mean over all tokens: GC401
    at that mean."""
    pytest.importorskip("torchtitan")
    report = api.verify(SINKS, cuts=[1], stage_builder="none")
    assert (report.verdict, report.codes) == ("pass", set())
    mixed = api.verify(SINKS_MIXED, cuts=[1], stage_builder="none")
    assert mixed.codes == {"GC401"}
    assert list(_leaks(mixed)) == [0]
    assert _leaks(mixed)[0][0].startswith("mean over the token dimension without a document")


def test_masks_as_a_mapping_of_block_masks_each_layer_its_own():
    """``get_attention_masks`` returning a mapping of names to BlockMasks (one per kind of
    layer) is rebuilt inside the program; each layer's mask_mod is judged: the document
    window and the document mask are proven, the window without documents is refuted on
    layer 0 alone."""
    pytest.importorskip("torchtitan")
    report = api.verify(FLEX_MASKS, cuts=[1])
    assert (report.verdict, report.codes) == ("pass", set())
    assert report.stage_summary() == "2 stage programs, 0 differences"
    causal = api.verify(FLEX_CAUSAL, cuts=[1], stage_builder="none")
    assert "GC401" in causal.codes and list(_leaks(causal)) == [0]
    assert "mask_mod lets documents read each other" in _leaks(causal)[0][0]


def test_a_mapping_of_other_masks_is_one_line(cli):
    """A mapping whose values are not BlockMasks (varlen metadata) is refused (exit 2),
    naming what it holds and what graphcheck takes."""
    pytest.importorskip("torchtitan")
    code, out, err = cli("verify", spec("conventions:titan_masks_of_metadata"), "--cuts", "1")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert "get_attention_masks(positions) returned dict of Metadata" in err
    assert "a mapping of names to BlockMasks or None" in err


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("titan_sinks", "pass"), ("titan_sinks_mixed", "fail"),
        ("titan_flex_masks", "pass"), ("titan_flex_masks_causal", "fail"),
    ],
)  # fmt: skip
def test_the_gate_agrees_on_sinks_and_mask_mappings(name, verdict):
    pytest.importorskip("torchtitan")
    from graphcheck.gate.run import gate

    result = gate(spec(f"conventions:{name}"), [1], mode="graph")
    assert (result.static_verdict, result.bytes.status) == (verdict, "equal")
    assert result.isolation.holds == (verdict == "pass"), result.isolation
