"""Every stage of a plan built, exported and compared with the uncut program.

A model given by its spec and a builder given by name are built as ranks build
them: each stage in a fresh process (:func:`graphcheck.stages.build.build_stage_fresh`).
Otherwise the stages are built in this process, after the uncut model
(``isolated`` is false).

A fresh-process stage is a pure function of its :class:`StageRequest` and the model
code it imports, so within one process each is built once: a request seen before is
answered from memory while every file the model code was read from hashes as it did
(:func:`graphcheck.cache.key.dependencies`): the same stage of another plan, or of
the same plan proven again (``plan`` then ``verify``, a notebook's explorer).
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
from collections.abc import Callable
from pathlib import Path

import torch.fx

from graphcheck.analysis.program import Program
from graphcheck.cache.key import dependencies, digest, file_digest, unchanged
from graphcheck.errors import ExportError, GraphcheckError, UsageError, reworded
from graphcheck.kernels import patched
from graphcheck.model.session import Session, portable
from graphcheck.model.spec import ModelSpec
from graphcheck.planning.plan import StagePlan
from graphcheck.stages.build import StageProgram, StageRequest, build_stage, build_stage_fresh
from graphcheck.stages.builders import BUILTINS, PIPELINE_AWARE, StageBuilder, resolve_builder
from graphcheck.stages.compare import Mismatch, compare_stage
from graphcheck.stages.fingerprint import glue_labels
from graphcheck.stages.fresh import run_fresh_many

__all__ = ["stage_or_error", "stage_programs"]


def stage_programs(
    session: Session,
    builder: str | StageBuilder,
    program: Program,
    plan: StagePlan,
    stage_of: Callable[[torch.fx.Node], int | None],
    widths: list,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[StageProgram], list[Mismatch]]:
    """Build, export and compare every stage of ``plan``. ``widths[k]`` is the wire
    stage ``k`` takes (a :class:`~graphcheck.model.boundary.WireShape`, ``[1, T, H]`` or
    ``[T, H]``; ``None`` for the first; a width stands for ``[1, T, width]``);
    ``stage_of`` places the uncut program's nodes; ``progress(done)`` is called as
    stages are built."""
    bounds = (0, *plan.cuts, plan.num_layers)
    spans = [list(range(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
    name = builder if isinstance(builder, str) else None
    if name is not None and name not in BUILTINS and ":" not in name:
        resolve_builder(name, session.layout)  # the one-line error for an unknown name
    with _builtin_hint(name):
        if name is not None and session.spec is not None:
            stages = _fresh_stages(session, name, spans, widths, progress)
        else:
            stages = _local_stages(session, builder, name, spans, widths, progress)
    mismatches = []
    for stage in stages:
        last = stage.index == plan.num_stages - 1
        nodes = [n for n in program.interval if stage_of(n) == stage.index]
        glue = glue_labels(program, nodes)
        mismatches += compare_stage(program, stage, last, widths[stage.index + 1], glue)
    return stages, mismatches


def _fresh_stages(
    session: Session, builder: str, spans: list[list[int]], widths: list, progress=None
):
    """Each stage built and exported in its own fresh process."""
    options = session.rebuild_options()
    requests = [
        StageRequest(
            portable(session.spec),
            portable(builder),
            session.layout,
            index,
            tuple(layers),
            len(spans),
            widths[index],
            options,
            session.batch,
        )
        for index, layers in enumerate(spans)
    ]
    return _built_once(session.spec, requests, progress)


# request digest -> (the files the model code was read from and their hashes, the stage
# or the error building it raised)
_BUILT: dict[str, tuple[dict[str, str | None], StageProgram | GraphcheckError]] = {}


def _built_once(spec: str, requests: list[StageRequest], progress=None) -> list[StageProgram]:
    """Each request's stage (or error) from memory if built before on the same model
    code, the others built side by side in fresh processes (one per core) and
    remembered; the first error, in stage order, is raised."""
    keys = [digest(pickle.dumps(request)) for request in requests]
    known = {k: _BUILT[k][1] for k in keys if k in _BUILT and unchanged(_BUILT[k][0]) is None}
    missing = [(k, r) for k, r in zip(keys, requests, strict=True) if k not in known]
    done = len(requests) - len(missing)
    ticks = None if progress is None else (lambda n: progress(done + n))
    built = run_fresh_many(stage_or_error, [(r,) for _, r in missing], progress=ticks)
    files = _model_files(spec) if missing else {}
    for (key, _), outcome in zip(missing, built, strict=True):
        _BUILT[key] = (files, outcome)
        known[key] = outcome
    if progress is not None and not missing:
        progress(len(requests))
    outcomes = [known[k] for k in keys]
    for outcome in outcomes:
        if isinstance(outcome, GraphcheckError):
            raise reworded(outcome, str(outcome)) from None  # a new one: it may be raised again
    return outcomes


def stage_or_error(request: StageRequest) -> StageProgram | GraphcheckError:
    """:func:`build_stage_fresh` (run in a fresh process), its error returned rather than
    raised: every stage of a plan is built, and each outcome remembered."""
    try:
        return build_stage_fresh(request)
    except GraphcheckError as err:
        return err


def _model_files(spec: str) -> dict[str, str | None]:
    """The files the model code of ``spec`` was read from in this process, hashed: its
    own file and every module imported outside the libraries and graphcheck."""
    files = dependencies(spec)
    model = ModelSpec.of(spec)
    target = model.target
    if not model.hf and target.endswith(".py"):
        files[str(Path(target).resolve())] = file_digest(target)
    return files


def _local_stages(session: Session, builder, name: str | None, spans, widths, progress=None):
    """Each stage built in this process, after the uncut model (not isolated)."""
    if isinstance(builder, str):
        if getattr(BUILTINS.get(builder), "splits_in_place", False):
            raise UsageError(
                f"the {builder} stage builder splits a model built for each stage, and a "
                "model given as an object is built once: give it as FILE.py:factory"
            )
        builder = resolve_builder(builder, session.layout)
    stages = []
    for index, layers in enumerate(spans):
        with patched(session.module, session.stand_ins):
            stages.append(
                build_stage(
                    session.module,
                    session.layout,
                    builder,
                    session.mode,
                    index,
                    layers,
                    len(spans),
                    widths[index],
                    session.strict,
                    name,
                    session.batch,
                    session.program_mode,
                )
            )
        if progress is not None:
            progress(len(stages))
    return stages


@contextlib.contextmanager
def _builtin_hint(name: str | None):
    """Say what the builtin stage builders expect when a stage fails to export."""
    try:
        yield
    except ExportError as err:
        if name not in PIPELINE_AWARE:
            raise
        raise ExportError(
            f"{err}; the builtin stage builders ({name}) need a pipeline-aware "
            "model (a stage sets the modules it does not own to None and takes hidden states "
            "as input_ids): pass --stage-builder file.py:function",
            err.detail,
        ) from err
