"""``graphcheck plan MODEL --stages S``: the balanced legal plan, proven."""

from __future__ import annotations

import argparse

from graphcheck.commands import arguments as flags
from graphcheck.commands.runs import Result, cached, explore, model_options, wants_page

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "plan"


def add_parser(sub) -> None:
    plan = sub.add_parser(
        NAME, help="the balanced legal plan: cuts minimising the most expensive stage"
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
    flags.doc_length_option(plan)
    flags.html_option(plan)
    flags.stage_options(plan)
    flags.layout_options(plan)
    flags.batch_options(plan)
    flags.cache_options(plan)
    flags.finding_options(plan)


def check(args: argparse.Namespace) -> None:
    flags.check_arguments(args)


def run(args: argparse.Namespace) -> Result:
    return cached(args, _run)


def _run(args: argparse.Namespace) -> Result:
    from graphcheck import api
    from graphcheck.report import headline, render

    if wants_page(args):
        return explore(args, lambda explorer: _balanced(args, explorer))
    result = api.plan(
        args.model, args.stages, virtual=args.virtual, cost=args.cost,
        doc_length=args.doc_length, stage_builder=args.stage_builder,
        require_stage_programs=args.require_stage_programs, **model_options(args),
    )  # fmt: skip
    return render(result, args.format), result.exit_code, headline(result)


def _balanced(args: argparse.Namespace, explorer):
    """The plan report from ``explorer``, and the plan the page first shows."""
    result = explorer.balanced(
        args.stages, virtual=args.virtual, cost=args.cost, doc_length=args.doc_length,
        stage_builder=args.stage_builder, require_stage_programs=args.require_stage_programs,
    )  # fmt: skip
    return result, (args.stages, args.virtual, args.cost)
