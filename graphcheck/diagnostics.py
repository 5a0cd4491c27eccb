"""Findings about the user's model.

A :class:`Diagnostic` is a value: rules return lists of them and the report
collects them. It carries the rule code and name, a message that says how to
fix the problem, where it applies (cut, stage) and where it comes from (node,
module path, the model's source line).

>>> d = Diagnostic("GC202", "boundary-not-bf16", "cut 4 carries float32", cut=4)
>>> d.code, d.severity
('GC202', <Severity.ERROR: 'error'>)

:func:`group` folds findings that repeat (one per layer, one per cut) into one
:class:`Group` per code, source line and message shape, for the reports a person
reads; :func:`spans` writes the layers or cuts a group covers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.fx

__all__ = [
    "Diagnostic",
    "Group",
    "Severity",
    "Verdict",
    "generated",
    "group",
    "library",
    "model_frame",
    "module_path",
    "normalize_fqn",
    "counted",
    "source_line",
    "spans",
]


class Severity(StrEnum):
    """How much a finding weighs: an error fails the verdict, a warning does not."""

    ERROR = "error"
    WARNING = "warning"


class Verdict(StrEnum):
    """A cut's, a plan's or a run's verdict."""

    PASS = "pass"
    FAIL = "fail"


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
    severity: str = Severity.ERROR
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
def _library_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The folders whose frames are not the model's code: torch's and graphcheck's, then
    the standard library's (``functools``, ``contextlib`` wrappers); found without
    importing torch (this module is imported by commands that never build a model)."""
    spec = importlib.util.find_spec("torch")
    own = [os.path.dirname(spec.origin)] if spec is not None and spec.origin else []
    own.append(os.path.dirname(os.path.abspath(__file__)))
    stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    folder = lambda d: os.path.join(os.path.realpath(d), "")  # noqa: E731
    return tuple(map(folder, own)), tuple(map(folder, stdlib))


def generated(path: str) -> bool:
    """Whether a frame's file is code made at run time, not a file: the ``forward`` FX
    generates (``<eval_with_key>.5``), ``exec``'d text (``<string>``), frozen modules.

    >>> generated("<eval_with_key>.12"), generated("<string>"), generated("model.py")
    (True, True, False)
    """
    return path.startswith("<")


def library(path: str) -> bool:
    """Whether a frame's file is inside torch, graphcheck or the standard library (an
    installed package's site-packages below the standard library's folder is not).

    >>> library(os.path.join(os.path.dirname(os.path.abspath(__file__)), "api.py"))
    True
    """
    own, stdlib = _library_dirs()
    real = os.path.realpath(path)
    if real.startswith(own):
        return True
    parts = real.split(os.sep)
    return real.startswith(stdlib) and not {"site-packages", "dist-packages"} & set(parts)


def model_frame(stack_trace: str | None) -> tuple[str, str, str] | None:
    """The innermost frame of the model's code in ``stack_trace``: ``(file, line, code)``.

    Frames in generated code (the ``forward`` of a traced higher-order op's body, which
    FlexAttention's and compiled regions' frames are) and inside torch, graphcheck or
    the standard library are skipped: they say where torch ran the model's call, not
    which line of the model made it. With no model frame, the innermost frame in a real
    file; ``None`` when every frame is generated.

    >>> trace = (
    ...     'File "m.py", line 7, in forward\\n    out = attend(q, k, v)\\n'
    ...     'File "<eval_with_key>.5", line 13, in forward\\n    flex_attention = torch.ops.x()'
    ... )
    >>> model_frame(trace)
    ('m.py', '7', 'out = attend(q, k, v)')
    """
    frames = [f for f in _FRAME.findall(stack_trace or "") if not generated(f[0])]
    own = [f for f in frames if not library(f[0])]
    found = (own or frames)[-1] if own or frames else None
    return None if found is None else (found[0], found[1], found[2].strip())


def source_line(node: torch.fx.Node) -> str | None:
    """``file.py:57: code`` for the innermost model frame of ``node.meta['stack_trace']``
    (:func:`model_frame`)."""
    found = model_frame(node.meta.get("stack_trace"))
    if found is None:
        return None
    path, line, code = found
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{line}: {code}"


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


def counted(n: int, noun: str) -> str:
    """``n`` of ``noun``, the noun plural unless one.

    >>> counted(1, "check"), counted(2, "change")
    ('1 check', '2 changes')
    """
    return f"{n} {noun}{'s' if n != 1 else ''}"


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
        label = " (warning)" if d.severity == Severity.WARNING else ""
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
