"""A model built on fake weights with its layout and build options: what the export
and the stage builders start from.

>>> session = Session("fixtures/reference.py:reference")
>>> session.name, session.layout.num_layers, session.spec is not None
('fixtures/reference.py:reference', 8, True)
>>> session.program_mode, session.module.training
(<ProgramMode.TRAIN: 'train'>, True)

Every argument is checked before anything is built: the example batch, the
``allow_fp32`` globs, a ``MODEL`` that names a directory, a ``.py`` file without its
factory or a config without ``hf:``, or a ``.py`` that does not exist
(:func:`~graphcheck.model.spec.check_globs` and :func:`~graphcheck.model.spec.check_spec`,
torch-free, say what to write instead). A module given as an object whose
parameters are mostly fp32 (a notebook's model as built, before the bf16 cast) is
refused with one line that says to pass the factory or cast the module
(:func:`check_module_dtype`), rather than a GC501 for each of its parameters.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

import torch
from torch import nn

from graphcheck.errors import LayoutError, ModelLoadError, UsageError, reworded
from graphcheck.kernels import (
    BUILTIN,
    check_targets,
    declared_token_local,
    load_kernels,
    token_local,
)
from graphcheck.model.boundary import BoundaryState, boundary_state, parse_boundary_state
from graphcheck.model.conventions import check_name, detect
from graphcheck.model.dtype import BuildDtype, DtypePlan, build_dtype, build_in, declared_fp32
from graphcheck.model.hf import hf_factory, is_transformers_model
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import (
    ProgramMode,
    as_program_mode,
    build_fake,
    fake_mode,
    in_program_mode,
    resolve_factory,
)
from graphcheck.model.spec import ModelSpec, check_globs, check_spec, is_hf_spec
from graphcheck.options import ModelOptions
from graphcheck.varlen import example_batch

__all__ = [
    "ModelArg",
    "Session",
    "check_globs",
    "check_module_dtype",
    "check_spec",
    "factory_of",
    "portable",
    "stand_ins_of",
]

ModelArg = str | Callable[[], nn.Module] | nn.Module


class Session:
    """``model`` (a spec, a factory or a module) built on fake weights, its layout and
    the options every later build repeats (strict export, ``--set``, kernels, the
    example batch of ``docs``, ``tokens`` and ``token_multiple``, and ``program_mode``:
    ``train``, the default, puts the model in ``model.train()``, ``eval`` in
    ``model.eval()``, a module given as an object too). ``boundary_state``
    (``--boundary-state``: JSON, a mapping or a :class:`BoundaryState`) overrides the
    model's ``pipeline_boundary_state``. ``dtype`` (``--dtype``) is the default dtype the
    factory runs under: ``bfloat16``, or ``float32`` then cast to bf16 but for the fp32
    carve-outs (declared, pinned by the model's code, or matching ``allow_fp32``).
    ``inputs_from`` (``--inputs-from``) names the input convention its forward follows
    (:mod:`graphcheck.model.conventions`; default: detected from its signature)."""

    def __init__(self, model: ModelArg, options: ModelOptions | None = None, **keywords) -> None:
        """``model`` built with ``options``, or with ``keywords`` (the fields of
        :class:`~graphcheck.options.ModelOptions`, each an option's API keyword)."""
        o = self.options = options if options is not None else ModelOptions.of(**keywords)
        self.batch = example_batch(o.docs, o.tokens, o.token_multiple)  # before any build
        self.dtype, self.allow_fp32 = build_dtype(o.dtype), check_globs(o.allow_fp32)
        self.dtype_plan = DtypePlan()  # what the build cast and kept (--dtype float32)
        self.program_mode = as_program_mode(o.program_mode)  # the model's mode, every build
        if o.backward and self.program_mode != ProgramMode.TRAIN:
            raise UsageError("--backward proves the training step's backward: it needs "
                             "--mode train")  # fmt: skip
        self.backward = o.backward  # prove the backward program too
        declared = declared_token_local(o.token_local_ops)  # --token-local, config token_local
        self.boundary_state = _state(o.boundary_state)
        check_name(o.inputs_from)
        check_spec(model)  # after the options, as the command line says a bad flag first
        self.mode = fake_mode()
        self.strict = o.strict
        self.settings = dict(o.settings or {})
        self.spec = model if isinstance(model, str) else None  # rebuildable in a fresh process
        self.token_local = token_local(o.kernels) | declared  # kernels file's TOKEN_LOCAL too
        self.stand_ins = stand_ins_of(o)
        self.name, self.module = self._build(model)
        _check_no_cache(self.name, self.module)
        check_targets(self.module, self.stand_ins)  # a kernels file's targets, before export
        self.convention = detect(self.module, o.inputs_from)  # how forward takes the batch
        self.layout = detect_layout(
            self.module,
            o.layers,
            tuple(o.inputs) if o.inputs else None,
            tuple(o.outputs) if o.outputs else None,
            self.boundary_state,
        )

    def rebuild_options(self) -> ModelOptions:
        """What a fresh process rebuilds this model from: the options as given, the
        kernels file as an absolute path, the input convention as detected."""
        kernels = str(Path(self.options.kernels).resolve()) if self.options.kernels else None
        return dataclasses.replace(
            self.options, kernels=kernels, inputs_from=self.convention.name,
            program_mode=str(self.program_mode), settings=dict(self.settings),
        )  # fmt: skip

    def _build(self, model: ModelArg) -> tuple[str, nn.Module]:
        if is_hf_spec(model):
            return model, self._fake(hf_factory(model, self.settings))
        if self.settings:
            raise UsageError("--set applies to hf: models only")
        if isinstance(model, str):
            return model, self._fake(_factory(model))
        if isinstance(model, nn.Module):
            if self.dtype is not BuildDtype.BFLOAT16:
                raise UsageError("--dtype applies to a factory or a spec, not a built module")
            check_module_dtype(model, self.allow_fp32)
            self.dtype_plan = DtypePlan(declared=tuple(declared_fp32(model)))  # GC501 allows
            return type(model).__name__, in_program_mode(model, self.program_mode)
        name = getattr(model, "__qualname__", repr(model))
        return name, self._fake(model)

    def _fake(self, factory: Callable[[], nn.Module]) -> nn.Module:
        """``factory`` built on fake weights in :attr:`dtype` (:mod:`graphcheck.model.dtype`)."""
        build = functools.partial(build_fake, factory, self.mode, self.program_mode)
        module, self.dtype_plan = build_in(build, self.dtype, self.allow_fp32)
        return module


def stand_ins_of(options: ModelOptions) -> tuple:
    """The stand-ins a build with ``options`` patches in: the built-in ones unless
    ``--no-stand-ins``, then a kernels file's."""
    return (
        *(BUILTIN if options.stand_ins else ()),
        *(load_kernels(options.kernels) if options.kernels else ()),
    )


def factory_of(spec: str, options: ModelOptions) -> Callable[[], nn.Module]:
    """The factory of a MODEL ``spec`` (an ``hf:`` spec with the options' ``--set``
    keys), as a fresh process resolves it."""
    return (
        hf_factory(spec, dict(options.settings or {}))
        if is_hf_spec(spec)
        else resolve_factory(spec)
    )


def _check_no_cache(name: str, module: nn.Module) -> None:
    """A transformers model must run its training forward, without a key-value cache:
    with one, transformers masks the packed row as one sequence (documents attend to
    each other) and returns the cache, which does not export."""
    config = getattr(module, "config", None)
    if is_transformers_model(module) and getattr(config, "use_cache", False):
        raise ModelLoadError(
            f"{name}: the transformers model is built with use_cache=True: with a key-value "
            "cache transformers masks the packed row as one sequence, so documents attend to "
            "each other; build it with use_cache=False, as a training forward runs"
        )


def _factory(spec: str) -> Callable[[], nn.Module]:
    """:func:`resolve_factory`, its error for a factory missing from the file ending with
    the nearest name there is (``did you mean reference?``)."""
    try:
        return resolve_factory(spec)
    except ModelLoadError as err:
        model = ModelSpec.of(spec)
        file, name = Path(model.target), model.factory
        if " has no callable " not in str(err) or file.suffix != ".py" or not file.is_file():
            raise
        guess = difflib.get_close_matches(name, _top_names(file), 1, 0.75)
        if not guess:
            raise
        raise reworded(err, f"{err}; did you mean {guess[0]}?") from None


def _top_names(file: Path) -> list[str]:
    """The names a Python file defines at its top level (read, not imported)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]


def check_module_dtype(module: nn.Module, allow_fp32: Sequence[str] = ()) -> None:
    """A :class:`UsageError` for a built module whose floating parameters are mostly fp32
    and not declared fp32 (``_keep_in_fp32_modules_strict``,
    ``get_pp_module_config()["fp32_params"]``, ``allow_fp32``): graphcheck proves the
    bf16 program, so the module as given is not the one to prove. A bf16 module with a
    few undeclared fp32 parameters passes here (GC501 reports them)."""
    params = dict(module.named_parameters())
    floating = {n: p.numel() for n, p in params.items() if p.dtype.is_floating_point}
    declared = set(declared_fp32(module))
    stray = [
        n
        for n in floating
        if params[n].dtype == torch.float32
        and n not in declared
        and not any(fnmatchcase(n, g) for g in allow_fp32)
    ]
    if not stray or 2 * sum(floating[n] for n in stray) <= sum(floating.values()):
        return
    raise UsageError(
        f"{type(module).__name__} was given built with fp32 parameters ({len(stray)} of "
        f"{len(floating)}, e.g. {stray[0]}); graphcheck proves the bf16 program: pass its "
        "factory instead (built on fake weights, any size; dtype='float32' keeps declared "
        "fp32 carve-outs) or cast it first with model.to(torch.bfloat16)"
    )


def _state(value: str | Mapping | BoundaryState | None) -> BoundaryState | None:
    """``--boundary-state`` (JSON) or the API's mapping, validated before any build."""
    if value is None or isinstance(value, BoundaryState):
        return value
    if isinstance(value, str):
        return parse_boundary_state(value)
    try:
        return boundary_state(value, "boundary_state")
    except LayoutError as err:
        raise UsageError(str(err)) from None


def portable(spec: str) -> str:
    """``spec`` with a file path made absolute, so another process finds it."""
    model = ModelSpec.of(spec)
    if model.hf:
        return (
            model.with_target(str(Path(model.target).resolve()))
            if Path(model.target).exists()
            else spec
        )
    if model.target.endswith(".py") and Path(model.target).is_file():
        return model.with_target(str(Path(model.target).resolve()))
    return spec
