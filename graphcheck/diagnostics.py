"""Findings about the user's model.

A :class:`Diagnostic` is a value: rules return lists of them and the report
collects them. It carries the rule code and name, a message that says how to
fix the problem, where it applies (cut, stage) and where it comes from (node,
module path, the model's source line).

>>> d = Diagnostic("GC202", "boundary-not-bf16", "cut 4 carries float32", cut=4)
>>> d.code, d.severity
('GC202', 'error')

:func:`group` folds findings that repeat (one per layer, one per cut) into one
:class:`Group` per code, source line and message shape, for the reports a person
reads; :func:`spans` writes the layers or cuts a group covers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.fx

__all__ = [
    "Diagnostic",
    "Group",
    "group",
    "module_path",
    "normalize_fqn",
    "source_line",
    "spans",
]


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    message: str
    cut: int | None = None
    stage: int | None = None
    node: str | None = None
    module: str | None = None
    source: str | None = None
    severity: str = "error"
    layer: int | None = None  # the decoder layer the node runs in (set by the checker)

    def as_dict(self) -> dict:
        """The JSON form: the fields, ``source`` as :meth:`source_location`."""
        return asdict(self) | {"source": self.source_location()}

    def source_location(self) -> dict | None:
        """:attr:`source` (``file.py:57: code``) as ``{"file", "line", "text"}``.

        >>> Diagnostic("GC1", "n", "m", source="fixtures/v.py:57: x = f(y)").source_location()
        {'file': 'fixtures/v.py', 'line': 57, 'text': 'x = f(y)'}
        """
        match = _SOURCE.match(self.source or "")
        if match is None:
            return (
                None if self.source is None else {"file": None, "line": None, "text": self.source}
            )
        return {"file": match["file"], "line": int(match["line"]), "text": match["text"]}

    @classmethod
    def at(
        cls, code: str, name: str, message: str, node: torch.fx.Node | None = None, **where
    ) -> Diagnostic:
        """A diagnostic located at ``node``: its name, module path and source line."""
        if node is not None:
            where.setdefault("node", node.name)
            where.setdefault("module", module_path(node))
            where.setdefault("source", source_line(node))
        return cls(code, name, message, **where)


_SOURCE = re.compile(r"(?P<file>.+?):(?P<line>\d+): ?(?P<text>.*)", re.DOTALL)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)')


@functools.cache
def _torch_dir() -> str | None:
    """torch's folder, found without importing torch (this module is imported by commands
    that never build a model); ``None`` when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def source_line(node: torch.fx.Node) -> str | None:
    """``file.py:57: code`` for the innermost model frame of ``node.meta['stack_trace']``."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    torch_dir = _torch_dir()
    if torch_dir is not None:
        inside = torch_dir + os.sep  # a sibling such as torchtitan/ is model code
        frames = [f for f in frames if not f[0].startswith(inside)] or frames
    if not frames:
        return None
    path, line, code = frames[-1]
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{line}: {code.strip()}"


def module_path(node: torch.fx.Node) -> str | None:
    """The innermost ``nn.Module`` path that produced ``node`` (``model.layers.3.mlp``)."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, _cls in reversed(list(stack.values())):
        path = normalize_fqn(path)
        if path is not None:
            return path or "<root>"
    return None


def normalize_fqn(path: str) -> str | None:
    """Turn strict- and non-strict-mode module paths into dotted FQNs.

    >>> normalize_fqn("L['self'].model.layers[3]")
    'model.layers.3'
    >>> normalize_fqn("model.layers.3.mlp")
    'model.layers.3.mlp'
    """
    if path.startswith("_empty_nn_module_stack"):
        return None
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(?:'([^']+)'|(\d+))\]", lambda m: "." + (m.group(1) or m.group(2)), path)
    return path.strip(".")


def spans(numbers: Iterable[int]) -> str:
    """Sorted, distinct ``numbers`` with runs compressed.

    >>> spans([7, 0, 1, 2, 3, 4, 5])
    '0-5, 7'
    >>> spans([2, 4, 6]), spans([3]), spans([])
    ('2, 4, 6', '3', '')
    """
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class Group:
    """Findings of one code at one source line with one message up to its numbers (the
    same finding at every layer or every cut); ``members[0]`` speaks for them."""

    members: tuple[Diagnostic, ...]

    @property
    def first(self) -> Diagnostic:
        return self.members[0]

    def covers(self, what: str) -> list[int]:
        """The distinct ``cut``, ``stage`` or ``layer`` values of the members."""
        return sorted({getattr(d, what) for d in self.members} - {None})

    def where(self) -> str:
        """``cuts 2, 4, 6 · stages 1-3`` or ``layers 0-5``: what the group covers."""
        parts = []
        for what in ("cut", "stage", "layer"):
            values = self.covers(what)
            if what == "layer" and self.covers("cut"):
                continue  # a finding at a cut is about the cut, wherever its node runs
            if values:
                parts.append(f"{what}{'s' if len(values) > 1 else ''} {spans(values)}")
        return " · ".join(parts)

    def summary(self) -> str:
        """What follows the code in a report's head line of the group: the rule's name,
        what the group covers (a lone finding: its cut and stage) and how many it holds.

        >>> Group((Diagnostic("GC205", "shared", "tied", cut=2, stage=1),)).summary()
        'shared · cut 2 · stage 1'
        """
        d, count = self.first, len(self.members)
        label = " (warning)" if d.severity == "warning" else ""
        lone = [f"cut {d.cut}" if d.cut is not None else None]
        lone += [f"stage {d.stage}" if d.stage is not None else None]
        where = self.where() if count > 1 else " · ".join(w for w in lone if w)
        more = f" · {count} findings" if count > 1 else ""
        return f"{d.name}{label}" + (f" · {where}" if where else "") + more


def _shape(d: Diagnostic) -> tuple:
    """The grouping key: code, severity, the source line (else the module, its layer
    index left out) and the message with its numbers left out (``cut 2``/``cut 4``,
    ``add_3``/``add_7``)."""
    where = str(d.source) if d.source else re.sub(r"\d+", "#", d.module or d.node or "")
    return d.code, d.severity, where, re.sub(r"\d+", "#", d.message)


def group(diagnostics: Sequence[Diagnostic]) -> list[Group]:
    """``diagnostics`` grouped by :func:`_shape`, in the order of each group's first.

    >>> at = "model.py:42: return attend(h)"
    >>> found = [Diagnostic("GC401", "n", f"leak {i}", source=at, layer=i) for i in range(6)]
    >>> found.append(Diagnostic("GC205", "n", "tied at cut 2", cut=2, stage=1))
    >>> [(g.first.code, len(g.members), g.where()) for g in group(found)]
    [('GC401', 6, 'layers 0-5'), ('GC205', 1, 'cut 2 · stage 1')]
    """
    groups: dict[tuple, list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(_shape(d), []).append(d)
    return [Group(tuple(members)) for members in groups.values()]
