"""Results as plain data: what a run found, ready to render, cache and compare.

* :mod:`~graphcheck.results.values` - what crosses a cut
  (:class:`~graphcheck.results.values.CrossingValue`) and the vocabulary of roles;
* :mod:`~graphcheck.results.gate` - the executed comparisons of ``graphcheck gate``.

The reports of ``verify``, ``map`` and ``plan`` are :mod:`graphcheck.report`'s. Nothing
here holds a program or a graph: :mod:`graphcheck.reporters` renders these without torch.
"""

__all__: list[str] = []
