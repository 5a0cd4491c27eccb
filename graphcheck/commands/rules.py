"""``graphcheck rules [CODE]``: the rule table, or one rule's whole doc."""

from __future__ import annotations

import argparse

from graphcheck.commands.runs import Result

__all__ = ["NAME", "add_parser", "check", "run"]

NAME = "rules"


def add_parser(sub) -> None:
    rules = sub.add_parser(NAME, help="print the rule table, or one rule's whole doc")
    rules.add_argument("code", nargs="?", metavar="CODE", help="a rule code, e.g. GC203")


def check(args: argparse.Namespace) -> None:
    """Nothing to check: an unknown code is said when it is looked up."""


def run(args: argparse.Namespace) -> Result:
    from graphcheck import rules

    text = rules.table() if args.code is None else rules.doc(args.code)
    return text, 0, ""
