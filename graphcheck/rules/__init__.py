"""The rules: one module per code. This table is the public contract; codes
are never reused. Each module's docstring is the rule's user documentation.

==== ================================ ==============================================
code name                             fires when
==== ================================ ==============================================
GC101 stage-plan-invalid              cut out of range, empty middle stage, layers
                                      out of index order
GC102 misplaced-edge-module           embedding not only on stage 0; norm and head not
                                      together on the last stage
GC201 extra-activation-crosses-cut    more than one activation crosses a cut
GC202 boundary-not-bf16               the crossing activation is not bf16
GC203 boundary-not-materialized       the crossing value is a view / has a
                                      higher-precision twin
GC204 boundary-not-layer-output       the crossing activation is not the residual
                                      between the two layers
GC205 parameter-shared-across-stages  a parameter is used by two stages
GC206 boundary-not-residual-shape     the crossing value is not a [1, T, H] residual
                                      (rank, width, bitcast)
GC301 kernel-choice-flipped           a stage program's layer differs from the uncut
                                      program's layer (``--stage-builder``)
GC302 layer-identity-lost             a stage's layers lost their global indices
                                      (warning)
GC303 stage-program-differs           embedding, prelude side inputs, norm+head or
                                      the stage hand-off differ
GC401 varlen-metadata-not-consumed    an op mixes tokens across packed documents
GC402 positions-fabricated            an absolute token index reaches values instead
                                      of position_ids
GC403 shape-specialized               export specialised or guarded T / N
GC501 non-bf16-parameter              a stage parameter outside the allowlist is not bf16
==== ================================ ==============================================

GC3xx are the stage-program equivalence rules: they run with a stage builder.
"""

from __future__ import annotations

from graphcheck.rules import (
    gc101_stage_plan_invalid,
    gc102_misplaced_edge_module,
    gc201_extra_activation_crosses_cut,
    gc202_boundary_not_bf16,
    gc203_boundary_not_materialized,
    gc204_boundary_not_layer_output,
    gc205_parameter_shared_across_stages,
    gc206_boundary_not_residual_shape,
    gc301_kernel_choice_flipped,
    gc302_layer_identity_lost,
    gc303_stage_program_differs,
    gc401_varlen_metadata_not_consumed,
    gc402_positions_fabricated,
    gc403_shape_specialized,
    gc501_non_bf16_parameter,
)

__all__ = ["RULES", "by_code", "doc", "table"]

RULES = (
    gc101_stage_plan_invalid,
    gc102_misplaced_edge_module,
    gc201_extra_activation_crosses_cut,
    gc202_boundary_not_bf16,
    gc203_boundary_not_materialized,
    gc204_boundary_not_layer_output,
    gc205_parameter_shared_across_stages,
    gc206_boundary_not_residual_shape,
    gc301_kernel_choice_flipped,
    gc302_layer_identity_lost,
    gc303_stage_program_differs,
    gc401_varlen_metadata_not_consumed,
    gc402_positions_fabricated,
    gc403_shape_specialized,
    gc501_non_bf16_parameter,
)


def by_code() -> dict[str, object]:
    """``{"GC201": <module gc201_...>, ...}``

    >>> sorted(by_code())[:2]
    ['GC101', 'GC102']
    """
    return {rule.CODE: rule for rule in RULES}


def table() -> str:
    """One line per rule: code, name, summary."""
    return "".join(f"{r.CODE}  {r.NAME:<32}  {r.SUMMARY}\n" for r in RULES)


def doc(code: str) -> str:
    """The whole documentation of rule ``code``."""
    rule = by_code().get(code.upper())
    if rule is None:
        from graphcheck.errors import UsageError

        raise UsageError(f"unknown rule {code!r}: see graphcheck rules")
    return rule.__doc__
