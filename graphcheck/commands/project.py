"""``graphcheck check`` and ``graphcheck lock``: the project configuration's checks and
its lock (:mod:`graphcheck.project.commands` holds their flags and their run)."""

from __future__ import annotations

import argparse

from graphcheck.commands.arguments import check_outputs
from graphcheck.commands.runs import Result
from graphcheck.console.streams import fresh

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "check"  # and lock


def add_parser(sub) -> None:
    from graphcheck.project.commands import add_parsers

    if "check" not in sub.choices:  # one module, both commands
        add_parsers(sub)


def check(args: argparse.Namespace) -> None:
    """The configuration and ``-k``, read without the checks (torch)."""
    from graphcheck.project.config import load_config

    check_outputs(args)
    load_config(args.config).selected(args.pattern)


def run(args: argparse.Namespace) -> Result:
    from graphcheck.project.commands import run_command

    return run_command(args, fresh=lambda: fresh(args.progress))
