"""How verify, map and plan run: their model options from the flags, the result cache
around the run, and the runs that keep one explorer for the report and its artifacts
(the cut explorer's page, the Model Explorer overlay), so the model exports once."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from graphcheck.console.streams import fresh
from graphcheck.options import MODEL_GROUPS, from_args

__all__ = ["Result", "cached", "explore", "model_options", "op_verdicts", "overlay", "wants_page"]

Result = tuple[str, int, str]  # the rendered report, the exit status, the verdict line


def model_options(args: argparse.Namespace) -> dict:
    """The API keywords of a model run: the model options, and which findings count."""
    return {**from_args(args, *MODEL_GROUPS), "select": args.select, "ignore": args.ignore}


def wants_page(args: argparse.Namespace) -> bool:
    """Whether the run writes the cut explorer's page (``--html FILE``, ``--format html``)."""
    return getattr(args, "html", None) is not None or args.format == "html"


def cached(args: argparse.Namespace, run: Callable[[argparse.Namespace], Result]) -> Result:
    """``run(args)``, or its report from the export cache (:mod:`graphcheck.cache`) when
    the model code and every option are unchanged; a finished run (exit 0 or 1) is
    stored."""
    from graphcheck.cache import report_of, report_record, result_entry

    entry = result_entry(vars(args), cache_dir=args.cache_dir, no_cache=args.no_cache)
    hit = entry.load(report_of, "report") if entry is not None else None
    if hit is not None:
        return hit
    op_verdicts(args.cache_dir, args.no_cache)  # after a miss: a hit imports no torch
    with fresh(args.progress):
        rendered, code, line = run(args)
    if entry is not None:
        entry.depend()
        entry.save(report_record(rendered, code, line), code)
    return rendered, code, line


def overlay(args: argparse.Namespace, judge: Callable) -> Result:
    """The run with ``--model-explorer DIR``: ``judge(explorer)`` gives the result and
    the proof's placement (``None`` for a map); the report and the overlay come from one
    explorer, so one export."""
    from graphcheck import api
    from graphcheck.interop.model_explorer import write_overlay
    from graphcheck.report import headline, render

    explorer = api.Explorer(args.model, **model_options(args))
    result, ctx = judge(explorer)
    write_overlay(args.model_explorer, explorer.program, result, ctx)
    return render(result, args.format), result.exit_code, headline(result)


def explore(args: argparse.Namespace, judge: Callable) -> Result:
    """The run with the cut explorer's page (``--html FILE``, ``--format html``):
    ``judge(explorer)`` gives the result and the plan the page first shows (stages,
    virtual stages, the cost it balances); the report and the page come from one
    explorer, so one export."""
    from graphcheck import api
    from graphcheck.report import headline, render
    from graphcheck.reporters.view import CutView, document

    explorer = api.Explorer(args.model, **model_options(args))
    result, (stages, virtual, metric) = judge(explorer)
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


def op_verdicts(cache_dir: str | None, no_cache: bool) -> None:
    """Custom ops' execution verdicts cached where the command's cache is (or not)."""
    from graphcheck.cache.store import resolve_folder
    from graphcheck.kernels.validation import use_cache

    use_cache(resolve_folder(cache_dir, no_cache=no_cache))
