"""Value roles, derived from taint bits.

Each node carries a :class:`~graphcheck.varlen.Taint` bit set saying what it is
computed from (the graph's inputs start from their row in :mod:`graphcheck.varlen`);
its *role* in a crossing set follows from the bits:

* ``symbolic``   - a size (SymInt): recomputable metadata, not dataflow;
* ``activation`` - depends on the token stream through the weights
  (parameters together with user data): it must be handed over;
* ``parameter``  - a pure function of parameters: a weight;
* ``replicated`` - a pure function of user inputs, buffers and constants
  (rotary tables, masks): any stage can recompute it.

>>> role_of(Taint.PARAM | Taint.TOKENS, tensor=True), role_of(Taint.POSITIONS, tensor=True)
(<Role.ACTIVATION: 'activation'>, <Role.REPLICATED: 'replicated'>)
>>> role_of(Taint.PARAM, tensor=True) == "parameter", role_of(Taint.LENGTH, tensor=False)
(True, <Role.SYMBOLIC: 'symbolic'>)
"""

from __future__ import annotations

from graphcheck.results.values import Role
from graphcheck.varlen import Taint

__all__ = ["Role", "role_of"]  # Role is graphcheck.results.values.Role, named here too


def role_of(bits: int, tensor: bool) -> Role:
    """The role of a value with taint ``bits``. A scalar read out of an activation
    (``x.sum().item()``) is an activation too: only sizes are free metadata."""
    if bits & Taint.PARAM and bits & Taint.DATA:
        return Role.ACTIVATION
    if not tensor:
        return Role.SYMBOLIC
    if bits & Taint.PARAM:
        return Role.PARAMETER
    return Role.REPLICATED
