"""Stage plans: what a user proposes, what it costs and which legal plan balances best.

* :mod:`~graphcheck.planning.syntax` - the plan language (``--cuts``, ``--stages``,
  ``--layout``, ``--fqns-per-stage``), parsed into a plan or a GC101 usage error;
* :mod:`~graphcheck.planning.plan` - :class:`~graphcheck.planning.plan.StagePlan`:
  stages as layer blocks;
* :mod:`~graphcheck.planning.cost` - the cost model's values (per layer, per boundary);
* :mod:`~graphcheck.planning.balance` - the balanced plan over the legal boundaries.

Plans are plain data over layer indices: nothing here reads a program. The costs are
measured on one by :mod:`graphcheck.analysis.cost`; the cut explorer draws the plans
(:mod:`graphcheck.reporters.view`).
"""

__all__: list[str] = []
