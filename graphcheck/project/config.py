"""The project configuration: ``[tool.graphcheck]`` in ``pyproject.toml``, or ``graphcheck.toml``.

Found the way ruff finds its own: from the working directory upwards, the first folder
holding a ``graphcheck.toml`` (its keys at the top level) or a ``pyproject.toml`` with a
``[tool.graphcheck]`` table; ``--config FILE`` names the file instead. A relative path in
it (a model file, ``hf:`` config, kernels file, stage builder file) is relative to the
file's folder, and ``graphcheck.lock`` lives next to it::

    [tool.graphcheck]
    ignore = ["GC501"]                         # rule codes (or prefixes: "GC5")
    require_stage_programs = true              # the default: unproven stage programs fail

    [[tool.graphcheck.checks]]
    name = "llama"                             # optional: the model spec by default
    model = "hf:llama"
    set = { num_hidden_layers = 4 }            # --set
    stages = [2, 4]                            # two plans: an even split into 2, into 4

    [[tool.graphcheck.checks]]
    model = "models/decoder.py:small"
    cuts = [[2, 4], [3]]                       # one plan per list (or cuts = [2, 4])
    layout = "E|t*3|t*3|L"                     # a Megatron-style layout string
    kernels = "models/kernels.py"
    stage_builder = "keep-index"

A check's keys are the command line's options, spelled as the Python API spells them:
``set``, ``kernels``, ``stand_ins``, ``inputs_from``, ``stage_builder``, ``allow_fp32``,
``dtype``, ``mode``, ``boundary_state``, ``layers``, ``inputs``, ``outputs``, ``docs``, ``tokens``,
``token_multiple``, ``strict``; the plans are ``cuts``, ``stages`` and ``layout`` (each one
plan or a list of them; none: the ``pipeline_layer_ranges`` the model declares). ``select``
and ``ignore`` list rule codes, at the top level and per check. ``require_stage_programs``
(top level or per check, the check's own winning; default true, unlike ``verify``) fails a
plan whose stage programs are not proven (no stage builder could be had for the model, or
``stage_builder = "none"``). Every key and value is
checked before any model is built: an unknown key is a :class:`UsageError` naming the
nearest known one.

>>> nearest("stgaes", CHECK_KEYS)
"; did you mean 'stages'?"
>>> Plan(PlanKind.CUTS, (2, 4)).name, Plan(PlanKind.LAYOUT, "E|t*2|L").name
('cuts 2,4', 'layout E|t*2|L')
"""

from __future__ import annotations

import difflib
import fnmatch
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from graphcheck.errors import UsageError
from graphcheck.model.spec import ModelSpec
from graphcheck.options import MODEL_KEYS, config_value
from graphcheck.options import file_path as _path
from graphcheck.options import ints as _ints

__all__ = [
    "CHECK_KEYS",
    "CHECK_KEY_HELP",
    "LOCK_NAME",
    "TOP_KEYS",
    "Check",
    "Config",
    "Plan",
    "PlanKind",
    "find_config",
    "load_config",
    "nearest",
]

LOCK_NAME = "graphcheck.lock"
TOP_KEYS = ("checks", "ignore", "require_stage_programs", "select")
PLAN_KEYS = ("cuts", "layout", "stages")
# a check's own keys (the model options' are declared in graphcheck.options), with what
# each does: the configuration reference page is generated from these
CHECK_KEY_HELP = {
    "model": "the MODEL spec: path/to/file.py:factory, package.module:factory or hf:SPEC",
    "name": "the check's name (-k selects by it; default: the model spec)",
    "cuts": "one plan, or a list of plans, as stage boundaries before these layers",
    "stages": "one plan, or a list of plans, as an even split into N stages",
    "layout": "one plan, or a list of plans, as a Megatron-style layout string (E|t*4|t*4|L)",
    "stage_builder": "the builder of the stage programs (as --stage-builder)",
    "require_stage_programs": "fail when the stage programs are not proven",
    "select": "report only these rule codes (also at the top level, for every check)",
    "ignore": "keep these rule codes out of the verdict (also at the top level)",
}
CHECK_KEYS = (
    "ignore", "model", "name", "require_stage_programs", "select", "stage_builder",
    *MODEL_KEYS, *PLAN_KEYS,
)  # fmt: skip


class PlanKind(StrEnum):
    """How a plan is written: cut positions, an even split, a layout string, or none
    (the model's own ``pipeline_layer_ranges``)."""

    CUTS = "cuts"
    STAGES = "stages"
    LAYOUT = "layout"
    DECLARED = "declared"


@dataclass(frozen=True)
class Plan:
    """One stage plan of a check."""

    kind: PlanKind
    value: tuple[int, ...] | int | str | None = None

    @property
    def name(self) -> str:
        """``cuts 2,4``, ``stages 4``, ``layout E|t*4|L`` or ``declared``."""
        if self.kind is PlanKind.DECLARED:
            return "declared"
        text = ",".join(map(str, self.value)) if self.kind is PlanKind.CUTS else self.value
        return f"{self.kind} {text}"

    def arguments(self) -> dict:
        """The keywords of :meth:`graphcheck.api.Explorer.written_cuts` for this plan."""
        return {
            "cuts": list(self.value) if self.kind is PlanKind.CUTS else None,
            "stages": self.value if self.kind is PlanKind.STAGES else None,
            "pipeline_layout": self.value if self.kind is PlanKind.LAYOUT else None,
        }


@dataclass(frozen=True)
class Check:
    """A model, its build options (API keywords), its stage builder and plans."""

    name: str
    model: str
    options: dict = field(default_factory=dict)
    stage_builder: str | None = None
    plans: tuple[Plan, ...] = ()
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    selectors_from: str | None = None  # "[tool.graphcheck]" or the file's name: the report says it
    require_stage_programs: bool = True  # a plan whose stage programs are not proven fails

    def matches(self, pattern: str) -> bool:
        """``-k PATTERN``: a substring of, or a glob matching, the name or the model spec."""
        return any(pattern in text or fnmatch.fnmatchcase(text, pattern) for text in self.keys)

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.name, self.model)


@dataclass(frozen=True)
class Config:
    """The checks of a configuration file."""

    path: Path
    checks: tuple[Check, ...]

    @property
    def lock_path(self) -> Path:
        return self.path.parent / LOCK_NAME

    def selected(self, pattern: str | None) -> tuple[Check, ...]:
        """The checks ``-k PATTERN`` selects (all without one); none is a usage error."""
        if pattern is None:
            return self.checks
        found = tuple(c for c in self.checks if c.matches(pattern))
        if not found:
            names = ", ".join(c.name for c in self.checks)
            raise UsageError(f"-k {pattern!r} selects no check of {self.path.name}: {names}")
        return found


def nearest(key: str, known) -> str:
    """``; did you mean 'KEY'?`` for the nearest of ``known``, or the list of them."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"


def find_config(start: Path | None = None) -> Path:
    """The configuration file governing ``start`` (the working directory)."""
    folder = (start or Path.cwd()).resolve()
    for here in (folder, *folder.parents):
        if (here / "graphcheck.toml").is_file():
            return here / "graphcheck.toml"
        pyproject = here / "pyproject.toml"
        if pyproject.is_file() and "graphcheck" in _read(pyproject).get("tool", {}):
            return pyproject
    raise UsageError(
        f"no graphcheck.toml or pyproject.toml with [tool.graphcheck] in {folder} or a parent "
        "folder: write one (README: graphcheck in CI) or pass --config FILE"
    )


def _read(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read it: {err.strerror}") from None


def load_config(path: str | Path | None = None) -> Config:
    """The validated configuration at ``path`` (found from the working directory when
    ``None``); a :class:`UsageError` for anything wrong in it, before any export."""
    if path is not None and not Path(path).is_file():
        raise UsageError(f"--config {path}: no such file")
    file = Path(path).resolve() if path is not None else find_config()
    data = _read(file)
    origin = file.name  # what a finding ignored by the configuration is labelled by
    if file.name == "pyproject.toml" or "tool" in data:
        data = data.get("tool", {}).get("graphcheck")
        if data is None:
            raise UsageError(f"{file}: no [tool.graphcheck] table")
        origin = "[tool.graphcheck]"
    where = file.name
    _known(data, TOP_KEYS, where)
    select = _codes(data.get("select", []), f"{where}: select")
    ignore = _codes(data.get("ignore", []), f"{where}: ignore")
    require = _flag(data, "require_stage_programs", True, where)
    tables = data.get("checks")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise UsageError(f"{where}: give the models to check as [[checks]] tables, one per model")
    checks = tuple(
        _check(t, file.parent, f"{where}: checks[{i}]", (select, ignore, origin), require)
        for i, t in enumerate(tables)
    )
    names = [c.name for c in checks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{where}: two checks are named {twice[0]!r}; give each a unique name")
    return Config(file, checks)


def _known(table: dict, known, where: str) -> None:
    for key in table:
        if key not in known:
            raise UsageError(f"{where}: unknown key {key!r}{nearest(key, known)}")


def _flag(table: dict, key: str, default: bool, where: str) -> bool:
    """The boolean ``table[key]``, ``default`` when absent."""
    return _typed(table, key, bool, where) if key in table else default


def _check(table: dict, folder: Path, where: str, selectors: tuple, require: bool) -> Check:
    """The check of ``table``; ``selectors``: the top level's select, ignore and their
    origin (the check's own lists are added to them); ``require``: the top level's
    ``require_stage_programs`` (the check's own wins)."""
    select, ignore, origin = selectors
    _known(table, CHECK_KEYS, where)
    if "model" not in table:
        raise UsageError(f"{where}: no model: give model = 'path/to/file.py:factory' or 'hf:...'")
    model = _model(_typed(table, "model", str, where), folder, where)
    options = {}
    for key in MODEL_KEYS:
        if key in table:
            keyword, value = config_value(key, table[key], folder, where)
            options[keyword] = value
    builder = table.get("stage_builder")
    if builder is not None:
        builder = _builder(_typed(table, "stage_builder", str, where), folder, where)
    name = _typed(table, "name", str, where) if "name" in table else model
    own_select = _codes(table.get("select", []), f"{where}: select")
    own_ignore = _codes(table.get("ignore", []), f"{where}: ignore")
    return Check(
        name, model, options, builder, _plans(table, where),
        select + own_select, ignore + own_ignore, origin,
        _flag(table, "require_stage_programs", require, where),
    )  # fmt: skip


def _typed(table: dict, key: str, kind: type, where: str):
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{where}: {key} = {value!r} is not a {kind.__name__}")
    return value


def _model(spec: str, folder: Path, where: str) -> str:
    """The spec with its file (a ``.py`` file, an ``hf:`` config.json) resolved."""
    model = ModelSpec.of(spec)
    if not model.valid:
        raise UsageError(
            f"{where}: model {spec!r} is not 'path/to/file.py:factory', "
            "'package.module:factory' or 'hf:SPEC'"
        )
    resolvable = model.file is not None and model.file.endswith(".json" if model.hf else ".py")
    return model.with_target(_path(model.file, folder, where)) if resolvable else spec


def _builder(text: str, folder: Path, where: str) -> str:
    """A builtin stage builder's name or ``file.py:FN`` (its path resolved), checked now;
    ``none`` (no stage programs) without importing the builders (torch)."""
    if text == "none":
        return text
    from graphcheck.stages.builders import check_builder

    target, sep, fn = text.rpartition(":")
    if sep and target.endswith(".py"):
        text = f"{_path(target, folder, where + ': stage_builder')}:{fn}"
    try:
        check_builder(text)
    except UsageError as err:
        raise UsageError(f"{where}: stage_builder: {err}") from None
    return text


def _codes(value, where: str) -> tuple[str, ...]:
    """Rule codes or code prefixes (``GC5``), each checked against the rule table."""
    from graphcheck.rules import INFO  # the table read from source: no torch

    known = [rule.code for rule in INFO]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where} = {value!r} is not a list of rule codes")
    for code in value:
        if not any(k.startswith(code.upper()) for k in known) or len(code) < 2:
            raise UsageError(f"{where}: no rule code {code!r}{nearest(code.upper(), known)}")
    return tuple(code.upper() for code in value)


def _plans(table: dict, where: str) -> tuple[Plan, ...]:
    plans: list[Plan] = []
    if "cuts" in table:
        cuts = table["cuts"]
        lists = cuts if cuts and all(isinstance(c, list) for c in cuts) else [cuts]
        for each in lists:
            plans.append(Plan(PlanKind.CUTS, tuple(_ints(each, f"{where}: cuts"))))
    if "stages" in table:
        stages = table["stages"]
        for n in _ints(stages if isinstance(stages, list) else [stages], f"{where}: stages"):
            plans.append(Plan(PlanKind.STAGES, n))
    if "layout" in table:
        layouts = table["layout"] if isinstance(table["layout"], list) else [table["layout"]]
        for text in layouts:
            if not isinstance(text, str) or not text:
                raise UsageError(f"{where}: layout {text!r} is not a layout string (E|t*4|L)")
            plans.append(Plan(PlanKind.LAYOUT, text))
    return tuple(plans) or (Plan(PlanKind.DECLARED),)
