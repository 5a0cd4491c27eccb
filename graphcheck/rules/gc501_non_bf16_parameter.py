"""GC501 non-bf16-parameter

What it checks
    Every parameter a stage holds is bfloat16, except those matching the
    allowlist (default globs ``*.A_log`` and ``*.dt_bias``; add more with
    ``--allow-fp32 GLOB``). With ``--dtype float32`` the model's declared fp32
    carve-outs (``_keep_in_fp32_modules_strict``,
    ``get_pp_module_config()["fp32_params"]``) are allowed too.

Why it matters
    The serving program runs bf16 weights. A float32 weight the trainer uses
    directly (or rounds at a different point) computes other bytes; the few
    parameters real kernels keep in fp32 on purpose are pinned explicitly.

Example
    A norm weight created with ``dtype=torch.float32`` and cast at use.

Fix
    Create the parameter in bf16, or, when the serving kernel really reads it
    in fp32, declare it (``get_pp_module_config()["fp32_params"]``, built with
    ``--dtype float32``) or allowlist it with ``--allow-fp32 GLOB``
    (``allow_fp32=["GLOB"]`` in the API, ``allow_fp32 = ["GLOB"]`` in a check of
    ``[tool.graphcheck]``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC501"
NAME = "non-bf16-parameter"
SEVERITY = "error"
SUMMARY = "a stage parameter outside the allowlist is not bf16"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:fp32_param",
    "passing": "fixtures/violations.py:fp32_allowlisted",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    found = []
    for node in program.parameters:
        fqn = program.owner.get(node, node.name)
        dtype = program.dtype(node)
        if dtype == "bfloat16" or any(fnmatchcase(fqn, g) for g in ctx.allow_fp32):
            continue
        users = [u for u in node.users if u in program.interval]
        stage = ctx.stage_of(users[0]) if users else None
        found.append(
            Diagnostic.at(
                CODE,
                NAME,
                f"parameter {fqn} is {dtype}, not bfloat16; create it in bf16, or declare it "
                'fp32 (get_pp_module_config()["fp32_params"] with --dtype float32) or allow '
                f'it with --allow-fp32 GLOB (allow_fp32=["{fqn}"] in the API)',
                node=node,
                module=fqn,
                stage=stage,
            )
        )
    return found
