"""Custom ops: trusted kernels judged by the document structure they are given.

Assumes a custom kernel (graphcheck's stand-ins, a ``--kernels`` file, any namespace
other than ``aten`` and ``prims``) keeps documents apart when an argument's *value* is
the batch's document structure (the real ``cu_seq_lens`` or document ids, whatever the
argument is called) and every other integer tensor it is given is that structure too;
its scalar arguments are sizes. One given other boundaries is a leak; one given none,
touching tokens, is unknown. :func:`custom` is also the dispatch's fallback for any
unregistered op of such a namespace. An op a kernels file declares token-local
(``TOKEN_LOCAL``) keeps each token's rows to itself.

Every trust is checked: the op's own implementation is executed alone on a concrete
packing (:mod:`graphcheck.kernels.validation`, cached); one that mixes documents (or
tokens) when it runs is GC401 with the packing that shows it, one that cannot run here
stays trusted and the report says it was not verified.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.attention import _doc_attention
from graphcheck.analysis.locality.domain import (
    Interp,
    Kind,
    Tok,
    Val,
    bind,
    carry,
    meta_toks,
    unknown,
)
from graphcheck.analysis.locality.registry import Work, register
from graphcheck.kernels.validation import (
    Claim,
    OpCheck,
    OpStatus,
    Subject,
    layout_only,
    op_cache,
    validate,
)

__all__ = ["custom"]

aten = torch.ops.aten


_STRUCTURE = (Kind.CU, Kind.DOCID)


def _integer_metadata(arg) -> bool:
    """An integer tensor that is not a scalar: an argument through which a kernel could
    be told where documents begin (boundaries, lengths, ids, a block table)."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dim() == 0:
        return False
    return val.dtype != torch.bool and not val.is_complex()


def _described(interp: Interp, bound: dict) -> tuple[list[str], list[str]]:
    """The arguments whose values are the batch's document structure (``cu_seq_lens``,
    document ids), and the other integer tensors a kernel is given (positions are
    per-token data: a rotary kernel reads them)."""
    structure, other = [], []
    for name, arg in bound.items():
        val = interp.val(arg)
        if val is not None and val.kind in _STRUCTURE:
            structure.append(name)
        elif _integer_metadata(arg) and not (val is not None and val.kind == Kind.POS):
            other.append(name)
    return structure, other


@register("graphcheck::varlen_attention.default", work=Work.VARLEN_ATTENTION)
@register("graphcheck::chunk_gated_delta_rule.default", work=Work.LINEAR_ATTENTION)
@register("graphcheck::varlen_attention_backward.default", "graphcheck::causal_conv1d.default")
def custom(interp: Interp, node: torch.fx.Node):
    """A custom kernel (graphcheck's stand-ins, a ``--kernels`` file, any namespace) is
    trusted to keep documents apart when an argument's *value* is the batch's document
    structure (the real ``cu_seq_lens`` or document ids, whatever the argument is
    called) and every other integer tensor it is given is that structure too; its
    scalar arguments are sizes (``max_seqlen``). One given other boundaries is a leak;
    one given none, touching tokens, is unknown."""
    if node.target._schema.name in interp.token_local:
        return _token_local(interp, node)
    bound = bind(node)
    structure, other = _described(interp, bound)
    name = f"`{op_name(node.target)}`"
    if other:
        given = ", ".join(f"`{k}`" for k in other)
        verb = "is" if len(other) == 1 else "are"
        why = f"{name} is given {given}, which {verb} not the batch's document structure "
        why += "(cu_seq_lens or document ids), so it is not trusted to keep documents apart"
        return _doc_attention(interp, node, [], False, why)
    if not structure:
        return unknown(interp, node)
    data = [v for k, v in bound.items() if k not in structure and not _scalar(v)]
    found = _validated(interp, node, Claim.DOCUMENT_LOCAL)
    if found is not None and found.status == OpStatus.LEAKS:
        why = (f"`{node.target._schema.name}` is given the batch's document structure, but "
               f"its own implementation mixes documents: {found.detail}")  # fmt: skip
        return _doc_attention(interp, node, [], False, why)
    return _doc_attention(interp, node, data, True, "")


def _token_local(interp: Interp, node: torch.fx.Node):
    """A kernels file's ``TOKEN_LOCAL`` op: each result row reads its token's rows of
    the operands, held to it by executing the op (a leak is GC401 with the packing)."""
    vals = [interp.val(a) for a in node.all_input_nodes]
    found = _validated(interp, node, Claim.TOKEN_LOCAL)
    if found is not None and found.status == OpStatus.LEAKS:
        why = (f"`{node.target._schema.name}` is declared token-local, but its own "
               f"implementation mixes tokens: {found.detail}")  # fmt: skip
        return interp.leak(node, why, meta_toks(_first(node), interp.tokens), inputs=vals)
    out = node.meta.get("val")
    toks = [meta_toks(v, interp.tokens) for v in (out if isinstance(out, tuple | list) else [out])]
    results = [Val(t, **carry(vals)) for t in toks]
    return tuple(results) if isinstance(out, tuple | list) else results[0]


def _first(node: torch.fx.Node):
    out = node.meta.get("val")
    return out[0] if isinstance(out, tuple | list) else out


def _validated(interp: Interp, node: torch.fx.Node, claim: Claim) -> OpCheck | None:
    """The op executed alone (:mod:`graphcheck.kernels.validation`), once per op and shape
    class; ``None`` for graphcheck's own stand-ins (the gate runs their CPU reference)
    or when the token dims are not plain (the report says it was not verified)."""
    if node.target.namespace == "graphcheck":
        return None
    subject = _subject(interp, node, claim)
    found = validate(subject) if isinstance(subject, Subject) else subject
    if found.op not in interp.validated or found.status == OpStatus.LEAKS:
        interp.validated[found.op] = found  # a leak in any shape class is the op's verdict
    return found


def _subject(interp: Interp, node: torch.fx.Node, claim: Claim) -> Subject | OpCheck:
    inputs = getattr(interp, "inputs", {})
    dims: dict[torch.fx.Node, int | None] = {}
    for arg in node.all_input_nodes:
        if layout_only(arg, inputs):
            continue
        val = interp.val(arg)
        plain = [i for i, t in enumerate(val.toks if val else ()) if t == Tok("T", 1)]
        if (val is not None and len(plain) != len(val.token_dims)) or len(plain) > 1:
            return _unverified(node, claim, f"`{arg.name}` has tokens on a dim not plain T")
        dims[arg] = plain[0] if plain else None
    out = node.meta.get("val")
    outs: list[int | None] = []
    for value in out if isinstance(out, tuple | list) else (out,):
        toks = meta_toks(value, interp.tokens)
        plain = [i for i, t in enumerate(toks) if t == Tok("T", 1)]
        if len(plain) > 1 or len(plain) != len([t for t in toks if t is not None]):
            return _unverified(node, claim, "a result with tokens on a dim not plain T")
        outs.append(plain[0] if plain else None)
    if all(d is None for d in outs):
        return _unverified(node, claim, "its results have no token dim")
    tokens = frozenset(str(t) for t in interp.tokens)
    return Subject(node, claim, inputs, tokens, dims, tuple(outs), cache=op_cache())


def _unverified(node: torch.fx.Node, claim: Claim, why: str) -> OpCheck:
    return OpCheck(node.target._schema.name, str(claim), OpStatus.UNVERIFIED, why)


def _scalar(arg) -> bool:
    """A SymInt or number: a trusted kernel's sizes (``max_seqlen``), not its data."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
    return not isinstance(val, torch.Tensor)
