"""What a model declares about its pipeline boundaries.

Two keys of ``get_pp_module_config()`` (or the command line) describe the hand-over
between stages when it is not the standard one:

* ``pipeline_boundary_state`` - the state every cut carries when it is not the
  ``[1, T, H]`` residual: ``{"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64),
  "state": "completed_hyperconnection_residual"}`` for a hyper-connection residual of
  4 streams ``[1, T, 4, 64]``. The four keys are required; ``--boundary-state`` takes
  the same mapping as JSON.
* ``pipeline_layer_ranges`` - the decoder layers of each stage the model's own state
  allows, ``[(0, 4), (4, 8)]``: a plan must give its stages exactly those layers, and
  ``verify`` without ``--cuts``/``--stages`` proves that plan.

>>> state = boundary_state({"rank": 4, "dtype": "bfloat16", "shape_suffix": [4, 64],
...                         "state": "hc_residual"})
>>> state.matches("bfloat16", ["1", "T", "4", "64"]), state.matches("bfloat16", ["1", "T", "64"])
(True, False)
>>> state.expected
'bfloat16 [1, T, 4, 64]'
>>> layer_ranges([(0, 4), [4, 8]], 8)
((0, 4), (4, 8))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from graphcheck.errors import LayoutError, UsageError

__all__ = ["BoundaryState", "boundary_state", "declaration", "layer_ranges", "parse_boundary_state"]

_KEYS = ("rank", "dtype", "shape_suffix", "state")
_WHERE = 'get_pp_module_config()["pipeline_boundary_state"]'


@dataclass(frozen=True)
class BoundaryState:
    """A declared boundary state: ``rank`` dims, the last ones ``shape_suffix``."""

    rank: int
    dtype: str
    shape_suffix: tuple[int, ...]
    state: str

    def matches(self, dtype: str | None, shape: Sequence[str] | None) -> bool:
        """Whether a value of ``dtype`` and ``shape`` (as the analysis prints them) is
        this state: the rank, the suffix and the dtype, and a token dim before the suffix."""
        if shape is None or len(shape) != self.rank or dtype != self.dtype:
            return False
        cut = len(shape) - len(self.shape_suffix)
        return list(shape[cut:]) == [str(d) for d in self.shape_suffix] and "T" in shape[:cut]

    @property
    def expected(self) -> str:
        """The shape a wire of this state has, as the reports print shapes."""
        lead = ["1", "T", *["?"] * (self.rank - len(self.shape_suffix) - 2)]
        dims = lead[: self.rank - len(self.shape_suffix)] + [str(d) for d in self.shape_suffix]
        return f"{self.dtype} [{', '.join(dims)}]"

    def as_dict(self) -> dict:
        return {
            "rank": self.rank,
            "dtype": self.dtype,
            "shape_suffix": list(self.shape_suffix),
            "state": self.state,
        }


def declaration(dtype: str, shape: Sequence[str], state: str = "STATE_NAME") -> str | None:
    """The ``pipeline_boundary_state`` that declares a wire of ``dtype`` and ``shape``
    (``None`` when it is not a per-token state ``[1, T, d...]`` of fixed trailing dims).

    >>> declaration("bfloat16", ["1", "T", "4", "64"])
    '{"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64), "state": "STATE_NAME"}'
    """
    if len(shape) < 3 or list(shape[:2]) != ["1", "T"] or not all(d.isdigit() for d in shape[2:]):
        return None
    suffix = "(" + ", ".join(shape[2:]) + ("," if len(shape) == 3 else "") + ")"
    return (
        f'{{"rank": {len(shape)}, "dtype": "{dtype}", "shape_suffix": {suffix}, '
        f'"state": "{state}"}}'
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
    if len(suffix) > rank - 2:
        raise LayoutError(
            f"{where}: rank {rank} leaves no room for the [1, T] token dims before "
            f"shape_suffix {tuple(suffix)}; rank is {len(suffix) + 2} for that suffix"
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
