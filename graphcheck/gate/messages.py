"""The gate's one-line failure messages: what could not run, where, and why.

Every failure the gate reports (an exit-2 :class:`~graphcheck.errors.GateError` or a
``blocked`` finding) is one line built here, never a traceback.

>>> one_line(ValueError("first. second\\nthird"))
'first'
>>> kernel_message("the model", NotImplementedError("no kernel for cpu"))
'the model has an op without a CPU implementation: no kernel for cpu'
>>> not_pipeline_aware("keep-index", "stage 1 raised TypeError: x").split(";")[0]
'stage 1 raised TypeError: x, built by the default stage builder keep-index'
"""

from __future__ import annotations

from graphcheck import errors
from graphcheck.analysis.fx import op_name
from graphcheck.gate.graph_run import NodeFailure
from graphcheck.results.gate import Blocked

__all__ = [
    "failure_message",
    "kernel_message",
    "not_pipeline_aware",
    "one_line",
    "raised",
    "random_ops",
]


def one_line(err: BaseException) -> str:
    """The first sentence of the first line of ``err``, shortened."""
    return errors.one_line(err, typed=False, sentence=True, limit=200)


def kernel_message(where: str, err: BaseException) -> str:
    return f"{where} has an op without a CPU implementation: {one_line(err)}"


def failure_message(failure: NodeFailure, what: str) -> str:
    """A node of the exported program that failed on CPU, by op and place."""
    cause = failure.__cause__
    op = op_name(failure.node.target)
    at = f"at {failure.node.name} in {failure.where}"
    if isinstance(cause, NotImplementedError):
        return f"no CPU implementation for `{op}` ({at}): {one_line(cause)}"
    return f"{what} cannot run on CPU: `{op}` {at} raised {type(cause).__name__}: " + one_line(
        cause
    )


def raised(what: str, err: BaseException, stage: int = -1) -> Blocked:
    """A run that raised, as the :class:`Blocked` finding of its stage."""
    cause = err.__cause__ if isinstance(err, NodeFailure) else err
    where = f" ({err})" if isinstance(err, NodeFailure) else ""
    message = f"{what} raised {type(cause).__name__}{where}: {one_line(cause)}"
    return Blocked(stage, "", "", None, message)


def not_pipeline_aware(builder: str, message: str) -> str:
    """A stage raised under the builder the user did not choose: could not run."""
    name = builder.rpartition(":")[2] if ":" in builder else builder
    return (
        f"{message}, built by the default stage builder {name}; if the model is not "
        "pipeline-aware pass --stage-builder FILE.py:FN (or --in-process for the "
        "partitioned exported graph)"
    )


def random_ops(found: list, program_mode: str) -> str:
    """The gate refused: the program draws random numbers (GC304 ``found``), so the
    staged and uncut bytes would differ by their random streams alone."""
    places = sorted({f"{d.node} in {d.module or '-'}" for d in found})
    more = f" and {len(places) - 3} more" if len(places) > 3 else ""
    where = ", ".join(places[:3])
    return (
        f"the {program_mode} program has random ops (GC304: {where}{more}): a staged run "
        "cannot reproduce the uncut run's random stream, so there are no bytes to compare; "
        "set the dropout probability to 0, or gate --mode eval if that is the program you run"
    )
