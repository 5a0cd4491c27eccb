"""The ``check`` and ``lock`` subcommands: their arguments and their run.

Imported by :mod:`graphcheck.cli` when it builds its parser, so this module imports
nothing heavy at module level (``graphcheck --help`` stays fast); the run imports
:mod:`graphcheck.project.check` when it starts, and torch only for a check it runs
afresh: each check is looked up in the export cache first (``--no-cache``,
``--cache-dir``, and the environment variables ``verify`` honours:
:mod:`graphcheck.cache.store`).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

from graphcheck.cache.store import add_options

__all__ = ["CHECK_FORMATS", "COMMANDS", "add_parsers", "run_command"]

COMMANDS = ("check", "lock")
CHECK_FORMATS = ("json", "markdown", "sarif", "text")  # the formats whose KINDS hold "check"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the configuration (default: the nearest graphcheck.toml, or pyproject.toml "
        "with [tool.graphcheck], from the working directory up)",
    )
    parser.add_argument(
        "-k",
        metavar="PATTERN",
        dest="pattern",
        help="only the checks whose name or model spec contains PATTERN or matches it as a glob",
    )
    parser.add_argument("--output", metavar="FILE", help="write the result to FILE")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show the phases and their times on stderr (default: when stderr is a terminal)",
    )
    add_options(
        parser, "export cache (a check whose model code and table are unchanged is not re-exported)"
    )


def add_parsers(sub) -> None:
    """Add ``check`` and ``lock`` to the subcommands ``sub``."""
    check = sub.add_parser(
        "check", help="run every check of the project configuration ([tool.graphcheck])"
    )
    _common(check)
    check.add_argument(
        "--locked",
        action="store_true",
        help="also compare layer programs, boundaries and plans with graphcheck.lock "
        "(exit 1 when a layer program changed or a proven cut or plan regressed)",
    )
    check.add_argument(
        "--update",
        action="store_true",
        help="with --locked: report the changes, then rewrite graphcheck.lock to this run",
    )
    check.add_argument("--format", choices=CHECK_FORMATS, default="text")
    lock = sub.add_parser(
        "lock", help="write graphcheck.lock: layer programs, boundary and plan verdicts"
    )
    _common(lock)
    lock.add_argument("--format", choices=CHECK_FORMATS, default="text")


def run_command(
    args: argparse.Namespace,
    fresh: Callable[[], AbstractContextManager] = contextlib.nullcontext,
) -> tuple[str, int, str]:
    """Run ``check`` or ``lock``: the rendered result, the exit status and the verdict
    in one line; a check that is not in the cache runs inside ``fresh()``."""
    from graphcheck.cache import resolve_folder
    from graphcheck.errors import UsageError
    from graphcheck.project.check import run_project
    from graphcheck.report import headline, render

    if args.command == "check" and args.update and not args.locked:
        raise UsageError("--update rewrites the lock a --locked check compares with: add --locked")
    folder = resolve_folder(args.cache_dir, no_cache=args.no_cache)  # before any export
    result = run_project(
        args.config,
        args.pattern,
        locked=args.command == "check" and args.locked,
        update=args.command == "check" and args.update,
        lock=args.command == "lock",
        cache=folder,
        fresh=fresh,
    )
    return render(result, args.format), result.exit_code, headline(result)
