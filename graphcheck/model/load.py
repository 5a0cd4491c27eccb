"""Resolve a ``MODEL`` spec and build the model on fake weights.

``MODEL`` is ``path/to/file.py:factory`` or ``package.module:factory``. The
factory is called under a :class:`FakeTensorMode` with bf16 as the default
dtype, so parameters are created without memory: a 400B-parameter config
builds on a laptop. Parameters the model deliberately keeps in another dtype
keep it (graphcheck reports them, GC501). ``--dtype float32`` builds in the
model's own dtype instead (:mod:`graphcheck.model.dtype`).

>>> parse_spec("fixtures/reference.py:reference")
('fixtures/reference.py', 'reference')
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from graphcheck.errors import ModelLoadError
from graphcheck.model.dtype import fake_conversions
from graphcheck.model.modes import ProgramMode, as_program_mode
from graphcheck.model.spec import parse_spec, require_file
from graphcheck.model.values import shadow_values

__all__ = [
    "copy_fake",
    "ProgramMode",
    "as_program_mode",
    "build_fake",
    "default_dtype",
    "fake_mode",
    "in_program_mode",
    "parse_spec",
    "resolve_factory",
]


def in_program_mode(model: nn.Module, mode: ProgramMode | str) -> nn.Module:
    """``model`` (and every submodule) put in ``mode``: ``model.train()`` or ``.eval()``."""
    return model.train(as_program_mode(mode) is ProgramMode.TRAIN)


def resolve_factory(spec: str) -> Callable[[], nn.Module]:
    """The callable named by ``spec``; raises :class:`ModelLoadError`."""
    target, name = parse_spec(spec)
    module = _import_file(target) if target.endswith(".py") else _import_module(target)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ModelLoadError(f"{target} has no callable {name!r}")
    return factory


_IMPORTED: dict[str, tuple[int, int]] = {}  # module name -> the file's (mtime, size)


def _import_file(path: str):
    """The model file as a module, imported once per process while the file is
    unchanged: a file that defines ``torch.library`` custom ops registers them once
    (executing it again would replace the ops the dispatcher holds)."""
    require_file(path)
    file = Path(path)
    mod_name = "graphcheck_model_" + "_".join(file.resolve().with_suffix("").parts[-3:])
    stat = file.stat()
    if _IMPORTED.get(mod_name) == (stat.st_mtime_ns, stat.st_size) and mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))
    try:
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    except Exception as err:
        raise ModelLoadError(f"importing {path} raised {type(err).__name__}: {err}") from err
    finally:
        sys.path.remove(str(file.resolve().parent))
    _IMPORTED[mod_name] = (stat.st_mtime_ns, stat.st_size)
    return module


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ModelLoadError(f"cannot import module {name!r}: {err}") from err
    except Exception as err:
        raise ModelLoadError(f"importing {name} raised {type(err).__name__}: {err}") from err


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def fake_mode() -> FakeTensorMode:
    """The fake-tensor mode a model is built and exported in."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def copy_fake(module: nn.Module) -> nn.Module:
    """A deep copy of a fake-built ``module`` (run it under the fake mode).

    A tensor a factory makes from Python numbers under the fake mode
    (``torch.tensor(embed_scale)``, Gemma's scaled embedding) is a fake tensor that keeps
    the real CPU tensor it was made from as its ``constant``; a plain ``deepcopy`` copies
    that real tensor inside the fake mode, whose meta storage cannot take a CPU one
    (``Attempted to set the storage of a tensor on device "meta"``). The constants are
    shared instead: nothing writes to them."""
    memo: dict[int, object] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        constant = getattr(tensor, "constant", None)
        if isinstance(constant, torch.Tensor):
            memo[id(constant)] = constant
    return copy.deepcopy(module, memo)


def build_fake(
    factory: Callable[[], nn.Module],
    mode: FakeTensorMode,
    program: ProgramMode | str = ProgramMode.TRAIN,
    dtype: torch.dtype = torch.bfloat16,
) -> nn.Module:
    """Call ``factory`` with ``dtype`` (bf16) as the default dtype under ``mode``; check it
    returns a module, put in the ``program`` mode (train or eval). A factory may call
    ``.to()`` on its fake weights (:func:`graphcheck.model.dtype.fake_conversions`). The
    real values of its small tensors (buffers) are computed beside it
    (:mod:`graphcheck.model.values`)."""
    try:
        with mode, default_dtype(dtype), fake_conversions(), shadow_values():
            model = factory()
    except Exception as err:
        name = getattr(factory, "__name__", "factory")
        raise ModelLoadError(f"factory {name}() raised {type(err).__name__}: {err}") from err
    if not isinstance(model, nn.Module):
        raise ModelLoadError(f"factory returned {type(model).__name__}, not an nn.Module")
    return in_program_mode(model, program)
