"""The byte gate: the split program run on CPU with real random weights, its bytes
compared with the uncut model's and each document's logits with its packed ones.

>>> from graphcheck.gate import Gate, GateReport, gate
"""

from __future__ import annotations

from graphcheck.gate.report import GateReport
from graphcheck.gate.run import Gate, gate

__all__ = ["Gate", "GateReport", "gate"]
