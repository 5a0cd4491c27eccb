"""The ``graphcheck`` command line.

Exit status: 0 every cut proven, 1 violations found, 2 could not verify (bad
arguments, model not found, factory raised, export failed, or a bug in graphcheck
itself: ``GRAPHCHECK_TRACEBACK=1`` shows its traceback), with one line on
stderr (an export failure adds indented lines below it: the failing line of the
model, the guard, a hint). ``gate``: 0 bytes equal and documents isolated, 1 either fails, 2 could
not run (as above, an op without a CPU implementation, or a random op in the program: GC304).

``--mode train`` (the default) proves and runs the program ``model.train()`` gives,
the one pipeline-parallel training runs; ``--mode eval`` the one ``model.eval()``
gives. The report names it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import signal
import sys
import threading
import warnings

from graphcheck._version import __version__
from graphcheck.errors import GraphcheckError, UsageError
from graphcheck.options import Group, add_arguments, find, from_args

__all__ = ["build_parser", "main"]


def _formats() -> list[str]:
    """The output formats (:func:`graphcheck.report.formats`: a module of
    :mod:`graphcheck.reporters` each), listed without importing torch.

    >>> _formats()
    ['html', 'json', 'markdown', 'sarif', 'text']
    """
    import pkgutil

    from graphcheck import reporters

    return sorted(m.name for m in pkgutil.iter_modules(reporters.__path__) if not m.ispkg)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(message)


def _layout_options(parser: argparse.ArgumentParser) -> None:
    """The layout and model options (:mod:`graphcheck.options`), then the output's."""
    add_arguments(parser, Group.LAYOUT, Group.MODEL)
    parser.add_argument(
        "--format", choices=_formats(), default="text", help="the report's format (default text)"
    )
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show the phases and their times on stderr (default: when stderr is a terminal)",
    )


def _batch_options(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, Group.BATCH)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphcheck", description="Prove pipeline-parallel cuts of an LLM.")
    parser.add_argument("--version", action="version", version=f"graphcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    verify = sub.add_parser("verify", help="prove every cut of a stage plan")
    verify.add_argument(
        "model", metavar="MODEL", help="path/to/file.py:factory, pkg.mod:factory or hf:SPEC"
    )
    plan = verify.add_mutually_exclusive_group()
    plan.add_argument(
        "--cuts",
        metavar="K[,K]",
        help="stage boundaries before these layers (default: the model's pipeline_layer_ranges)",
    )
    plan.add_argument("--stages", type=int, metavar="N", help="an even split into N stages")
    plan.add_argument(
        "--layout",
        metavar="LAYOUT",
        help="a Megatron-style layout: E embedding, t decoder layer, L loss/head, | between "
        "stages, t*4 repeats (e.g. E|t*4|t*4|L)",
    )
    plan.add_argument(
        "--fqns-per-stage",
        metavar="JSON",
        help='module FQNs per stage, torchtitan style: [["model.embed_tokens", '
        '"model.layers.0"], ["model.layers.1", "model.norm", "lm_head"]]',
    )
    _stage_options(verify)
    _layout_options(verify)
    _batch_options(verify)
    _model_explorer_option(verify)
    _cache_options(verify)
    _finding_options(verify)
    cutmap = sub.add_parser("map", help="judge every boundary 0..L: the legal-cut map")
    cutmap.add_argument("model", metavar="MODEL")
    _layout_options(cutmap)
    _batch_options(cutmap)
    _doc_length(cutmap)
    _html_option(cutmap)
    _model_explorer_option(cutmap)
    _cache_options(cutmap)
    _finding_options(cutmap)
    _plan_parser(sub)
    _gate_parser(sub)
    _check_parser(sub)
    rules = sub.add_parser("rules", help="print the rule table, or one rule's whole doc")
    rules.add_argument("code", nargs="?", metavar="CODE", help="a rule code, e.g. GC203")
    return parser


def _stage_options(parser: argparse.ArgumentParser) -> None:
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


def _html_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the cut explorer: one self-contained page (boundaries, layer "
        "kinds, costs, crossing sets, an editable balanced plan)",
    )


def _model_explorer_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model-explorer",
        metavar="DIR",
        help="also write DIR/model.pt2 and Model Explorer node data on it (stages or layers, "
        "crossing values, findings); open with python -m graphcheck.interop.model_explorer DIR",
    )


def _cache_options(parser: argparse.ArgumentParser) -> None:
    from graphcheck.cache.store import add_options

    add_options(parser, "export cache (a re-run on unchanged model code prints the stored report)")


def _finding_options(parser: argparse.ArgumentParser) -> None:
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


def _check_codes(args: argparse.Namespace) -> None:
    """``--select`` and ``--ignore`` checked before any export."""
    if getattr(args, "select", None) is None and getattr(args, "ignore", None) is None:
        return
    from graphcheck.rules.suppress import Suppression

    Suppression.of(args.select, args.ignore)


def _doc_length(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--doc-length",
        type=int,
        default=4096,
        metavar="D",
        help="mean document length attention FLOPs are counted at (default 4096)",
    )


def _plan_parser(sub) -> None:
    plan = sub.add_parser(
        "plan", help="the balanced legal plan: cuts minimising the most expensive stage"
    )
    plan.add_argument("model", metavar="MODEL")
    plan.add_argument("--stages", type=int, required=True, metavar="S", help="pipeline stages")
    plan.add_argument(
        "--virtual", type=int, default=1, metavar="V", help="chunks per stage (interleaved)"
    )
    plan.add_argument(
        "--cost",
        choices=["flops", "params"],
        default="flops",
        help="balance FLOPs per token (default) or parameter bytes",
    )
    _doc_length(plan)
    _html_option(plan)
    _stage_options(plan)
    _layout_options(plan)
    _batch_options(plan)
    _cache_options(plan)
    _finding_options(plan)


def _check_parser(sub) -> None:
    """``check`` and ``lock``: the project configuration and its lock (graphcheck.project)."""
    from graphcheck.project.commands import add_parsers

    add_parsers(sub)


def _gate_parser(sub) -> None:
    gate = sub.add_parser("gate", help="run the split program on CPU and compare the bytes")
    gate.add_argument("model", metavar="MODEL")
    plan = gate.add_mutually_exclusive_group()
    plan.add_argument("--cuts", metavar="K[,K]", help="stage boundaries before these layers")
    plan.add_argument("--stages", type=int, metavar="N", help="an even split into N stages")
    gate.add_argument(
        "--stage-builder",
        metavar="NAME|FILE.py:FN",
        help="the modules each stage process builds (default keep-index; hf: models hf-slice)",
    )
    add_arguments(gate, Group.GATE)
    _layout_options(gate)


def _gate(args: argparse.Namespace, options: dict) -> tuple[str, int, str]:
    from graphcheck.gate.run import gate
    from graphcheck.planning.syntax import parse_cuts
    from graphcheck.report import headline, render

    cuts = parse_cuts(args.cuts) if args.cuts is not None else None
    result = gate(
        args.model, cuts, args.stages, stage_builder=args.stage_builder,
        **from_args(args, Group.GATE), **options,
    )  # fmt: skip
    return render(result, args.format), result.exit_code, headline(result)


def _run(args: argparse.Namespace) -> tuple[str, int, str]:
    from graphcheck import api
    from graphcheck.planning.syntax import parse_cuts, parse_fqns_per_stage
    from graphcheck.report import headline, render

    options = from_args(args, Group.LAYOUT, Group.MODEL)
    if args.command == "gate":
        del options["backward"]  # the gate proves the backward with --train
        return _gate(args, options)
    options.update(from_args(args, Group.BATCH))
    options.update(select=args.select, ignore=args.ignore)
    explore = getattr(args, "html", None) is not None or args.format == "html"
    if getattr(args, "model_explorer", None) is not None and not explore:
        return _overlay(args, options)
    if args.command == "verify":
        cuts = parse_cuts(args.cuts) if args.cuts is not None else None
        fqns = args.fqns_per_stage
        result = api.verify(
            args.model, cuts, args.stages, stage_builder=args.stage_builder,
            require_stage_programs=args.require_stage_programs, pipeline_layout=args.layout,
            fqns_per_stage=parse_fqns_per_stage(fqns) if fqns is not None else None,
            **options,
        )  # fmt: skip
    elif args.html is not None or args.format == "html":
        return _explore(args, options)
    elif args.command == "plan":
        result = api.plan(
            args.model, args.stages, virtual=args.virtual, cost=args.cost,
            doc_length=args.doc_length, stage_builder=args.stage_builder,
            require_stage_programs=args.require_stage_programs, **options,
        )  # fmt: skip
    else:
        result = api.cut_map(args.model, doc_length=args.doc_length, **options)
    return render(result, args.format), result.exit_code, headline(result)


def _overlay(args: argparse.Namespace, options: dict) -> tuple[str, int, str]:
    """``verify`` or ``map`` with ``--model-explorer DIR``: the report and the overlay
    from one explorer, so one export."""
    from graphcheck import api
    from graphcheck.interop.model_explorer import write_overlay
    from graphcheck.planning.syntax import parse_cuts, parse_fqns_per_stage
    from graphcheck.report import headline, render

    explorer = api.Explorer(args.model, **options)
    ctx = None
    if args.command == "verify":
        fqns = args.fqns_per_stage
        cuts = explorer.written_cuts(
            parse_cuts(args.cuts) if args.cuts is not None else None, args.stages, args.layout,
            parse_fqns_per_stage(fqns) if fqns is not None else None,
        )  # fmt: skip
        result = explorer.verify(
            cuts, args.stages, stage_builder=args.stage_builder,
            require_stage_programs=args.require_stage_programs,
        )  # fmt: skip
        ctx = explorer.context(explorer.plan(cuts, args.stages))
    else:
        result = explorer.map(args.doc_length)
    write_overlay(args.model_explorer, explorer.program, result, ctx)
    return render(result, args.format), result.exit_code, headline(result)


def _explore(args: argparse.Namespace, options: dict) -> tuple[str, int, str]:
    """``map`` or ``plan`` with the cut explorer's page (``--html FILE``, ``--format html``):
    the report and the page from one explorer, so one export."""
    from graphcheck import api
    from graphcheck.report import headline, render
    from graphcheck.reporters.view import CutView, document

    explorer = api.Explorer(args.model, **options)
    if args.command == "plan":
        result = explorer.balanced(
            args.stages, virtual=args.virtual, cost=args.cost, doc_length=args.doc_length,
            stage_builder=args.stage_builder, require_stage_programs=args.require_stage_programs,
        )  # fmt: skip
        stages, virtual, metric = args.stages, args.virtual, args.cost
    else:
        result = explorer.map(args.doc_length)
        stages, virtual, metric = 4, 1, "flops"
    data = document(explorer, stages, virtual=virtual, metric=metric, doc_length=args.doc_length)
    view = CutView(data, result.exit_code)
    if getattr(args, "model_explorer", None) is not None:
        from graphcheck.interop.model_explorer import write_overlay

        write_overlay(args.model_explorer, explorer.program, result)
    if args.html is not None:
        with open(args.html, "w", encoding="utf-8") as handle:
            handle.write(render(view, "html"))
    rendered = render(view if args.format == "html" else result, args.format)
    return rendered, result.exit_code, headline(result)


def _check_html(args: argparse.Namespace) -> None:
    """``--format html`` and ``--html FILE`` checked before any export."""
    if args.command in ("check", "lock"):
        return  # graphcheck.project checks its own formats
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


def _cached_run(args: argparse.Namespace) -> tuple[str, int, str]:
    """``_run``, or its report from the export cache (:mod:`graphcheck.cache`) when the
    model code and every option are unchanged; a finished run (exit 0 or 1) is stored."""
    if args.command in ("check", "lock"):  # looks each check up in the cache itself
        from graphcheck.project.commands import run_command

        return run_command(args, fresh=lambda: _fresh(args.progress))
    from graphcheck.cache import report_of, report_record, result_entry

    no_cache = getattr(args, "no_cache", True)  # commands without the flags: no cache
    cache_dir = getattr(args, "cache_dir", None)
    entry = result_entry(vars(args), cache_dir=cache_dir, no_cache=no_cache)
    hit = entry.load(report_of, "report") if entry is not None else None
    if hit is not None:
        return hit
    _op_verdicts(cache_dir, no_cache)  # after a miss: a hit imports no torch
    with _fresh(args.progress):
        rendered, code, line = _run(args)
    if entry is not None:
        entry.depend()
        entry.save(report_record(rendered, code, line), code)
    return rendered, code, line


@contextlib.contextmanager
def _fresh(progress: bool | None):
    """Around a run that builds models: its phases shown, what the model code prints on
    stderr, torch's logging and warnings quiet (cache notes go outside it: they are seen)."""
    from graphcheck.console.progress import shown

    with shown(sys.stderr, progress), _prints_to_stderr(), _quiet():
        yield


def _check_arguments(args: argparse.Namespace) -> None:
    """Every mistake the arguments alone show, in one place before the cache lookup and
    anything heavy: torch loads only when a model is built, so these answer at once (one
    line, exit 2). Mistakes that need the model (a ``--set`` key, ``--stages`` past the
    layer count, a factory missing from its file) are said when it is built."""
    _check_inputs(args)
    if args.command in ("check", "lock"):
        _check_project(args)
        return
    _check_html(args)
    _check_codes(args)
    _check_plan(args)
    _check_build(args)
    _check_model(args)
    _check_builder(args)  # last: it imports the stage builders (torch)


def _check_inputs(args: argparse.Namespace) -> None:
    """The files the run will write, checked before any build or export (a typo costs
    one line, not a whole run)."""
    for flag in ("output", "html"):
        path = getattr(args, flag, None)
        if path is not None:
            _check_writable(f"--{flag.replace('_', '-')}", path)
    if getattr(args, "doc_length", 1) < 1:
        raise UsageError(f"--doc-length {args.doc_length} must be at least 1 (tokens)")


def _check_project(args: argparse.Namespace) -> None:
    """``check``/``lock``: the configuration and ``-k``, read without the checks (torch)."""
    from graphcheck.project.config import load_config

    load_config(args.config).selected(args.pattern)


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
    (``none`` but for ``gate``, which runs the stages)."""
    builder = getattr(args, "stage_builder", None)
    if builder == "none":  # graphcheck.stages.builders.NONE, said without importing torch
        if args.command == "gate":
            raise UsageError(
                "gate runs every stage: --stage-builder none builds none; drop it (the "
                "default builds them) or name a builder"
            )
        return
    if builder is not None:
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


def _error_document(argv: list[str], message: str, detail: tuple[str, ...] = ()) -> None:
    """Under ``--format json`` (or ``sarif``) an error is also a document on stdout, so a
    consumer that parses stdout reads why there is no report."""
    fmt = _asked_format(argv)
    if fmt == "json":
        from graphcheck.reporters.json import error_document

        sys.stdout.write(error_document(message, detail) + "\n")
    elif fmt == "sarif":
        from graphcheck.reporters.sarif import error_log

        sys.stdout.write(error_log(message, detail))


def _asked_format(argv: list[str]) -> str | None:
    """The value of ``--format`` in ``argv`` (``--format json``, ``--format=json``).

    >>> _asked_format(["map", "m.py:f", "--format", "json"]), _asked_format(["--format=sarif"])
    ('json', 'sarif')
    """
    for index, arg in enumerate(argv):
        if arg == "--format" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--format="):
            return arg.partition("=")[2]
    return None


def _rules(code: str | None) -> str:
    from graphcheck import rules

    return rules.table() if code is None else rules.doc(code)


@contextlib.contextmanager
def _quiet():
    """Keep torch's own logging and warnings off the terminal (one line or a report),
    and the warning filters and the torch log level as they were afterwards."""
    logger = logging.getLogger("torch")
    level = logger.level
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        logger.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            logger.setLevel(level)


@contextlib.contextmanager
def _prints_to_stderr():
    """What the model code prints while it is built, exported or run goes to stderr
    (Python's ``print`` and anything written to file descriptor 1, child processes
    included): stdout carries the report alone, so ``--format json`` stays parseable."""
    sys.stdout.flush()
    saved = _dup_stdout()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _dup_stdout() -> int | None:
    """File descriptor 1 pointed at stderr; a copy of the original (``None`` when there is
    no descriptor 1 to move)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    sys.stderr.flush()
    os.dup2(2, 1)
    return saved


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (the program's arguments when ``None``); the
    exit status."""
    code = _main(argv)
    if argv is None:  # the program itself: its run is over, Ctrl-C while it exits is moot
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


class _CtrlC:
    """The SIGINT handler of a run: raises :class:`KeyboardInterrupt` as Python's own does,
    and remembers the press, so that a library catching and dropping the interrupt (a
    broad ``except`` inside a tracer) cannot turn Ctrl-C into a finished run."""

    def __init__(self) -> None:
        self.pressed = False

    def __call__(self, signum, frame) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        """Handle SIGINT while the block runs (in the main thread, where handlers live)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "rules":
            sys.stdout.write(_rules(args.code))
            return 0
        _check_arguments(args)
        with _CtrlC().installed() as ctrl_c:
            rendered, code, line = _cached_run(args)
        if ctrl_c.pressed:  # pressed, and the interrupt swallowed on the way: still Ctrl-C
            raise KeyboardInterrupt
        if args.output:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(rendered)
            sys.stdout.write(f"graphcheck: {line}; report written to {args.output}\n")
        else:
            sys.stdout.write(rendered)
        return code
    except GraphcheckError as err:
        print(f"graphcheck: error: {err}", file=sys.stderr)
        for line in err.detail:
            print(f"  {line}", file=sys.stderr)
        _error_document(argv, str(err), err.detail)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        print("graphcheck: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        print(f"graphcheck: error: {err}", file=sys.stderr)
        _error_document(argv, str(err))
        return 2
    except Exception as err:  # a bug in graphcheck: could not verify, never a pass
        if os.environ.get("GRAPHCHECK_TRACEBACK"):
            raise
        print(
            f"graphcheck: internal error: {type(err).__name__}: {err} (nothing was proven; "
            "GRAPHCHECK_TRACEBACK=1 shows where)",
            file=sys.stderr,
        )
        _error_document(argv, f"internal error: {type(err).__name__}: {err}")
        return 2


if __name__ == "__main__":
    sys.exit(main())


def _op_verdicts(cache_dir: str | None, no_cache: bool) -> None:
    """Custom ops' execution verdicts cached where the command's cache is (or not)."""
    from graphcheck.cache.store import resolve_folder
    from graphcheck.kernels.validation import use_cache

    use_cache(resolve_folder(cache_dir, no_cache=no_cache))
