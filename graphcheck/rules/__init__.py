"""The rules: one module per code. The code table is the public contract; codes
are never reused.

Each rule module carries its own metadata and documentation, and everything
else is generated from them (the table below, ``graphcheck rules``, the README's
rules table: ``scripts/rules_table.py``):

* ``CODE``, ``NAME`` - ``GC203``, ``boundary-not-materialized``;
* ``SEVERITY`` - ``error`` fails the verdict, ``warning`` does not; every
  diagnostic a rule emits gets its rule's severity
  (:func:`graphcheck.checker.check`);
* ``SUMMARY`` - one line: when the rule fires;
* ``OWNS`` (GC301, GC303) - the :class:`~graphcheck.stages.compare.MismatchKind`
  values of the stage-program differences the rule reports; every kind has one
  owner, and GC303 also reports a kind no rule owns (fail closed);
* the module docstring - the rule's user documentation (``graphcheck rules
  CODE``): a first line ``CODE name``, then the sections "What it checks",
  "Why it matters", "Example" and "Fix";
* ``check(ctx) -> list[Diagnostic]``.

GC301-GC303 are the stage-program equivalence rules: they run with a stage builder.
GC304 (a random op) judges the proven program itself, on every ``verify`` and ``map``.
"""

from __future__ import annotations

import pkgutil
import re
from importlib import import_module
from types import ModuleType

from graphcheck.errors import UsageError

__all__ = ["MISMATCH_CODES", "RULES", "by_code", "doc", "table"]

# The one list of rules, in code order: every ``gcNNN_name`` module of this package, so a
# new rule is one new module.
RULES: tuple[ModuleType, ...] = tuple(
    import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
    if re.fullmatch(r"gc\d{3}_\w+", info.name)
)

# The rules that report a stage program differing from the uncut one (GC301, GC303):
# the owners of the MismatchKind values.
MISMATCH_CODES = frozenset(rule.CODE for rule in RULES if hasattr(rule, "OWNS"))


def by_code() -> dict[str, ModuleType]:
    """``{"GC201": <module gc201_...>, ...}``

    >>> sorted(by_code())[:2], sorted(MISMATCH_CODES)
    (['GC101', 'GC102'], ['GC301', 'GC303'])
    """
    return {rule.CODE: rule for rule in RULES}


def table() -> str:
    """One line per rule: code, severity, name, summary.

    >>> print(table().splitlines()[9])
    GC302  warning  layer-identity-lost             a stage's layers lost their global indices
    """
    width = max(len(r.NAME) for r in RULES)
    return "".join(f"{r.CODE}  {r.SEVERITY:<7}  {r.NAME:<{width}}  {r.SUMMARY}\n" for r in RULES)


def doc(code: str) -> str:
    """The whole documentation of rule ``code`` (any case): a header with the code,
    name and severity, then its sections. Raises :class:`UsageError` for an unknown code.

    >>> print(doc("gc202").splitlines()[0])
    GC202 boundary-not-bf16 (error)
    """
    rule = by_code().get(code.strip().upper())
    if rule is None:
        known = f"{RULES[0].CODE}..{RULES[-1].CODE}"
        raise UsageError(f"unknown rule {code!r}: known codes are {known} (graphcheck rules)")
    _, _, sections = (rule.__doc__ or "").strip().partition("\n")
    return f"{rule.CODE} {rule.NAME} ({rule.SEVERITY})\n{sections}\n"


def _doc_table() -> str:
    """The code table of this package's docstring."""
    lines = "".join(f"    {line}\n" for line in table().splitlines())
    return f"\nThe rules (``graphcheck rules``)::\n\n{lines}"


if __doc__:  # generated from the rule modules, never kept by hand
    __doc__ += _doc_table()
