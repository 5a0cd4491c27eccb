"""Taint bits and value roles.

Each node carries a bit set saying what it is computed from; its *role* in a
crossing set follows from the bits:

* ``symbolic``   - a size (SymInt): recomputable metadata, not dataflow;
* ``activation`` - depends on the token stream through the weights
  (parameters together with user data): it must be handed over;
* ``parameter``  - a pure function of parameters: a weight;
* ``replicated`` - a pure function of user inputs, buffers and constants
  (rotary tables, masks): any stage can recompute it.

>>> role_of(PARAM | TOKENS, tensor=True), role_of(POSITIONS | DOCS, tensor=True)
('activation', 'replicated')
>>> role_of(PARAM, tensor=True), role_of(LENGTH, tensor=False)
('parameter', 'symbolic')
"""

from __future__ import annotations

__all__ = [
    "ARANGE",
    "DATA",
    "DOCS",
    "INPUT_TAINT",
    "LENGTH",
    "MAXLEN",
    "PARAM",
    "POSITIONS",
    "TOKENS",
    "role_of",
]

TOKENS = 1 << 0  # input_ids
DOCS = 1 << 1  # document boundaries: cu_seq_lens_*, position_ids
POSITIONS = 1 << 2  # position_ids
MAXLEN = 1 << 3  # max_length_*
PARAM = 1 << 4  # parameters
LENGTH = 1 << 5  # sizes derived from T or N (arange over T, ...)
ARANGE = 1 << 6  # index ramps (arange): positions or masks made from T
DATA = TOKENS | DOCS | POSITIONS | MAXLEN

INPUT_TAINT = {
    "input_ids": TOKENS,
    "hidden": TOKENS | PARAM,  # a pipeline stage's incoming residual: an activation
    "position_ids": POSITIONS | DOCS,
    "cu_seq_lens_q": DOCS,
    "cu_seq_lens_k": DOCS,
    "max_length_q": MAXLEN,
    "max_length_k": MAXLEN,
}

ROLES = ("activation", "replicated", "parameter", "symbolic")


def role_of(bits: int, tensor: bool) -> str:
    """The role of a value with taint ``bits``. A scalar read out of an activation
    (``x.sum().item()``) is an activation too: only sizes are free metadata."""
    if bits & PARAM and bits & DATA:
        return "activation"
    if not tensor:
        return "symbolic"
    if bits & PARAM:
        return "parameter"
    return "replicated"
