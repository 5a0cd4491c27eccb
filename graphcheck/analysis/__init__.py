"""The static proof: export, analyse, partition and read what crosses each cut.

The data flows top to bottom:

* :mod:`~graphcheck.analysis.export` - ``torch.export`` with the symbolic packed-varlen
  inputs of :mod:`graphcheck.varlen`;
* :mod:`~graphcheck.analysis.program` - the passes of :mod:`~graphcheck.analysis.passes`
  run over the graph: regions (which layer owns a node), mutations, taint (what a value
  depends on), token locality (:mod:`~graphcheck.analysis.locality`: the abstract
  domain, the op registry and one module per op family),
  placement;
* :mod:`~graphcheck.analysis.dataflow` - the crossing set of each cut;
* :mod:`~graphcheck.analysis.residual` - which crossing value is the residual wire;
* :mod:`~graphcheck.analysis.fx` - FX node helpers (op names, views, casts, source lines).

The rules (:mod:`graphcheck.rules`) read the result; the stage plans it is read under
are :mod:`graphcheck.planning`'s.
"""

__all__: list[str] = []
