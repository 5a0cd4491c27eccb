"""What a model declares about its pipeline boundaries, and the shape of the wire.

The wire a cut hands over is one tensor, the token dim ``T`` then fixed trailing dims:
``[1, T, H]`` (a batch dim of 1) or the flat ``[T, H]`` of varlen attention code
(:class:`WireShape`). Which of the two the residual stream is, the model shows at its
edges (:class:`ResidualLayout`, read by :func:`graphcheck.analysis.residual.residual_layout`);
GC206, the stage builders, the gate and the lock all read it from there.

Two keys of ``get_pp_module_config()`` (or the command line) describe the hand-over
between stages when it is not the standard one:

* ``pipeline_boundary_state`` - the state every cut carries when it is not the
  residual: ``{"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64),
  "state": "completed_hyperconnection_residual"}`` for a hyper-connection residual of
  4 streams ``[1, T, 4, 64]``; ``{"rank": 2, "dtype": "bfloat16", "shape_suffix": (64,),
  "state": "residual"}`` for a flat ``[T, 64]``. The token dim comes right before the
  suffix, after a batch dim of 1 when the rank leaves room for one. The four keys are
  required; ``--boundary-state`` takes the same mapping as JSON.
* ``pipeline_layer_ranges`` - the decoder layers of each stage the model's own state
  allows, ``[(0, 4), (4, 8)]``: a plan must give its stages exactly those layers, and
  ``verify`` without ``--cuts``/``--stages`` proves that plan.

>>> state = boundary_state({"rank": 4, "dtype": "bfloat16", "shape_suffix": [4, 64],
...                         "state": "hc_residual"})
>>> state.matches("bfloat16", ["1", "T", "4", "64"]), state.matches("bfloat16", ["1", "T", "64"])
(True, False)
>>> state.expected
'bfloat16 [1, T, 4, 64]'
>>> flat = boundary_state({"rank": 2, "dtype": "bfloat16", "shape_suffix": [64], "state": "r"})
>>> flat.expected, flat.matches("bfloat16", ["T", "64"]), flat.wire
('bfloat16 [T, 64]', True, WireShape(suffix=(64,), batched=False))
>>> layer_ranges([(0, 4), [4, 8]], 8)
((0, 4), (4, 8))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from graphcheck.errors import LayoutError, UsageError
from graphcheck.varlen import WireShape

__all__ = [
    "BoundaryState",
    "ResidualLayout",
    "WireShape",
    "boundary_state",
    "declaration",
    "layer_ranges",
    "parse_boundary_state",
]

_KEYS = ("rank", "dtype", "shape_suffix", "state")
_WHERE = 'get_pp_module_config()["pipeline_boundary_state"]'


@dataclass(frozen=True)
class ResidualLayout:
    """How the model lays out its residual stream: ``[1, T, H]`` (``batched``) or the
    flat ``[T, H]``, ``H`` the ``width`` (``None``: the model shows no one width).

    >>> ResidualLayout(False, 64).expected, ResidualLayout().expected
    ('[T, 64]', '[1, T, H]')
    >>> ResidualLayout(False, 64).matches(["T", "64"]), ResidualLayout(True).matches(["T", "64"])
    (True, False)
    """

    batched: bool = True
    width: int | None = None

    @property
    def rank(self) -> int:
        return 3 if self.batched else 2

    @property
    def wire(self) -> WireShape | None:
        """The wire the residual is, when its width is known."""
        return None if self.width is None else WireShape((self.width,), self.batched)

    @property
    def expected(self) -> str:
        """The residual's shape as the reports print shapes (``H`` for an unknown width)."""
        width = "H" if self.width is None else str(self.width)
        return f"[{'1, ' if self.batched else ''}T, {width}]"

    def matches(self, shape: Sequence[str] | None) -> bool:
        """Whether a value of ``shape`` is laid out as the residual (of its width)."""
        wire = WireShape.of(shape)
        if wire is None or wire.batched != self.batched or len(wire.suffix) != 1:
            return False
        return self.width is None or wire.suffix == (self.width,)


@dataclass(frozen=True)
class BoundaryState:
    """A declared boundary state: ``rank`` dims, the last ones ``shape_suffix``."""

    rank: int
    dtype: str
    shape_suffix: tuple[int, ...]
    state: str

    def matches(self, dtype: str | None, shape: Sequence[str] | None) -> bool:
        """Whether a value of ``dtype`` and ``shape`` (as the analysis prints them) is
        this state: the rank, the suffix and the dtype, and the token dim before the suffix
        (``[T, ...]``, ``[1, T, ...]``; further dims between them are left open)."""
        if shape is None or len(shape) != self.rank or dtype != self.dtype:
            return False
        cut = len(shape) - len(self.shape_suffix)
        if list(shape[cut:]) != [str(d) for d in self.shape_suffix]:
            return False
        wire = self.wire
        return wire.matches(shape) if wire is not None else list(shape[:2]) == ["1", "T"]

    @property
    def expected(self) -> str:
        """The shape a wire of this state has, as the reports print shapes."""
        lead = self.rank - len(self.shape_suffix)
        dims = ["T"] if lead == 1 else ["1", "T", *["?"] * (lead - 2)]
        return f"{self.dtype} [{', '.join(dims + [str(d) for d in self.shape_suffix])}]"

    @property
    def wire(self) -> WireShape | None:
        """The wire of this state (``None`` when dims between ``[1, T]`` and the suffix
        are left open: the wire is read from the value crossing the cut)."""
        lead = self.rank - len(self.shape_suffix)
        return WireShape(self.shape_suffix, batched=lead == 2) if lead <= 2 else None

    def as_dict(self) -> dict:
        return {
            "rank": self.rank,
            "dtype": self.dtype,
            "shape_suffix": list(self.shape_suffix),
            "state": self.state,
        }


def declaration(dtype: str, shape: Sequence[str], state: str = "STATE_NAME") -> str | None:
    """The ``pipeline_boundary_state`` that declares a wire of ``dtype`` and ``shape``
    (``None`` when it is not a per-token state ``[1, T, d...]`` or ``[T, d...]`` of fixed
    trailing dims).

    >>> declaration("bfloat16", ["1", "T", "4", "64"])
    '{"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64), "state": "STATE_NAME"}'
    >>> declaration("bfloat16", ["T", "64"], "residual")
    '{"rank": 2, "dtype": "bfloat16", "shape_suffix": (64,), "state": "residual"}'
    """
    wire = WireShape.of(shape)
    if wire is None:
        return None
    dims = [str(d) for d in wire.suffix]
    suffix = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return (
        f'{{"rank": {wire.rank}, "dtype": "{dtype}", "shape_suffix": {suffix}, "state": "{state}"}}'
    )


def boundary_state(value: object, where: str = _WHERE) -> BoundaryState | None:
    """A declaration (a mapping with the four keys) validated; ``None`` stays ``None``.
    Raises :class:`LayoutError` naming what is wrong."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != set(_KEYS):
        got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise LayoutError(f"{where} must be a mapping with keys {list(_KEYS)}; got {got}")
    rank, suffix, state = value["rank"], value["shape_suffix"], value["state"]
    if not _positive(rank):
        raise LayoutError(f"{where}: rank must be a positive integer, not {rank!r}")
    if not isinstance(suffix, (tuple, list)) or not suffix or not all(map(_positive, suffix)):
        raise LayoutError(f"{where}: shape_suffix must be positive integers, not {suffix!r}")
    if len(suffix) > rank - 1:
        n = len(suffix)
        raise LayoutError(
            f"{where}: rank {rank} leaves no room for the token dim before shape_suffix "
            f"{tuple(suffix)}; rank is {n + 1} ([T, ...]) or {n + 2} ([1, T, ...]) for "
            "that suffix"
        )
    if not isinstance(state, str) or not state:
        raise LayoutError(f"{where}: state must name the state, not {state!r}")
    return BoundaryState(rank, _dtype(value["dtype"], where), tuple(suffix), state)


def parse_boundary_state(text: str) -> BoundaryState:
    """``--boundary-state`` JSON; raises :class:`UsageError` (exit 2) when malformed."""
    try:
        value = json.loads(text)
    except ValueError:
        raise UsageError(
            f"--boundary-state {text!r} is not JSON; write "
            '\'{"rank": 4, "dtype": "bfloat16", "shape_suffix": [4, 64], "state": "NAME"}\''
        ) from None
    try:
        return boundary_state(value, "--boundary-state")
    except LayoutError as err:
        raise UsageError(str(err)) from None


def layer_ranges(value: object, num_layers: int) -> tuple[tuple[int, int], ...] | None:
    """``pipeline_layer_ranges`` validated: ascending, contiguous ``(start, end)`` pairs
    (end exclusive) covering layers ``0..num_layers - 1``."""
    if value is None:
        return None
    where = 'get_pp_module_config()["pipeline_layer_ranges"]'
    try:
        ranges = tuple((int(a), int(b)) for a, b in value)
    except (TypeError, ValueError):
        raise LayoutError(f"{where} must be (start, end) pairs, not {value!r}") from None
    ends = [0, *(b for _, b in ranges)]
    starts = [a for a, _ in ranges]
    if (
        not ranges
        or starts != ends[:-1]
        or ends[-1] != num_layers
        or any(a >= b for a, b in ranges)
    ):
        raise LayoutError(
            f"{where} {list(ranges)} must be non-empty (start, end) ranges that follow each "
            f"other from 0 to {num_layers} (the number of layers)"
        )
    return ranges


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _dtype(value: object, where: str) -> str:
    found = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(found, torch.dtype):
        raise LayoutError(f"{where}: dtype must name a torch dtype, not {value!r}")
    return str(found).removeprefix("torch.")
