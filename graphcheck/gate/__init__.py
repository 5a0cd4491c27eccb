"""The byte gate: the split program run on CPU with real random weights, its bytes
compared with the uncut model's and each document's logits with its packed ones.

Modules, one job each: :mod:`~graphcheck.gate.run` (``gate()`` and :class:`Gate`,
the orchestration), :mod:`~graphcheck.gate.weights` (the model on real weights in
this process), :mod:`~graphcheck.gate.tensors` (its tensors saved and restored by name,
its own init method, the check that every parameter was initialised),
:mod:`~graphcheck.gate.chain` (the stage processes, chained by bf16 bytes),
:mod:`~graphcheck.gate.runner` (what each of those processes runs),
:mod:`~graphcheck.gate.graph_run` (the partitioned exported graph, in process),
:mod:`~graphcheck.gate.output` (what is compared: the returned tensor, a head, a module),
:mod:`~graphcheck.gate.checks` (the comparisons), :mod:`~graphcheck.gate.batch`
(the packed batch), :mod:`~graphcheck.gate.messages` (one-line failures) and
:mod:`~graphcheck.results.gate` (the report and its statuses).

>>> from graphcheck.gate import Gate, GateReport, gate
"""

from __future__ import annotations

from graphcheck.gate.run import Gate, gate
from graphcheck.results.gate import GateReport

__all__ = ["Gate", "GateReport", "gate"]
