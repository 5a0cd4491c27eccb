"""Trusted custom ops validated by execution of their own implementation.

graphcheck trusts a custom op it cannot read to keep documents apart when it is given
the batch's document structure (:mod:`graphcheck.analysis.locality.custom`), and to keep
tokens apart when a kernels file declares it token-local (``TOKEN_LOCAL``). A trust is
a claim about the op's code, so it is checked where it is made: the op's own eager
implementation runs on the CPU, alone, on real values:

* the arguments computed from the batch layout only (``cu_seq_lens``, positions,
  ``max_seqlen`` read from them) are computed by the program's own ops from a concrete
  packing; the token data (hidden states) is random, shaped as the program shapes it;
* **perturb**: for each document, every other document's rows are redrawn; the
  document's output rows must stay bitwise equal (a token-local op: every token is a
  document of its own);
* **shift**: a filler document of 64 tokens goes in front; every document's output
  rows must equal the unshifted ones bitwise.

An op whose eager implementation raises (shapes only, a GPU-only kernel) stays
*trusted, not verified*, and the report says so. Verdicts are cached on disk (in
graphcheck's cache folder, ``v<schema>/ops/``; ``--no-cache`` turns it off) by the
op, the bytes of the file its implementation is written in, the claim and the
argument shapes (T as a symbol): a warm run does not execute again; an edited kernel
is executed again.
"""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

import sympy
import torch
import torch.fx

from graphcheck.errors import one_line
from graphcheck.varlen import BY_NAME, Structure

__all__ = [
    "Claim",
    "OpCheck",
    "OpStatus",
    "Subject",
    "layout_only",
    "op_cache",
    "use_cache",
    "validate",
]

DOCS = (5, 3, 7)  # the packing the op is validated on
FILLER = 64  # the shift: a document of this many tokens in front
SEED = 0


class Claim(StrEnum):
    TOKEN_LOCAL = "token-local"
    DOCUMENT_LOCAL = "document-local"


class OpStatus(StrEnum):
    ISOLATED = "validated"  # the perturb and shift tests hold bitwise
    LEAKS = "leaks"
    UNVERIFIED = "trusted, not verified"


@dataclass(frozen=True)
class OpCheck:
    """One op's validation: ``detail`` is the packing that shows a leak, or why it was
    not verified; ``cached``: read from the cache, not executed this run."""

    op: str
    claim: str
    status: str
    detail: str = ""
    cached: bool = False

    @property
    def isolated(self) -> bool:
        return self.status == OpStatus.ISOLATED

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """``mylib::rms_norm token-local: validated by execution (perturb, shift)``."""
        said = {
            OpStatus.ISOLATED: "validated by execution (perturb, shift"
            + (", cached)" if self.cached else ")"),
            OpStatus.LEAKS: f"leaks when executed: {self.detail}",
            OpStatus.UNVERIFIED: f"trusted, not verified ({self.detail})",
        }[OpStatus(self.status)]
        return f"{self.op} {self.claim}: {said}"


@dataclass(frozen=True)
class Subject:
    """What to validate: the op's node, the placeholders the layout inputs are
    (placeholder name -> varlen input name), the sympy names of T, and each of the
    node's tensor arguments not computed from the layout alone with the dim it runs
    over tokens (``None``: none, a weight); ``out_dims``: each result's token dim
    (``None``: a result with no token dim, compared whole)."""

    node: torch.fx.Node
    claim: Claim
    inputs: dict[str, str]
    tokens: frozenset[str]
    token_dims: dict[torch.fx.Node, int]
    out_dims: tuple[int | None, ...]
    cache: Path | None = None


def validate(subject: Subject) -> OpCheck:
    """Run the op's eager implementation and check the claim (cached)."""
    name = subject.node.target._schema.name
    key = _key(subject)
    cached = _read(subject.cache, key)
    if cached is not None:
        return OpCheck(**{**cached, "cached": True})
    try:
        found = _run_tests(subject)
    except _Unverified as err:
        found = OpCheck(name, str(subject.claim), OpStatus.UNVERIFIED, str(err))
    _write(subject.cache, key, found)
    return found


class _Unverified(Exception):
    """The op cannot be run here (why, in one line)."""


def _run_tests(subject: Subject) -> OpCheck:
    name, claim = subject.node.target._schema.name, str(subject.claim)
    docs = (1,) * sum(DOCS) if subject.claim is Claim.TOKEN_LOCAL else DOCS
    base_data = _data(subject, docs, seed=SEED)
    base = _call(subject, docs, base_data)
    spans = _spans(docs)
    for index, (start, end) in enumerate(spans):
        if subject.claim is Claim.TOKEN_LOCAL and index not in (0, len(docs) // 2, len(docs) - 1):
            continue
        redrawn = _data(subject, docs, seed=SEED + 1 + index, keep=(start, end), like=base_data)
        other = _call(subject, docs, redrawn)
        if not _equal(base, other, subject.out_dims, start, end):
            return OpCheck(name, claim, OpStatus.LEAKS, _perturbed(docs, index, start, end))
    return _shift_test(subject, docs, base, base_data)


def _shift_test(subject: Subject, docs, base, base_data: dict) -> OpCheck:
    name, claim, spans = subject.node.target._schema.name, str(subject.claim), _spans(docs)
    shifted_docs = (FILLER, *docs)
    moved = _data(subject, shifted_docs, seed=SEED + 99, front=base_data)
    shifted = _call(subject, shifted_docs, moved)
    for index, (start, end) in enumerate(spans):
        if not _equal(base, shifted, subject.out_dims, start, end, FILLER):
            return OpCheck(name, claim, OpStatus.LEAKS, _moved(docs, index, start, end))
    return OpCheck(name, claim, OpStatus.ISOLATED)


def _perturbed(docs, index: int, start: int, end: int) -> str:
    if set(docs) == {1}:
        return (f"over {len(docs)} tokens, token {index}'s output changed when the other "
                "tokens were redrawn")  # fmt: skip
    return (f"with documents of {list(docs)} tokens, the output of document {index} "
            f"(tokens {start}..{end - 1}) changed when the other documents' tokens were "
            "redrawn")  # fmt: skip


def _moved(docs, index: int, start: int, end: int) -> str:
    if set(docs) == {1}:
        return (f"over {len(docs)} tokens, token {index}'s output changed when "
                f"{FILLER} tokens were put in front")  # fmt: skip
    return (f"with documents of {list(docs)} tokens, the output of document {index} "
            f"(tokens {start}..{end - 1}) changed when a document of {FILLER} tokens was "
            "put in front")  # fmt: skip


def _spans(docs) -> list[tuple[int, int]]:
    out, start = [], 0
    for n in docs:
        out.append((start, start + n))
        start += n
    return out


# --- arguments ---------------------------------------------------------------------


def _data(subject: Subject, docs, seed: int, keep=None, like=None, front=None) -> dict:
    """Random token data for each data argument, over ``sum(docs)`` tokens. ``keep``
    (with ``like``): the rows ``[start, end)`` of ``like`` kept; ``front``: the rows of
    ``front`` placed after the filler."""
    generator = torch.Generator().manual_seed(seed)
    tokens = sum(docs)
    out = {}
    for number, (arg, dim) in enumerate(subject.token_dims.items()):
        shape = _shape(arg, subject.tokens, tokens)
        if dim is None:  # a weight: the same values in every run
            fixed = torch.Generator().manual_seed(1000 + number)
            out[arg] = _random(arg.meta["val"].dtype, shape, fixed)
            continue
        fresh = _random(arg.meta["val"].dtype, shape, generator)
        if keep is not None:
            index = [slice(None)] * len(shape)
            index[dim] = slice(*keep)
            fresh[tuple(index)] = like[arg][tuple(index)]
        if front is not None:
            index = [slice(None)] * len(shape)
            index[dim] = slice(FILLER, None)
            fresh[tuple(index)] = front[arg]
        out[arg] = fresh
    return out


def _random(dtype: torch.dtype, shape, generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    raise _Unverified(f"an integer token argument ({dtype}) whose values it needs are unknown")


def _shape(arg: torch.fx.Node, tokens: frozenset[str], length: int) -> list[int]:
    return [_size(d, tokens, length) for d in arg.meta["val"].shape]


def _size(size, tokens: frozenset[str], length: int) -> int:
    """A recorded size at ``T = length`` (the packed length's symbols solved for it)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    expr = size.node.expr
    free = {s for s in expr.free_symbols}
    if not free:
        return int(expr)
    if {str(s) for s in free} - tokens:
        raise _Unverified(f"a size ({expr}) that is not a function of the packed length")
    value = expr.subs({s: length for s in free})
    if not getattr(value, "is_Integer", False):
        raise _Unverified(f"a size ({expr}) that is not an integer at T = {length}")
    return int(value)


def _call(subject: Subject, docs, data: dict):
    """The op on ``data`` and on the layout arguments the program computes for ``docs``."""
    layout = _Layout(subject, docs, data)
    args = [layout.value(a) for a in subject.node.args]
    kwargs = {k: layout.value(v) for k, v in subject.node.kwargs.items()}
    try:
        with torch.no_grad():
            return subject.node.target(*args, **kwargs)
    except Exception as err:  # its implementation: shapes only, a GPU kernel
        raise _Unverified(f"its implementation raised {one_line(err)}") from err


class _Layout:
    """Values of the program's nodes for one packing: the data given, the layout
    inputs from the packing, and every other node by running its op."""

    def __init__(self, subject: Subject, docs, data: dict) -> None:
        self.subject, self.docs, self.known = subject, docs, dict(data)

    def value(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.node(arg)
        if isinstance(arg, list | tuple):
            return type(arg)(self.value(a) for a in arg)
        return arg

    def node(self, node: torch.fx.Node):
        if node in self.known:
            return self.known[node]
        if node.op == "placeholder":
            found = self.placeholder(node)
        elif node.op == "call_function" and node.target is not operator.getitem:
            args = [self.value(a) for a in node.args]
            kwargs = {k: self.value(v) for k, v in node.kwargs.items()}
            found = node.target(*args, **kwargs)
        elif node.op == "call_function":
            found = self.value(node.args[0])[node.args[1]]
        else:
            raise _Unverified(f"an argument computed from `{node.name}` ({node.op})")
        self.known[node] = found
        return found

    def placeholder(self, node: torch.fx.Node):
        name = self.subject.inputs.get(node.name)
        row = BY_NAME.get(name) if name is not None else None
        if row is None or row.structure is Structure.TOKENS:
            raise _Unverified(f"an argument computed from `{node.name}`, not the layout")
        value = row.value(self.docs)
        meta = node.meta.get("val")
        if isinstance(value, torch.Tensor) and isinstance(meta, torch.Tensor):
            value = value.to(meta.dtype)
        return value


def layout_only(node: torch.fx.Node, inputs: dict[str, str]) -> bool:
    """Whether ``node`` is computed from the batch layout alone: every placeholder it
    reads is a varlen input other than the tokens (positions, ``cu_seq_lens``, maximum
    lengths), and it reads no parameter, buffer or constant."""
    todo, seen = [node], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op == "placeholder":
            row = BY_NAME.get(inputs.get(current.name, ""))
            if row is None or row.structure is Structure.TOKENS:
                return False
        elif current.op != "call_function":
            return False
        todo.extend(current.all_input_nodes)
    return True


def _equal(a, b, dims, start: int, end: int, moved: int = 0) -> bool:
    """Each result's rows ``[start, end)`` along its token dim in ``a`` equal rows
    ``[start + moved, end + moved)`` in ``b`` bitwise (a result with no token dim: the
    whole of it, unless the row moved)."""
    a, b = ((x,) if isinstance(x, torch.Tensor) else tuple(x) for x in (a, b))
    for left, right, dim in zip(a, b, dims, strict=True):
        if dim is None:
            if not moved and not _same(left, right):
                return False
            continue
        left = left.narrow(dim, start, end - start)
        right = right.narrow(dim, start + moved, end - start)
        if not _same(left, right):
            return False
    return True


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


# --- the cache ---------------------------------------------------------------------


_CHOSEN: list[Path | None] = []  # the command line's choice (--cache-dir, --no-cache)


def use_cache(folder: Path | None) -> None:
    """Use ``folder`` (graphcheck's cache folder; ``None``: off) for verdicts, as the
    command line resolved it; by default the environment decides
    (:func:`graphcheck.cache.store.resolve_folder`)."""
    _CHOSEN[:] = [folder]


def op_cache() -> Path | None:
    """``v<schema>/ops/`` in graphcheck's cache folder (``None``: the cache is off)."""
    from graphcheck.cache.key import SCHEMA
    from graphcheck.cache.store import resolve_folder

    folder = _CHOSEN[0] if _CHOSEN else resolve_folder(None)
    return folder / f"v{SCHEMA}" / "ops" if folder is not None else None


def _key(subject: Subject) -> str | None:
    """The op, the file its implementation is written in (its bytes), the claim and its
    arguments' shapes and dtypes (T as ``T``); ``None``: no Python implementation to
    key on (a C++ kernel), so no cached verdict."""
    source = _implementation(subject.node.target._schema.name)
    if source is None:
        return None
    parts = [subject.node.target._schema.name, str(subject.node.target), str(subject.claim)]
    parts.append(hashlib.sha256(source).hexdigest())
    for arg in subject.node.all_input_nodes:
        val = arg.meta.get("val")
        shape = [_named(d, subject.tokens) for d in getattr(val, "shape", ())]
        parts.append(f"{getattr(val, 'dtype', type(val).__name__)}{shape}")
    parts.append(str(subject.out_dims))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def _named(size, tokens: frozenset[str]) -> str:
    """A size with the packed length's symbols written ``T`` (another export of the same
    model names them otherwise)."""
    if not isinstance(size, torch.SymInt):
        return str(size)
    expr = size.node.expr
    return str(expr.subs({s: sympy.Symbol("T") for s in expr.free_symbols if str(s) in tokens}))


def _implementation(name: str) -> bytes | None:
    """The bytes of the file that defines a ``torch.library.custom_op``'s function."""
    import inspect

    from torch._library.custom_ops import _maybe_get_opdef

    found = _maybe_get_opdef(name)
    fn = getattr(found, "_init_fn", None)
    try:
        return Path(inspect.getsourcefile(fn)).read_bytes() if fn is not None else None
    except (OSError, TypeError):
        return None


def _read(folder: Path | None, key: str | None) -> dict | None:
    if folder is None or key is None:
        return None
    try:
        return json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write(folder: Path | None, key: str | None, found: OpCheck) -> None:
    if folder is None or key is None or found.status == OpStatus.UNVERIFIED:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        record = {k: v for k, v in found.as_dict().items() if k != "cached"}
        (folder / f"{key}.json").write_text(json.dumps(record), encoding="utf-8")
    except OSError:
        return
