"""Analysis passes over an exported graph, one per module, run in order by
:func:`graphcheck.analysis.program.analyse`: assign regions, propagate taint, propagate
token locality, link mutations, place nodes."""

__all__: list[str] = []
