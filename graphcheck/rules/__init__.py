"""The rules: one module per code. The code table is the public contract; codes
are never reused.

Each rule module carries its own metadata and documentation, and everything
else is generated from them (the table below, ``graphcheck rules``, the SARIF rule
descriptors and the documentation's rule pages: :mod:`graphcheck.console.reference`):

* ``CODE``, ``NAME`` - ``GC203``, ``boundary-not-materialized``;
* ``SEVERITY`` - ``error`` fails the verdict, ``warning`` does not; every
  diagnostic a rule emits gets its rule's severity
  (:func:`graphcheck.checker.check`);
* ``SUMMARY`` - one line: when the rule fires;
* ``OWNS`` (GC301, GC303) - the :class:`~graphcheck.stages.compare.MismatchKind`
  values of the stage-program differences the rule reports; every kind has one
  owner, and GC303 also reports a kind no rule owns (fail closed);
* ``EXAMPLE`` - the violating model and its passing twin at one cut (with the stage
  builders a GC3xx rule needs): the documentation runs them, and so do the tests;
* the module docstring - the rule's user documentation (``graphcheck rules
  CODE``): a first line ``CODE name``, then the sections "What it checks",
  "Why it matters", "Example" and "Fix";
* ``check(ctx) -> list[Diagnostic]``.

The metadata and the docstring are literals, read from each module's source
(:data:`INFO`) without running it: the table, a rule's doc and :data:`MISMATCH_CODES`
never import torch, so ``graphcheck rules`` answers at once. :data:`RULES`, the
modules themselves (their ``check``), is imported on first use.

GC301-GC303 are the stage-program equivalence rules: they run with a stage builder.
GC304 (a random op) judges the proven program itself, on every ``verify`` and ``map``.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from dataclasses import dataclass
from importlib import import_module, resources
from types import ModuleType

from graphcheck.errors import UsageError

__all__ = ["INFO", "MISMATCH_CODES", "RULES", "RuleInfo", "by_code", "doc", "info", "table"]

# The module-level literals every rule module assigns.
FIELDS = ("CODE", "NAME", "SEVERITY", "SUMMARY")


@dataclass(frozen=True)
class RuleInfo:
    """A rule's metadata and documentation, as its module's source states them."""

    code: str
    name: str
    severity: str
    summary: str
    doc: str  # the module docstring
    module: str  # the module's import name
    owns: bool  # assigns OWNS: reports stage-program mismatches
    # EXAMPLE: the violating model, its passing twin, the cut and the stage builders
    example: dict | None = None

    def load(self) -> ModuleType:
        """The rule module itself (imports its implementation: torch, the analysis)."""
        return import_module(self.module)


def _read(name: str) -> RuleInfo:
    """The metadata of rule module ``name``: its top-level literal assignments and its
    docstring, parsed, not executed."""
    tree = ast.parse(resources.files(__name__).joinpath(f"{name}.py").read_text("utf-8"))
    assigned = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }
    try:
        values = [ast.literal_eval(assigned[field]) for field in FIELDS]
    except (KeyError, ValueError) as err:
        raise ImportError(
            f"rule module {name} must assign {', '.join(FIELDS)} as literals ({err})"
        ) from None
    docstring = ast.get_docstring(tree, clean=False) or ""
    example = ast.literal_eval(assigned["EXAMPLE"]) if "EXAMPLE" in assigned else None
    return RuleInfo(*values, docstring, f"{__name__}.{name}", "OWNS" in assigned, example)


# The one list of rules, in code order: every ``gcNNN_name`` module of this package, so a
# new rule is one new module.
INFO: tuple[RuleInfo, ...] = tuple(
    _read(module.name)
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda module: module.name)
    if re.fullmatch(r"gc\d{3}_\w+", module.name)
)

# The rules that report a stage program differing from the uncut one (GC301, GC303):
# the owners of the MismatchKind values.
MISMATCH_CODES = frozenset(rule.code for rule in INFO if rule.owns)


def __getattr__(name: str):
    """``RULES``: the rule modules, in code order, imported on first use (PEP 562)."""
    if name == "RULES":
        return _modules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _modules() -> tuple[ModuleType, ...]:
    """The rule modules, imported once and kept as ``RULES``."""
    if "RULES" not in globals():
        globals()["RULES"] = tuple(rule.load() for rule in INFO)
    return globals()["RULES"]


def by_code() -> dict[str, ModuleType]:
    """``{"GC201": <module gc201_...>, ...}`` (imports every rule module)

    >>> sorted(by_code())[:2], sorted(MISMATCH_CODES)
    (['GC101', 'GC102'], ['GC301', 'GC303'])
    """
    return {rule.CODE: rule for rule in _modules()}


def info(code: str) -> RuleInfo:
    """The metadata of rule ``code`` (any case, spaces around ignored), without importing
    it. Raises :class:`UsageError` for an unknown code.

    >>> info(" gc203").name
    'boundary-not-materialized'
    """
    found = {rule.code: rule for rule in INFO}.get(code.strip().upper())
    if found is None:
        known = f"{INFO[0].code}..{INFO[-1].code}"
        raise UsageError(f"unknown rule {code!r}: known codes are {known} (graphcheck rules)")
    return found


def table() -> str:
    """One line per rule: code, severity, name, summary.

    >>> print(table().splitlines()[9])
    GC302  warning  layer-identity-lost             a stage's layers lost their global indices
    """
    width = max(len(r.name) for r in INFO)
    return "".join(f"{r.code}  {r.severity:<7}  {r.name:<{width}}  {r.summary}\n" for r in INFO)


def doc(code: str) -> str:
    """The whole documentation of rule ``code`` (any case): a header with the code,
    name and severity, then its sections. Raises :class:`UsageError` for an unknown code.

    >>> print(doc("gc202").splitlines()[0])
    GC202 boundary-not-bf16 (error)
    """
    rule = info(code)
    _, _, sections = rule.doc.strip().partition("\n")
    return f"{rule.code} {rule.name} ({rule.severity})\n{sections}\n"


def _doc_table() -> str:
    """The code table of this package's docstring."""
    lines = "".join(f"    {line}\n" for line in table().splitlines())
    return f"\nThe rules (``graphcheck rules``)::\n\n{lines}"


if __doc__:  # generated from the rule modules, never kept by hand
    __doc__ += _doc_table()
