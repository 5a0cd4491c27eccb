"""Which findings a run reports: ``--select`` / ``--ignore`` and inline ignore comments.

Selectors follow ruff: a code (``GC501``) or a prefix that selects its family
(``GC5`` is every GC5xx, ``GC`` every code). A finding is reported when the most
specific selector that matches it is a ``select`` (``--select`` absent: everything
is selected); ``ignore`` wins a tie. ``# graphcheck: ignore[GC501]`` (codes
comma-separated; bare ``# graphcheck: ignore`` is every code) on the model's source
line a finding points at ignores it there. ``select`` and ``ignore`` come from the
command line (or the API's keywords) or from a configuration table
(``selectors_from``: ``"[tool.graphcheck]"``, ``"graphcheck.toml"``); the report says which.

An ignored finding does not count towards the verdict but is never silent: the
report lists it (:class:`Ignored`), with what ignored it (its ``label``, and its
``justification``: the selector or the comment, as SARIF's suppressions say it). An
ignore comment in the model's code that matched no finding is an :class:`UnusedIgnore`
note. Errors that
stop a run (exit 2) are not findings: nothing here turns them into a pass.

>>> s = Suppression.of(select=["GC2"], ignore=["GC205"])
>>> [s.reason(code) for code in ("GC201", "GC205", "GC401")]
[None, <IgnoredBy.IGNORE: '--ignore'>, <IgnoredBy.SELECT: '--select'>]
>>> Suppression.of(select=["GC2"], ignore=["GC"]).reason("GC201") is None  # GC2 is more specific
True
>>> s.decide("GC205"), s.decide("GC401")
((<IgnoredBy.IGNORE: '--ignore'>, ('GC205',)), (<IgnoredBy.SELECT: '--select'>, ('GC2',)))
>>> comment_codes("x = f(x)  # graphcheck: ignore[GC501, GC205]")
('GC501', 'GC205')
>>> comment_codes("x = f(x)  # graphcheck: ignore"), comment_codes("x = f(x)")
((), None)
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from graphcheck.errors import UsageError
from graphcheck.rules import INFO

if TYPE_CHECKING:
    from graphcheck.diagnostics import Diagnostic

__all__ = [
    "IgnoredBy",
    "Ignored",
    "Outcome",
    "Suppression",
    "UnusedIgnore",
    "comment_codes",
    "model_files",
    "parse_selectors",
]

_COMMENT = re.compile(r"#\s*graphcheck:\s*ignore(?:\[([^\]]*)\])?(?![\w\[])")
_FRAME_FILE = re.compile(r'File "([^"]+)", line \d+')
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class IgnoredBy(StrEnum):
    """What kept a finding out of the verdict."""

    IGNORE = "--ignore"
    SELECT = "--select"  # not among the selected codes
    COMMENT = "# graphcheck: ignore"


def comment_codes(line: str) -> tuple[str, ...] | None:
    """The codes an ignore comment on ``line`` names (``()``: every code); ``None``
    when the line has no ignore comment."""
    match = _COMMENT.search(line)
    if match is None:
        return None
    inside = match.group(1) or ""
    return tuple(part.strip().upper() for part in inside.split(",") if part.strip())


def _codes() -> list[str]:
    """Every rule code, read without importing the rules (or torch)."""
    return [rule.code for rule in INFO]


def _known(selector: str) -> bool:
    return any(code.startswith(selector) for code in _codes())


def parse_selectors(values: str | Iterable[str] | None, flag: str) -> tuple[str, ...]:
    """``values`` (strings of comma-separated codes or prefixes) as a tuple of selectors;
    a :class:`UsageError` naming the nearest code for one that selects nothing.

    >>> parse_selectors(["gc501,GC2"], "--ignore")
    ('GC501', 'GC2')
    >>> try:
    ...     parse_selectors("GC59", "--ignore")
    ... except UsageError as err:
    ...     print(err)
    --ignore GC59: no graphcheck code starts with GC59; did you mean GC501? (graphcheck rules)
    """
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values)
    selectors = tuple(p.strip().upper() for item in items for p in str(item).split(","))
    for selector in selectors:
        if not re.fullmatch(r"GC\d{0,3}", selector) or not _known(selector):
            nearest = _nearest(selector)
            hint = f"; did you mean {nearest[0]}?" if nearest else ""
            shown = selector or "''"
            raise UsageError(
                f"{flag} {shown}: no graphcheck code starts with {shown}{hint} (graphcheck rules)"
            )
    return selectors


def _nearest(selector: str) -> list[str]:
    """The code nearest ``selector``: among those sharing its longest prefix, the fewest
    edits away, a swap of two neighbours one edit (``GC250`` -> ``GC205``).

    >>> _nearest("GC250"), _nearest("GC59"), _nearest("GC2O1")
    (['GC205'], ['GC501'], ['GC201'])
    """
    codes = _codes()
    shared = max(_common(selector, code) for code in codes)
    family = [code for code in codes if code[:shared] == selector[:shared]]
    return sorted(family, key=lambda code: (_edits(selector, code), code))[:1]


def _common(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _edits(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap neighbours) that turn ``a`` into ``b``."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@dataclass(frozen=True)
class Ignored:
    """A finding kept out of the verdict, and what kept it out (``comment``: the
    ``file:line`` of the ignore comment; ``selectors``: the ``ignore`` selector that
    decided, the ``select`` list it is not in, or the comment's codes, ``()`` for a bare
    one; ``selectors_from``: the configuration table they come from, ``None`` for the
    flags).

    >>> from graphcheck.diagnostics import Diagnostic
    >>> d = Diagnostic("GC205", "parameter-shared-across-stages", "shared")
    >>> flag = Ignored(d, IgnoredBy.IGNORE, selectors=("GC2",))
    >>> config = Ignored(d, IgnoredBy.SELECT, selectors=("GC4", "GC5"),
    ...                  selectors_from="[tool.graphcheck]")
    >>> comment = Ignored(d, IgnoredBy.COMMENT, "model.py:12", selectors=("GC205",))
    >>> [i.label for i in (flag, config, comment)]
    ['--ignore', '[tool.graphcheck] select', '# graphcheck: ignore']
    >>> [i.justification for i in (flag, config, comment)]  # doctest: +NORMALIZE_WHITESPACE
    ['--ignore GC2', 'not in [tool.graphcheck] select GC4,GC5',
     '# graphcheck: ignore[GC205] at model.py:12']
    """

    diagnostic: Diagnostic
    by: IgnoredBy
    comment: str | None = None
    selectors: tuple[str, ...] = ()
    selectors_from: str | None = None

    @property
    def label(self) -> str:
        """What ignored the finding: ``--ignore``, ``--select``, ``# graphcheck: ignore``,
        or the configuration's ``ignore`` / ``select`` (``graphcheck.toml ignore``)."""
        if self.by is IgnoredBy.COMMENT or self.selectors_from is None:
            return str(self.by)
        return f"{self.selectors_from} {self.by.removeprefix('--')}"

    @property
    def justification(self) -> str:
        """The ignore as written: ``--ignore GC2``, ``not in --select GC4``,
        ``# graphcheck: ignore[GC205] at model.py:12``."""
        codes = ",".join(self.selectors)
        if self.by is IgnoredBy.COMMENT:
            inside = f"[{', '.join(self.selectors)}]" if self.selectors else ""
            return f"{self.by}{inside} at {self.comment}"
        if self.by is IgnoredBy.SELECT:
            return f"not in {self.label} {codes}"
        return f"{self.label} {codes}"

    def as_dict(self) -> dict:
        return {**self.diagnostic.as_dict(), "ignored_by": self.label, "comment": self.comment}


@dataclass(frozen=True)
class UnusedIgnore:
    """An ignore comment in the model's code that matched no finding."""

    location: str  # file:line
    codes: tuple[str, ...]  # () for a bare comment

    @property
    def message(self) -> str:
        what = f"ignore[{', '.join(self.codes)}]" if self.codes else "ignore"
        unknown = [c for c in self.codes if c not in _codes()]
        note = f" ({', '.join(unknown)}: not a graphcheck code)" if unknown else ""
        return (
            f"# graphcheck: {what} at {self.location} matched no finding{note}; remove it "
            "or fix its codes"
        )

    def as_dict(self) -> dict:
        return {"location": self.location, "codes": list(self.codes), "message": self.message}


@dataclass
class Outcome:
    """The findings that count, those ignored, and the ignore comments that matched none."""

    kept: list[Diagnostic] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    unused: list[UnusedIgnore] = field(default_factory=list)


@dataclass(frozen=True)
class Suppression:
    """``select`` and ``ignore`` selectors, checked (:func:`parse_selectors`), and the
    configuration table they come from (``None``: the flags or the API's keywords)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    selectors_from: str | None = None

    @classmethod
    def of(
        cls,
        select: str | Sequence[str] | None = None,
        ignore: str | Sequence[str] | None = None,
        selectors_from: str | None = None,
    ) -> Suppression:
        if selectors_from is not None and (
            not isinstance(selectors_from, str) or not selectors_from.strip()
        ):
            raise UsageError(
                f"selectors_from={selectors_from!r}: name the configuration table the select "
                "and ignore lists come from ('[tool.graphcheck]'), or None for the flags"
            )
        select_codes = parse_selectors(select, "--select")
        return cls(select_codes, parse_selectors(ignore, "--ignore"), selectors_from)

    def reason(self, code: str) -> IgnoredBy | None:
        """Why ``code`` is not reported (``None``: it is): the most specific selector
        matching it decides, ``ignore`` winning a tie."""
        return self.decide(code)[0]

    def decide(self, code: str) -> tuple[IgnoredBy | None, tuple[str, ...]]:
        """:meth:`reason` and the selectors behind it: the ``ignore`` selector that
        decided, or the whole ``select`` list ``code`` is not in."""
        chosen = max((len(s) for s in self.select if code.startswith(s)), default=-1)
        if not self.select:
            chosen = 0
        if chosen < 0:
            return IgnoredBy.SELECT, self.select
        matching = [s for s in self.ignore if code.startswith(s)]
        deciding = max(matching, key=len, default=None)
        if deciding is not None and len(deciding) >= chosen:
            return IgnoredBy.IGNORE, (deciding,)
        return None, ()

    def apply(self, found: Sequence[Diagnostic], files: Iterable[str] = ()) -> Outcome:
        """Split ``found``; the ignore comments in ``files`` (the model's source files)
        that match no finding are the outcome's ``unused``."""
        outcome, used = Outcome(), set()
        for d in found:
            at = _location(d)
            codes = comment_codes(_line(*at)) if at else None
            covered = codes is not None and (not codes or d.code in codes)
            if covered:
                used.add(_key(at))
            by, selectors = self.decide(d.code)
            if by is None and covered:
                by, selectors = IgnoredBy.COMMENT, codes
            if by is None:
                outcome.kept.append(d)
            else:
                comment = f"{_shown(at[0])}:{at[1]}" if by is IgnoredBy.COMMENT else None
                ignored = Ignored(d, by, comment, selectors, self.selectors_from)
                outcome.ignored.append(ignored)
        outcome.unused = [
            UnusedIgnore(f"{_shown(path)}:{line}", codes)
            for (path, line), codes in _comments(files)
            if (path, line) not in used
        ]
        return outcome


def _location(d: Diagnostic) -> tuple[str, int] | None:
    """The file and line a finding points at (its ``source``), when the file exists."""
    where = d.source_location() or {}
    path, line = where.get("file"), where.get("line")
    if not path or line is None or not os.path.isfile(path):
        return None
    return path, int(line)


def _line(path: str, number: int) -> str:
    """Line ``number`` of ``path`` as the file is now (an edited model re-read)."""
    linecache.checkcache(path)
    return linecache.getline(path, number)


def _key(at: tuple[str, int]) -> tuple[str, int]:
    return os.path.realpath(at[0]), at[1]


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def model_files(graph) -> list[str]:
    """The source files the exported program's nodes come from, outside torch and
    graphcheck: where the model's ignore comments are."""
    import torch

    skip = (os.path.dirname(torch.__file__), _PACKAGE_DIR)
    files = set()
    for node in graph.nodes:
        files.update(_FRAME_FILE.findall(node.meta.get("stack_trace") or ""))
    return sorted(f for f in files if os.path.isfile(f) and not f.startswith(skip))


def _comments(files: Iterable[str]) -> list[tuple[tuple[str, int], tuple[str, ...]]]:
    """Every ignore comment in ``files``: ``((file, line), codes)``."""
    found = []
    for path in dict.fromkeys(os.path.realpath(f) for f in files):
        linecache.checkcache(path)
        for number, line in enumerate(linecache.getlines(path), start=1):
            codes = comment_codes(line)
            if codes is not None:
                found.append(((path, number), codes))
    return found
