"""The ``MODEL`` spec and the build's own arguments, checked without importing torch.

``MODEL`` is ``path/to/file.py:factory``, ``package.module:factory`` or ``hf:SPEC``
(:mod:`graphcheck.model.hf`). What the arguments alone decide is checked here, so a
typo answers at once instead of after torch's import (``graphcheck verify nosuch.py:f``):
the spec's syntax (:func:`parse_spec`), a file or folder named the wrong way
(:func:`check_spec` says what to write instead: ``hf:DIR`` for a folder holding a
``config.json``, ``FILE.py:factory`` for one of Python files, the factories of a ``.py``
given without one, ``hf:`` before a config ``.json``), a missing ``.py`` or ``hf:`` config
(:func:`require_file`, with the nearest name there is; a ``--kernels`` file too), and the
``--allow-fp32`` globs (:func:`check_globs`). A factory missing from an existing file
needs the file imported: :mod:`graphcheck.model.session` says that one.

A spec is split once, by :class:`ModelSpec`; every module that reads one reads that:

>>> ModelSpec.of("fixtures/reference.py:reference").file, ModelSpec.of("hf:llama").target
('fixtures/reference.py', 'llama')
>>> parse_spec("fixtures/reference.py:reference")
('fixtures/reference.py', 'reference')
>>> is_hf_spec("hf:llama"), is_hf_spec("fixtures/reference.py:reference")
(True, False)
>>> check_spec("fixtures")  # doctest: +ELLIPSIS
Traceback (most recent call last):
graphcheck.errors.UsageError: MODEL 'fixtures' is a directory (...): write fixtures/FILE.py:...
"""

from __future__ import annotations

import ast
import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from graphcheck.errors import ModelLoadError, UsageError

__all__ = [
    "PREFIX",
    "ModelSpec",
    "check_globs",
    "check_spec",
    "config_file",
    "hf_target",
    "is_config_path",
    "is_hf_spec",
    "parse_spec",
    "require_file",
]

PREFIX = "hf:"  # a transformers model: hf:<model_type> or hf:path/to/config.json


@dataclass(frozen=True)
class ModelSpec:
    """A ``MODEL`` spec split into what it is read from (``target``: the ``hf:`` model
    type or config path, the ``.py`` file, the dotted module) and its factory's name
    (``""`` for ``hf:``). :meth:`of` splits any text; :meth:`parse` also checks it is one
    of the three forms.

    >>> ModelSpec.of("pkg.models:build").package, ModelSpec.of("m.py:f").package
    ('pkg', None)
    >>> ModelSpec.of("/p/m.py:f").with_target("m.py"), ModelSpec.of("x").valid
    ('m.py:f', False)
    """

    text: str
    target: str
    factory: str = ""
    hf: bool = False

    @classmethod
    def of(cls, text: str) -> ModelSpec:
        """``text`` split, unchecked (a text without ``:`` has an empty target)."""
        if is_hf_spec(text):
            return cls(text, text[len(PREFIX) :], hf=True)
        target, _, factory = text.rpartition(":")
        return cls(text, target, factory)

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """``text`` split; a :class:`UsageError` when it is not ``file.py:factory`` or
        ``package.module:factory`` (an ``hf:`` spec is checked by :mod:`graphcheck.model.hf`)."""
        spec = cls.of(text)
        if not spec.valid:
            raise UsageError(
                f"model spec {text!r} is not 'path/to/file.py:factory' or 'package.module:factory'"
            )
        return spec

    @property
    def valid(self) -> bool:
        """Whether it has one of the three forms (``hf:`` anything, else a target and a
        factory that is an identifier)."""
        return self.hf or (bool(self.target) and self.factory.isidentifier())

    @property
    def file(self) -> str | None:
        """The file it is read from: a ``.py`` (or an ``hf:`` config ``.json``)."""
        return self.target if self.target.endswith((".py", ".json")) else None

    @property
    def package(self) -> str | None:
        """The top-level package of a ``package.module:factory`` spec."""
        if self.hf or self.file is not None or not self.target:
            return None
        return self.target.partition(".")[0]

    def with_target(self, target: str) -> str:
        """The spec's text with ``target`` in place of its own."""
        return f"{PREFIX}{target}" if self.hf else f"{target}:{self.factory}"


def is_hf_spec(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def hf_target(spec: str) -> str:
    """What follows ``hf:``: a model type or a path to a config; a :class:`UsageError`
    when nothing does."""
    target = spec.removeprefix(PREFIX)
    if not target:
        raise UsageError("hf: needs a model type (hf:llama) or a path to config.json")
    return target


def is_config_path(target: str) -> bool:
    """Whether ``hf:target`` names a config file or folder rather than a model type.

    >>> is_config_path("configs/llama.json"), is_config_path("llama")
    (True, False)
    """
    return target.endswith(".json") or "/" in target or os.sep in target or Path(target).exists()


def config_file(target: str) -> Path:
    """The ``config.json`` an ``hf:`` path names (the file, or the one in the folder); a
    :class:`ModelLoadError` when there is none."""
    path = Path(target)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ModelLoadError(f"config not found: {file}")
    return file


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``MODEL`` into (file or module, factory name) (:meth:`ModelSpec.parse`); a
    :class:`UsageError` when it is neither form."""
    found = ModelSpec.parse(spec)
    return found.target, found.factory


def require_file(path: str, what: str = "file") -> None:
    """A :class:`ModelLoadError` when the ``.py`` file ``path`` (a model's, a kernels
    file: ``what``) does not exist, ending with the nearest file name in its folder
    (``did you mean fixtures/reference.py?``).

    >>> require_file("fixtures/refrence.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphcheck.errors.ModelLoadError: file not found: ...; did you mean fixtures/reference.py?
    """
    file = Path(path)
    if file.is_file():
        return
    near = []
    if file.parent.is_dir():
        names = [p.name for p in file.parent.glob("*.py")]
        near = difflib.get_close_matches(file.name, names, 1, 0.8)
    guess = f"; did you mean {file.parent / near[0]}?" if near else ""
    raise ModelLoadError(f"{what} not found: {path}{guess}")


def check_spec(model: object) -> None:
    """A one-line error for a ``MODEL`` string the arguments alone show is wrong: a
    directory (with or without ``:factory``) ``hf:DIR`` when it holds a ``config.json``,
    else ``DIR/FILE.py:factory``; a ``.py`` file without ``:factory`` its functions; a
    config ``.json`` without ``hf:`` that prefix; not ``target:factory``; a ``.py`` that
    does not exist; an ``hf:`` spec with nothing after it, or a path to no config. Anything
    but a string (a factory, a module) passes."""
    if is_hf_spec(model):
        target = hf_target(model)
        if is_config_path(target):
            config_file(target)
        return
    if not isinstance(model, str):
        return
    spec = ModelSpec.of(model)
    folder = Path(spec.target or model)
    if folder.is_dir():
        _folder(model, folder)
    _check_file(model)
    target = ModelSpec.parse(model).target
    if target.endswith(".py"):
        require_file(target)


def _folder(model: str, folder: Path) -> None:
    if (folder / "config.json").is_file():
        raise UsageError(
            f"MODEL {model!r} is a directory holding a config.json: write hf:{folder} to build "
            "the transformers model it describes"
        )
    files = sorted(p.name for p in folder.glob("*.py"))[:3]
    shown = f" (it holds {', '.join(files)})" if files else ""
    raise UsageError(
        f"MODEL {model!r} is a directory{shown}: write {folder}/FILE.py:factory, the file and "
        "the function in it that returns the model"
    )


def _check_file(model: str) -> None:
    """``MODEL`` an existing ``file.py`` or ``config.json`` given without what it needs."""
    file = Path(model)
    if not file.is_file():
        return
    if file.suffix == ".json":
        raise UsageError(f"MODEL {model!r} is a JSON file: write hf:{model} to build its config")
    if file.suffix != ".py":
        return
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        tree = ast.Module(body=[], type_ignores=[])
    names = [n.name for n in tree.body if _factory_like(n)]
    shown = f" (callable without arguments: {', '.join(names[:4])}{', ...' * (len(names) > 4)})"
    raise UsageError(
        f"MODEL {model!r} names no factory: write {model}:FACTORY, the function that returns "
        f"the model{shown if names else ''}"
    )


def _factory_like(node: ast.stmt) -> bool:
    """A public top-level function callable without arguments."""
    if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
        return False
    args = node.args
    return len(args.defaults) == len(args.posonlyargs) + len(args.args) and all(
        default is not None for default in args.kw_defaults
    )


def check_globs(globs: Sequence[str], flag: str = "--allow-fp32") -> tuple[str, ...]:
    """``globs`` as a tuple, or a :class:`UsageError` for one that cannot name a parameter:
    empty, an unclosed ``[``, a comma or a space (no parameter name holds one).

    >>> check_globs(["*.A_log", "layers.[0-3].*"])
    ('*.A_log', 'layers.[0-3].*')
    >>> check_globs(["["])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphcheck.errors.UsageError: --allow-fp32 '[': the '[' is never closed: ...
    """
    if isinstance(globs, str):
        globs = (globs,)
    for glob in globs:
        problem = _glob_problem(glob)
        if problem is not None:
            raise UsageError(f"{flag} {glob!r}: {problem}")
    return tuple(globs)


def _glob_problem(glob: object) -> str | None:
    if not isinstance(glob, str) or not glob.strip():
        return "a glob of parameter names is needed, e.g. '*.router.bias'"
    if "," in glob or any(ch.isspace() for ch in glob):
        return "parameter names hold no comma or space; give one glob per --allow-fp32"
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            j = i + 1 + (glob[i + 1 : i + 2] == "!")
            j += glob[j : j + 1] == "]"
            close = glob.find("]", j)
            if close < 0:
                return "the '[' is never closed: close the set ([0-3]) or write [[] for a '['"
            i = close
        i += 1
    return None
