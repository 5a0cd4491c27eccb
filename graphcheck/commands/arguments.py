"""The command line's arguments: the groups of flags the commands share, and every
mistake the arguments alone show, checked before the cache lookup and anything heavy
(torch loads only when a model is built, so these answer at once: one line, exit 2).

The model options' flags are generated from their declarations
(:mod:`graphcheck.options`); the flags here are the commands' own.
"""

from __future__ import annotations

import argparse
import os

from graphcheck.errors import GraphcheckError, UsageError
from graphcheck.options import Group, add_arguments, find

__all__ = [
    "Parser", "batch_options", "cache_options", "check_arguments", "check_outputs",
    "doc_length_option",
    "finding_options", "formats", "html_option", "layout_options", "model_explorer_option",
    "stage_options",
]  # fmt: skip


def formats() -> list[str]:
    """The output formats (:func:`graphcheck.report.formats`: a module of
    :mod:`graphcheck.reporters` each), listed without importing torch.

    >>> formats()
    ['html', 'json', 'markdown', 'sarif', 'text']
    """
    import pkgutil

    from graphcheck import reporters

    return sorted(m.name for m in pkgutil.iter_modules(reporters.__path__) if not m.ispkg)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(message)


def layout_options(parser: argparse.ArgumentParser) -> None:
    """The layout and model options (:mod:`graphcheck.options`), then the output's."""
    add_arguments(parser, Group.LAYOUT, Group.MODEL)
    parser.add_argument(
        "--format", choices=formats(), default="text", help="the report's format (default text)"
    )
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show the phases and their times on stderr (default: when stderr is a terminal)",
    )


def batch_options(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, Group.BATCH)


def stage_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "stage programs (each stage built as a rank builds it, compared with the uncut program)"
    )
    group.add_argument(
        "--stage-builder",
        metavar="NAME|FILE.py:FN",
        help="the builder of the stages: keep-index, moduledict, rebuild, hf-slice, "
        "hf-rebuild, torchtitan or FILE.py:FN (default: hf-slice for hf: models, torchtitan "
        "for torchtitan models, keep-index for the rest, not proven when their stages do "
        "not export); none: no stage programs",
    )
    group.add_argument(
        "--require-stage-programs",
        action="store_true",
        help="fail (exit 1) when the stage programs are not proven",
    )


def html_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the cut explorer: one self-contained page (boundaries, layer "
        "kinds, costs, crossing sets, an editable balanced plan)",
    )


def model_explorer_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-explorer",
        metavar="DIR",
        help="also write DIR/model.pt2 and Model Explorer node data on it (stages or layers, "
        "crossing values, findings); open with python -m graphcheck.interop.model_explorer DIR",
    )


def cache_options(parser: argparse.ArgumentParser) -> None:
    from graphcheck.cache.store import add_options

    add_options(parser, "export cache (a re-run on unchanged model code prints the stored report)")


def finding_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "findings (ruff style: a code, or a prefix for its family: GC5 is GC5xx; ignored "
        "findings are listed, never dropped)"
    )
    group.add_argument(
        "--select",
        metavar="CODE[,CODE]",
        action="append",
        help="report only these codes (default: all)",
    )
    group.add_argument(
        "--ignore",
        metavar="CODE[,CODE]",
        action="append",
        help="keep these codes out of the verdict (as # graphcheck: ignore[CODE] does on a line)",
    )


def doc_length_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--doc-length",
        type=int,
        default=4096,
        metavar="D",
        help="mean document length attention FLOPs are counted at (default 4096)",
    )


def check_outputs(args: argparse.Namespace) -> None:
    """The files the run will write, checked before any build or export (a typo costs
    one line, not a whole run)."""
    for flag in ("output", "html"):
        path = getattr(args, flag, None)
        if path is not None:
            _check_writable(f"--{flag.replace('_', '-')}", path)


def check_arguments(args: argparse.Namespace) -> None:
    """Every mistake the arguments of a model run (verify, map, plan, gate) alone show,
    in one place before the cache lookup and anything heavy: torch loads only when a
    model is built, so these answer at once (one line, exit 2). Mistakes that need the
    model (a ``--set`` key, ``--stages`` past the layer count, a factory missing from its
    file) are said when it is built."""
    check_outputs(args)
    if getattr(args, "doc_length", 1) < 1:
        raise UsageError(f"--doc-length {args.doc_length} must be at least 1 (tokens)")
    _check_html(args)
    _check_codes(args)
    _check_plan(args)
    _check_build(args)
    _check_model(args)
    _check_builder(args)  # last: it imports the stage builders (torch)


def _check_html(args: argparse.Namespace) -> None:
    """``--format html`` and ``--html FILE`` checked before any export."""
    if args.format == "html" and args.command not in ("map", "plan"):
        raise UsageError(
            f"--format html shows the cut explorer: use it with graphcheck map or plan, "
            f"not {args.command}"
        )
    from graphcheck.report import renders

    if not renders(args.format, args.command):
        raise UsageError(
            f"--format {args.format} does not render graphcheck {args.command} results: "
            f"use --format text or json with {args.command}"
        )
    folder = os.path.dirname(os.path.abspath(args.html)) if getattr(args, "html", None) else None
    if folder is not None and not os.path.isdir(folder):
        raise UsageError(f"--html {args.html}: the folder {folder} does not exist; create it first")
    if getattr(args, "model_explorer", None) is not None:
        from graphcheck.interop.model_explorer import check_folder

        check_folder(args.model_explorer)


def _check_codes(args: argparse.Namespace) -> None:
    """``--select`` and ``--ignore`` checked before any export."""
    if getattr(args, "select", None) is None and getattr(args, "ignore", None) is None:
        return
    from graphcheck.rules.suppress import Suppression

    Suppression.of(args.select, args.ignore)


def _check_plan(args: argparse.Namespace) -> None:
    """The syntax of ``--cuts``, ``--layout`` and ``--fqns-per-stage`` (GC101)."""
    from graphcheck.planning import syntax as plan_syntax

    if getattr(args, "cuts", None) is not None:
        plan_syntax.parse_cuts(args.cuts)
    if getattr(args, "layout", None) is not None:
        plan_syntax.layout_counts(args.layout)
    if getattr(args, "fqns_per_stage", None) is not None:
        plan_syntax.parse_fqns_per_stage(args.fqns_per_stage)


def _check_build(args: argparse.Namespace) -> None:
    """``--set KEY=VALUE``, ``--allow-fp32``, ``--inputs-from``, the ``--kernels`` file and
    the example batch
    (``--docs``, ``--tokens``, ``--token-multiple``)."""
    from graphcheck.model.conventions import check_name
    from graphcheck.model.hf import parse_settings
    from graphcheck.model.spec import check_globs, require_file
    from graphcheck.varlen import example_batch

    parse_settings(args.settings)
    check_globs(args.allow_fp32)
    check_name(getattr(args, "inputs_from", None))
    if args.kernels is not None:
        require_file(args.kernels, "kernels file")
    if hasattr(args, "tokens"):
        example_batch(find("docs").value(args), args.tokens, args.token_multiple)


def _check_model(args: argparse.Namespace) -> None:
    """``MODEL`` (:func:`graphcheck.model.spec.check_spec`), after the flags: given a bad
    flag too, the flag's mistake is said, as when the model is built. ``--boundary-state``
    (its dtype check imports torch) is checked here only then; a good ``MODEL`` has it
    checked before the build."""
    from graphcheck.model.spec import check_spec

    try:
        check_spec(args.model)
    except GraphcheckError:
        if args.boundary_state is not None:
            from graphcheck.model.boundary import parse_boundary_state

            parse_boundary_state(args.boundary_state)
        raise


def _check_builder(args: argparse.Namespace) -> None:
    """``--stage-builder``: a builtin name, or a function its file or module holds
    (``none``: no stage programs, said without importing torch)."""
    builder = getattr(args, "stage_builder", None)
    if builder is not None and builder != "none":
        from graphcheck.stages.builders import check_builder

        check_builder(builder)


def _check_writable(flag: str, path: str) -> None:
    """``path`` can be written: not a folder, in a folder that exists and is writable."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a folder; give a file name in it")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"{flag} {path}: {folder} is a file, not a folder")
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable; choose a path you can write")
