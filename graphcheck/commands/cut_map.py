"""``graphcheck map MODEL``: judge every boundary 0..L, the legal-cut map."""

from __future__ import annotations

import argparse

from graphcheck.commands import arguments as flags
from graphcheck.commands.runs import Result, cached, explore, model_options, overlay, wants_page

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "map"


def add_parser(sub) -> None:
    cutmap = sub.add_parser(NAME, help="judge every boundary 0..L: the legal-cut map")
    cutmap.add_argument("model", metavar="MODEL")
    flags.layout_options(cutmap)
    flags.batch_options(cutmap)
    flags.doc_length_option(cutmap)
    flags.html_option(cutmap)
    flags.model_explorer_option(cutmap)
    flags.cache_options(cutmap)
    flags.finding_options(cutmap)


def check(args: argparse.Namespace) -> None:
    flags.check_arguments(args)


def run(args: argparse.Namespace) -> Result:
    return cached(args, _run)


def _run(args: argparse.Namespace) -> Result:
    from graphcheck import api
    from graphcheck.report import headline, render

    if wants_page(args):
        return explore(args, lambda explorer: (explorer.map(args.doc_length), (4, 1, "flops")))
    if args.model_explorer is not None:
        return overlay(args, lambda explorer: (explorer.map(args.doc_length), None))
    result = api.cut_map(args.model, doc_length=args.doc_length, **model_options(args))
    return render(result, args.format), result.exit_code, headline(result)
