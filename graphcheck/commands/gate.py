"""``graphcheck gate MODEL``: run the split program on CPU and compare the bytes."""

from __future__ import annotations

import argparse

from graphcheck.commands import arguments as flags
from graphcheck.commands.runs import Result, op_verdicts
from graphcheck.console.streams import fresh
from graphcheck.errors import UsageError
from graphcheck.options import Group, add_arguments, from_args

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "gate"


def add_parser(sub) -> None:
    gate = sub.add_parser(NAME, help="run the split program on CPU and compare the bytes")
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
    flags.layout_options(gate)


def check(args: argparse.Namespace) -> None:
    flags.check_arguments(args)
    if args.stage_builder == "none":  # graphcheck.stages.builders.NONE, without torch
        raise UsageError(
            "gate runs every stage: --stage-builder none builds none; drop it (the "
            "default builds them) or name a builder"
        )


def run(args: argparse.Namespace) -> Result:
    from graphcheck.gate.run import gate
    from graphcheck.planning.syntax import parse_cuts
    from graphcheck.report import headline, render

    options = from_args(args, Group.LAYOUT, Group.MODEL)
    del options["backward"]  # the gate proves the backward with --train
    cuts = parse_cuts(args.cuts) if args.cuts is not None else None
    op_verdicts(None, no_cache=True)  # the gate keeps no cache
    with fresh(args.progress):
        result = gate(
            args.model, cuts, args.stages, stage_builder=args.stage_builder,
            **from_args(args, Group.GATE), **options,
        )  # fmt: skip
    return render(result, args.format), result.exit_code, headline(result)
