"""Kernels as graph nodes: the varlen attention implementation and kernel stand-ins.

* :mod:`graphcheck.kernels.custom_ops` - the ``graphcheck::`` custom ops (fake and
  eager implementations);
* :mod:`graphcheck.kernels.attention` - the ``"graphcheck_varlen"``
  transformers attention implementation;
* :mod:`graphcheck.kernels.standins` - stand-ins for fused kernels, the
  built-in registry, kernels files, and the patching context used during
  export;
* :mod:`graphcheck.kernels.fakes` - torch fake kernels whose shapes are corrected
  (varlen attention with the value's head dim), installed on import.
"""

from __future__ import annotations

from graphcheck.kernels import fakes
from graphcheck.kernels.attention import ATTENTION, register
from graphcheck.kernels.standins import (
    BUILTIN,
    StandIn,
    check_targets,
    declared_token_local,
    load_kernels,
    patched,
    token_local,
)

__all__ = [
    "ATTENTION",
    "BUILTIN",
    "StandIn",
    "check_targets",
    "declared_token_local",
    "load_kernels",
    "patched",
    "register",
    "token_local",
]

fakes.install()
