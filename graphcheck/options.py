"""The model options, each declared once: its flag, configuration key, API keyword,
type, default and help.

The command line (:func:`add_arguments`), the configuration's check keys
(:data:`MODEL_KEYS`, :func:`config_value`), the API keywords a command passes on
(:func:`from_args`) and the reference table in the README (:func:`reference_markdown`)
and the API's keyword parameters (:class:`ModelOptions`, what a session is built with and
what a fresh process rebuilds it from) are all generated from :data:`OPTIONS`; adding an
option is one :class:`Option` here and its use.

>>> find("set").flag, find("set").keyword
('--set', 'settings')
>>> ModelOptions.of(settings={"num_hidden_layers": 2}).settings, ModelOptions().stand_ins
({'num_hidden_layers': 2}, True)
>>> [o.key for o in OPTIONS if o.group is Group.BATCH]
['docs', 'tokens', 'token_multiple']
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from enum import StrEnum
from pathlib import Path

from graphcheck.errors import UsageError

__all__ = [
    "GATE_DOCS",
    "MODEL_GROUPS",
    "MODEL_KEYS",
    "OPTIONS",
    "Form",
    "Group",
    "ModelOptions",
    "Option",
    "add_arguments",
    "config_value",
    "display",
    "file_path",
    "find",
    "from_args",
    "ints",
    "of",
    "parse_docs",
    "reference_markdown",
]


class Group(StrEnum):
    """Where an option shows in ``--help`` (and which commands take it)."""

    LAYOUT = "layout (overrides get_pp_module_config and detection)"
    MODEL = "model building"
    BATCH = "example batch (what the export traces)"
    GATE = "byte gate (graphcheck gate: real weights, executed)"


# The groups a model is built and exported with: configuration keys and ModelOptions fields
MODEL_GROUPS = (Group.LAYOUT, Group.MODEL, Group.BATCH)


class Form(StrEnum):
    """How an option is written on the command line."""

    VALUE = "value"  # --flag VALUE
    LIST = "list"  # --flag VALUE, repeated
    SPLIT = "split"  # --flag A,B
    SWITCH = "switch"  # --flag: true
    NEGATION = "negation"  # --no-flag: false (default true)


# --- readers of configuration values: (value, folder, where) -> value -------------------


def display(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it, else absolute."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


def file_path(text: str, folder: Path, where: str) -> str:
    """``text``, a file relative to ``folder``, as :func:`display` shows it."""
    path = folder / os.path.expanduser(text)
    if not path.is_file():
        raise UsageError(f"{where}: {text}: no such file (relative paths are relative to {folder})")
    return display(path.resolve())


def ints(value, where: str) -> list[int]:
    ok = isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)
    if not ok:
        raise UsageError(f"{where} = {value!r}: give non-negative integers, e.g. [2, 4]")
    return value


def of(*kinds: type, what: str) -> Callable:
    """A reader accepting values of ``kinds`` (``what`` names them in the error)."""

    def check(value, folder: Path, where: str):
        if isinstance(value, bool) and bool not in kinds:
            raise UsageError(f"{where} = {value!r} is not {what}")
        if not isinstance(value, kinds):
            raise UsageError(f"{where} = {value!r} is not {what}")
        return value

    return check


def _strings(value, folder: Path, where: str) -> list[str]:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where} = {value!r} is not a list of strings")
    return value


def _docs(value, folder: Path, where: str):
    if isinstance(value, list):
        return tuple(ints(value, where))
    return of(int, what="a count or a list of document lengths")(value, folder, where)


def _choice(*choices: str) -> Callable:
    def check(value, folder: Path, where: str):
        if value not in choices:
            raise UsageError(f"{where} = {value!r}: use one of {', '.join(choices)}")
        return value

    return check


def _file(value, folder: Path, where: str) -> str:
    return file_path(of(str, what="a path")(value, folder, where), folder, where)


def _settings(values: list[str]) -> dict:
    """``--set KEY=VALUE`` flags as the API's settings (``None``: none given)."""
    from graphcheck.model.hf import parse_settings

    return parse_settings(values) or None


def _docs_flag(text: str | None) -> int | tuple[int, ...] | None:
    """``--docs``: ``"4"`` a count, ``"30,34"`` (or ``"30,"``) lengths."""
    if text is None:
        return None
    try:
        parts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parts = []
    if not parts:
        raise UsageError(f"--docs {text!r} is not a count or a comma-separated list of lengths")
    return parts[0] if "," not in text else tuple(parts)


def _run_mode(in_process: bool) -> str:
    """``--in-process``: the gate's run mode (graphcheck.results.gate.RunMode)."""
    return "graph" if in_process else "processes"


GATE_DOCS = (61, 17, 94, 38, 5, 41)  # the gate's batch: T = 256 tokens in N = 6 documents


def parse_docs(text: str | None) -> tuple[int, ...]:
    """The gate's ``--docs``: ``"40,7,3"`` -> ``(40, 7, 3)`` (``None``: :data:`GATE_DOCS`);
    raises :class:`UsageError` on anything else.

    >>> parse_docs("40,7"), parse_docs(None)[:2]
    ((40, 7), (61, 17))
    """
    if text is None:
        return GATE_DOCS
    try:
        docs = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        docs = ()
    if not docs or min(docs) < 1:
        raise UsageError(f"--docs {text!r} is not a comma-separated list of positive lengths")
    return docs


_BOOL = of(bool, what="true or false")
_DTYPES = ("bfloat16", "float32")
_MODES = ("train", "eval")


# --- the declarations ------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option: ``key`` is its configuration key, ``flag`` its command-line flag,
    ``api`` its keyword in the API (default: the key); ``read`` checks a configuration
    value; ``cli`` converts the command line's value (``type=``)."""

    key: str
    flag: str
    group: Group
    help: str
    read: Callable
    form: Form = Form.VALUE
    api: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    default: object = None
    cli: Callable | None = None
    parse: Callable | None = None  # the parsed flag's value -> the API's
    annotation: str = ""  # the API keyword's type (default: from the form)
    exclusive: str = ""  # options sharing a name here are mutually exclusive flags

    @property
    def configurable(self) -> bool:
        """Whether the project configuration takes it (a check key): the model options."""
        return self.group in MODEL_GROUPS

    @property
    def keyword(self) -> str:
        """The API keyword (``verify(model, settings=...)``)."""
        return self.api or self.key

    @property
    def api_default(self):
        """The API keyword's default: what the command line gives when the flag is absent."""
        if self.parse is not None:  # the API takes the parsed value, absent: the default
            return self.default
        defaults = {Form.SWITCH: False, Form.NEGATION: True, Form.LIST: ()}
        return defaults.get(self.form, self.default)

    @property
    def api_type(self) -> str:
        """The API keyword's type, as an annotation."""
        forms = {Form.SWITCH: "bool", Form.NEGATION: "bool", Form.LIST: "Sequence[str]"}
        return (
            self.annotation
            or forms.get(self.form)
            or ("Sequence[str] | None" if self.form is Form.SPLIT else "str | None")
        )

    def add_to(self, group) -> None:
        """Add the flag to an argparse parser or group."""
        kwargs: dict = {"dest": self.keyword, "help": self.help}
        if self.form is Form.SWITCH:
            kwargs.update(action="store_true")
        elif self.form is Form.NEGATION:
            kwargs.update(action="store_false")
        else:
            kwargs.update(metavar=self.metavar, default=self.default)
            if self.choices:
                kwargs.update(choices=list(self.choices), metavar=None)
            if self.cli is not None:
                kwargs.update(type=self.cli)
            if self.form is Form.LIST:
                kwargs.update(action="append", default=[])
        group.add_argument(self.flag, **kwargs)

    def value(self, args: argparse.Namespace):
        """The API value of the flag as parsed."""
        value = getattr(args, self.keyword)
        if self.form is Form.SPLIT:
            return [part for part in value.split(",") if part] if value else None
        if self.parse is not None:
            return self.parse(value)
        return tuple(value) if self.form is Form.LIST else value


OPTIONS: tuple[Option, ...] = (
    Option("layers", "--layers", Group.LAYOUT, "layer container, e.g. model.layers",
           of(str, what="a module path, e.g. model.layers"), metavar="PREFIX"),
    Option("inputs", "--inputs", Group.LAYOUT, "first-stage modules", _strings,
           Form.SPLIT, metavar="FQN[,FQN]"),
    Option("outputs", "--outputs", Group.LAYOUT, "last-stage modules", _strings,
           Form.SPLIT, metavar="FQN[,FQN]"),
    Option("boundary_state", "--boundary-state", Group.LAYOUT,
           "the state each cut carries when it is not the residual ([1, T, H] or [T, H]): "
           '\'{"rank": 4, "dtype": "bfloat16", "shape_suffix": [4, 64], "state": "NAME"}\'',
           of(str, dict, what="a JSON string or a table"), metavar="JSON",
           annotation="str | Mapping | BoundaryState | None"),
    Option("strict", "--strict", Group.MODEL, "export with strict=True", _BOOL, Form.SWITCH),
    Option("allow_fp32", "--allow-fp32", Group.MODEL,
           "parameters allowed to stay fp32 (added to *.A_log, *.dt_bias)", _strings,
           Form.LIST, metavar="GLOB"),
    Option("set", "--set", Group.MODEL,
           "override a config key of an hf: model (VALUE parsed as JSON if it parses)",
           of(dict, what="a table of config keys, e.g. { num_hidden_layers = 4 }"),
           Form.LIST, api="settings", metavar="KEY=VALUE", parse=_settings,
           annotation="Mapping[str, object] | None"),
    Option("kernels", "--kernels", Group.MODEL, "kernel stand-ins: a file with STAND_INS",
           _file, metavar="FILE.py"),
    Option("stand_ins", "--no-stand-ins", Group.MODEL,
           "export the model's own kernel code (no built-in stand-ins)", _BOOL,
           Form.NEGATION),
    Option("dtype", "--dtype", Group.MODEL,
           "the default dtype the factory runs under: bfloat16 (default), or float32 (the "
           "model's own), then cast to bf16 but for its declared fp32 carve-outs",
           _choice(*_DTYPES), choices=_DTYPES, default="bfloat16", annotation="str"),
    Option("mode", "--mode", Group.MODEL,
           "the program to prove and run: model.train(), what pipeline-parallel training "
           "runs (default), or model.eval()",
           _choice(*_MODES), api="program_mode", choices=_MODES, default="train",
           annotation="str"),
    Option("token_local", "--token-local", Group.MODEL,
           "declare a custom op token-local (each token's rows read only its own rows); "
           "held to it by executing the op (as a kernels file's TOKEN_LOCAL)", _strings,
           Form.LIST, api="token_local_ops", metavar="NS::OP"),
    Option("backward", "--backward", Group.MODEL,
           "prove the backward program too: the training step's gradients keep to their "
           "documents (train mode; costs several times the export)", _BOOL, Form.SWITCH),
    Option("inputs_from", "--inputs-from", Group.MODEL,
           "the input convention of the model's forward: transformers (input_ids, "
           "position_ids, cu_seq_lens_q/k, max_length_q/k) or torchtitan (tokens, positions, "
           "masks from model.get_attention_masks) (default: detected from its signature)",
           of(str, what="an input convention name, e.g. torchtitan"), metavar="NAME"),
    Option("docs", "--docs", Group.BATCH,
           "documents: a count (split over --tokens) or their lengths (default 7,12,10)",
           _docs, metavar="N|N,N[,N]", parse=_docs_flag,
           annotation="int | Sequence[int] | None"),
    Option("tokens", "--tokens", Group.BATCH, "tokens in the batch (T)",
           of(int, what="an integer"), metavar="T", cli=int, annotation="int | None"),
    Option("token_multiple", "--token-multiple", Group.BATCH,
           "export T as a multiple of K: prove for every T that is one",
           of(int, what="an integer"), metavar="K", cli=int, annotation="int | None"),
    Option("seed", "--seed", Group.GATE, "weights and tokens (default 0)",
           of(int, what="an integer"), metavar="N", cli=int, default=0, annotation="int"),
    Option("train", "--train", Group.GATE,
           "also one SGD step on both; compare parameters", _BOOL, Form.SWITCH),
    Option("in_process", "--in-process", Group.GATE,
           "secondary mode: the exported graph partitioned by the proof, in this process",
           _BOOL, Form.SWITCH, api="mode", parse=_run_mode, annotation="str"),
    Option("gate_docs", "--docs", Group.GATE, "document lengths (default 61,17,94,38,5,41)",
           _docs, api="docs", metavar="N[,N]", parse=parse_docs,
           annotation="Sequence[int]"),
    Option("head", "--head", Group.GATE,
           "compare the logits of this head module applied to the hidden states the "
           "forward returns (e.g. lm_head)", of(str, what="a module path"), metavar="FQN",
           exclusive="compared"),
    Option("output_fqn", "--output-fqn", Group.GATE,
           "compare the output of this module (e.g. model.norm)",
           of(str, what="a module path"), metavar="FQN", exclusive="compared"),
    Option("init", "--init", Group.GATE,
           "the model's init method, called after the factory (default: the first of "
           "init_weights, init_states, reset_parameters it has; none: no init)",
           of(str, what="a method name"), metavar="METHOD"),
)  # fmt: skip

MODEL_KEYS: tuple[str, ...] = tuple(sorted(o.key for o in OPTIONS if o.configurable))


def _of(cls, **keywords):
    """The options of ``keywords`` (API keywords), the others at their defaults; an
    unknown keyword is a :class:`UsageError` naming the nearest one."""
    known = [f for f in cls.__dataclass_fields__]
    for name in keywords:
        if name not in known:
            near = difflib.get_close_matches(name, known, 1)
            hint = f"; did you mean {near[0]}?" if near else f"; the options are {', '.join(known)}"
            raise UsageError(f"unknown model option {name!r}{hint}")
    return cls(**keywords)


def _keywords(self) -> dict:
    """The options as API keywords (``Session(model, **options.keywords())``)."""
    return {name: getattr(self, name) for name in self.__dataclass_fields__}


# The model options as one value: a field per option (its API keyword, type and default),
# generated from OPTIONS. A session is built from it and a fresh process rebuilds the model
# from it (gate.runner.Recipe, stages.build.StageRequest): no record spells the options.
ModelOptions = make_dataclass(
    "ModelOptions",
    [(o.keyword, o.api_type, field(default=o.api_default)) for o in OPTIONS if o.configurable],
    frozen=True,
    namespace={
        "__doc__": "Every model option, one field each (generated from :data:`OPTIONS`).",
        "of": classmethod(_of),
        "keywords": _keywords,
        "__module__": __name__,  # pickles by name: a fresh process reads it back
    },
)


def find(key: str) -> Option:
    """The option of configuration key ``key``."""
    return next(o for o in OPTIONS if o.key == key)


def add_arguments(parser: argparse.ArgumentParser, *groups: Group) -> None:
    """The flags of ``groups``, each group under its title (options that share an
    ``exclusive`` name in one mutually exclusive group of it)."""
    for group in groups:
        section = parser.add_argument_group(str(group))
        exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
        for option in OPTIONS:
            if option.group is not group:
                continue
            if option.exclusive and option.exclusive not in exclusive:
                exclusive[option.exclusive] = section.add_mutually_exclusive_group()
            option.add_to(exclusive.get(option.exclusive, section))


def from_args(args: argparse.Namespace, *groups: Group) -> dict:
    """The API keywords of ``groups``' options, from parsed ``args``."""
    return {o.keyword: o.value(args) for o in OPTIONS if o.group in groups}


def config_value(key: str, value, folder: Path, where: str):
    """A configuration value of option ``key``, checked (paths resolved from ``folder``):
    returns the API keyword and the value."""
    option = find(key)
    return option.keyword, option.read(value, folder, f"{where}: {key}")


def reference_markdown() -> str:
    """The README's table of the options: flag, configuration key (the model options'),
    API keyword, help."""
    lines = [
        "| flag | configuration key | API keyword | what it does |",
        "|---|---|---|---|",
    ]
    for option in OPTIONS:
        key = f"`{option.key}`" if option.configurable else "-"
        flag = option.flag + (f" {option.metavar}" if option.metavar else "")
        if option.choices:
            flag += " {" + ",".join(option.choices) + "}"
        flag, text = flag.replace("|", "\\|"), option.help.replace("|", "\\|")
        lines.append(f"| `{flag}` | {key} | `{option.keyword}` | {text} |")
    return "\n".join(lines) + "\n"
