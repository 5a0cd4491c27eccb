"""``graphcheck verify MODEL``: prove every cut of a stage plan."""

from __future__ import annotations

import argparse

from graphcheck.commands import arguments as flags
from graphcheck.commands.runs import Result, cached, model_options, overlay

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "verify"


def add_parser(sub) -> None:
    verify = sub.add_parser(NAME, help="prove every cut of a stage plan")
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
    flags.stage_options(verify)
    flags.layout_options(verify)
    flags.batch_options(verify)
    flags.model_explorer_option(verify)
    flags.cache_options(verify)
    flags.finding_options(verify)


def check(args: argparse.Namespace) -> None:
    flags.check_arguments(args)


def run(args: argparse.Namespace) -> Result:
    return cached(args, _run)


def _cuts(args: argparse.Namespace):
    from graphcheck.planning.syntax import parse_cuts, parse_fqns_per_stage

    cuts = parse_cuts(args.cuts) if args.cuts is not None else None
    fqns = args.fqns_per_stage
    return cuts, parse_fqns_per_stage(fqns) if fqns is not None else None


def _run(args: argparse.Namespace) -> Result:
    from graphcheck import api
    from graphcheck.report import headline, render

    if args.model_explorer is not None:
        return overlay(args, lambda explorer: _judged(args, explorer))
    cuts, fqns = _cuts(args)
    result = api.verify(
        args.model, cuts, args.stages, stage_builder=args.stage_builder,
        require_stage_programs=args.require_stage_programs, pipeline_layout=args.layout,
        fqns_per_stage=fqns, **model_options(args),
    )  # fmt: skip
    return render(result, args.format), result.exit_code, headline(result)


def _judged(args: argparse.Namespace, explorer):
    """The verify report from ``explorer`` and the placement the proof judged."""
    cuts, fqns = _cuts(args)
    cuts = explorer.written_cuts(cuts, args.stages, args.layout, fqns)
    result = explorer.verify(
        cuts, args.stages, stage_builder=args.stage_builder,
        require_stage_programs=args.require_stage_programs,
    )  # fmt: skip
    return result, explorer.context(explorer.plan(cuts, args.stages))
