"""The plan language: cuts, stage counts, layout strings and FQN lists, parsed and
checked against the number of layers into a :class:`~graphcheck.planning.plan.StagePlan`.

A malformed plan is a bad argument: each function here raises a
:class:`~graphcheck.errors.UsageError` (exit status 2, before any export) whose line
starts with the code and name of the rule of stage plans, GC101 stage-plan-invalid
(:mod:`graphcheck.rules.gc101_stage_plan_invalid` checks what only the program shows).

>>> parse_cuts("4,8"), layout_counts("Et*2|t*2L")
([4, 8], [2, 2])
"""

from __future__ import annotations

import itertools
import json
import re

from graphcheck.errors import UsageError
from graphcheck.planning.plan import StagePlan

__all__ = [
    "PLAN_ERROR",
    "cuts_from_fqns",
    "layout_counts",
    "parse_cuts",
    "parse_fqns_per_stage",
    "parse_layout",
    "plan_from_cuts",
    "plan_from_stages",
]

PLAN_ERROR = "GC101 stage-plan-invalid"  # what a malformed plan's error line starts with
_PREFIX = PLAN_ERROR


def parse_cuts(text: str) -> list[int]:
    """``"4,8"`` -> ``[4, 8]``; raises :class:`UsageError` on anything else."""
    try:
        return [int(part) for part in text.split(",") if part.strip()] or _empty()
    except ValueError:
        raise UsageError(
            f"{_PREFIX}: --cuts {text!r} is not a comma-separated list of layer indices"
        ) from None


def _empty() -> list[int]:
    raise ValueError


def plan_from_cuts(cuts: list[int], num_layers: int) -> StagePlan:
    """Validate ``cuts`` against ``num_layers``; raises :class:`UsageError`.

    >>> [s.layers for s in plan_from_cuts([4, 8], 12).stages]
    [(0, 3), (4, 7), (8, 11)]
    """
    for cut in cuts:
        if not 0 <= cut <= num_layers:
            raise UsageError(f"{_PREFIX}: cut {cut} is out of range 0..{num_layers}")
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            raise UsageError(
                f"{_PREFIX}: cuts must strictly increase "
                f"({a} then {b} leaves an empty middle stage)"
            )
    return StagePlan(tuple(cuts), num_layers)


def plan_from_stages(stages: int, num_layers: int) -> StagePlan:
    """An even split of ``num_layers`` into ``stages`` stages.

    >>> plan_from_stages(3, 8).cuts
    (3, 5)
    """
    if not 1 <= stages <= num_layers:
        raise UsageError(f"{_PREFIX}: --stages {stages} must be between 1 and {num_layers}")
    return StagePlan(tuple(round(i * num_layers / stages) for i in range(1, stages)), num_layers)


# --- plans users already write: layout strings and module lists per stage ----------------

_LAYOUT_LETTERS = {"E": "the embedding", "t": "a decoder layer", "L": "the loss/head"}


def parse_layout(text: str, num_layers: int) -> list[int]:
    """A Megatron-style layout string -> cuts: ``E`` the embedding, ``t`` a decoder
    layer, ``L`` the loss/head, ``|`` between stages, ``X*N`` or ``(...)*N`` repeats;
    ``E`` opens the first stage and ``L`` closes the last. Raises :class:`UsageError`.

    >>> parse_layout("E|t*4|t*3|tL", 8), parse_layout("Ett|ttL", 4), parse_layout("Et*2|L", 2)
    ([0, 4, 7], [2], [2])
    """
    counts = layout_counts(text)
    if sum(counts) != num_layers:
        raise UsageError(
            f"{_PREFIX}: --layout {text!r} holds {sum(counts)} decoder layers (t); "
            f"the model has {num_layers}"
        )
    return list(plan_from_cuts(list(itertools.accumulate(counts[:-1])), num_layers).cuts)


def layout_counts(text: str) -> list[int]:
    """The decoder layers of each stage of a layout string, its syntax checked without the
    model (so before it is built); raises :class:`UsageError`.

    >>> layout_counts("E|t*4|(tt|)*2tL")
    [0, 4, 2, 2, 1]
    """
    stages = _expand(text).split("|")
    where = f"--layout {text!r}"
    bad = sorted(set("".join(stages)) - set(_LAYOUT_LETTERS))
    if bad:
        raise UsageError(
            f"{_PREFIX}: {where} holds {bad[0]!r}; use E (embedding), t (decoder layer), "
            "L (loss/head), | (between stages) and X*N (repeat)"
        )
    _edges_in_place(stages, where)
    return [stage.count("t") for stage in stages]


def _expand(text: str) -> str:
    """``"E|t*3|(tt|)*2L"`` -> ``"E|ttt|tt|tt|L"``; whitespace ignored."""
    text = "".join(text.split())
    group = re.compile(r"\(([^()]*)\)\*(\d+)|([A-Za-z])\*(\d+)")
    while (match := group.search(text)) is not None:
        body = match.group(1) if match.group(1) is not None else match.group(3)
        count = int(match.group(2) or match.group(4))
        text = text[: match.start()] + body * count + text[match.end() :]
    if "(" in text or ")" in text or "*" in text:
        raise UsageError(f"{_PREFIX}: --layout: a repeat is X*N or (...)*N with N a number")
    return text


def _edges_in_place(stages: list[str], where: str) -> None:
    """``E`` exactly once, first in the first stage; ``L`` once, last in the last."""
    letters = "".join(stages)
    if letters.count("E") != 1 or not stages[0].startswith("E"):
        raise UsageError(
            f"{_PREFIX}: {where}: the embedding E must open the first stage, once "
            "(e.g. 'Ettt|ttttL')"
        )
    if letters.count("L") != 1 or not stages[-1].endswith("L"):
        raise UsageError(
            f"{_PREFIX}: {where}: the loss/head L must close the last stage, once "
            "(e.g. 'Ettt|ttttL')"
        )
    for i, stage in enumerate(stages[1:-1], start=1):
        if not stage:
            raise UsageError(f"{_PREFIX}: {where}: stage {i} is empty; give it a layer (t)")


def parse_fqns_per_stage(text: str) -> list[list[str]]:
    """``'[["model.embed_tokens", "model.layers.0"], ["model.layers.1", "lm_head"]]'`` ->
    the list; raises :class:`UsageError` on anything else."""
    try:
        stages = json.loads(text)
    except ValueError:
        stages = None
    if not (
        isinstance(stages, list)
        and stages
        and all(isinstance(s, list) and all(isinstance(f, str) for f in s) for s in stages)
    ):
        raise UsageError(
            f"{_PREFIX}: --fqns-per-stage {text!r} is not a JSON list of lists of module "
            'names, e.g. [["model.embed_tokens", "model.layers.0"], ["model.layers.1", '
            '"model.norm", "lm_head"]]'
        )
    return stages


def cuts_from_fqns(stages: list[list[str]], layout) -> list[int]:
    """A torchtitan-style list of module FQNs per stage -> cuts: each stage's layers
    follow the last stage's, every layer is in one stage, the input modules in the first
    and the output modules in the last. Raises :class:`UsageError`.

    >>> from graphcheck.model.layout import Layout
    >>> lay = Layout("model.layers", ("model.embed_tokens",), ("model.norm", "lm_head"), 2,
    ...              {"0": 0, "1": 1})
    >>> cuts_from_fqns([["model.embed_tokens", "model.layers.0"],
    ...                 ["model.layers.1", "model.norm", "lm_head"]], lay)
    [1]
    """
    placed: list[list[int]] = [[] for _ in stages]
    for i, stage in enumerate(stages):
        for fqn in stage:
            _place_fqn(fqn, i, len(stages), layout, placed)
    layers = [layer for found in placed for layer in found]
    if layers != list(range(layout.num_layers)):
        raise UsageError(
            f"{_PREFIX}: --fqns-per-stage must list every layer 0..{layout.num_layers - 1} "
            f"once, in order across the stages; it lists {layers}"
        )
    named = {fqn for stage in stages for fqn in stage}
    missing = [f for f in (*layout.input_fqns, *layout.output_fqns) if f not in named]
    if missing:
        raise UsageError(f"{_PREFIX}: --fqns-per-stage puts {missing[0]} in no stage")
    cuts, seen = [], 0
    for found in placed[:-1]:
        seen += len(found)
        cuts.append(seen)
    return list(plan_from_cuts(cuts, layout.num_layers).cuts)


def _place_fqn(fqn: str, stage: int, count: int, layout, placed: list[list[int]]) -> None:
    edge = layout.edge_of(fqn)
    if edge == "input" and stage != 0:
        raise UsageError(
            f"{_PREFIX}: --fqns-per-stage puts {fqn} in stage {stage}; "
            "the input modules belong to the first stage"
        )
    if edge == "output" and stage != count - 1:
        raise UsageError(
            f"{_PREFIX}: --fqns-per-stage puts {fqn} in stage {stage}; "
            "the output modules belong to the last stage"
        )
    if edge is not None:
        return
    layer = layout.layer_of(fqn)
    if layer is None or fqn.count(".") != layout.layer_prefix.count(".") + 1:
        raise UsageError(
            f"{_PREFIX}: --fqns-per-stage names {fqn!r}, which is not a layer "
            f"({layout.layer_prefix}.N) nor an input or output module"
        )
    placed[stage].append(layer)
