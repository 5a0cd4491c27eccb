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
import os
import signal
import sys

from graphcheck._version import __version__
from graphcheck.commands import COMMANDS, command
from graphcheck.commands.arguments import Parser
from graphcheck.console.streams import CtrlC, error_document
from graphcheck.errors import GraphcheckError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand (:mod:`graphcheck.commands`: one module each)."""
    parser = Parser(prog="graphcheck", description="Prove pipeline-parallel cuts of an LLM.")
    parser.add_argument("--version", action="version", version=f"graphcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        command(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (the program's arguments when ``None``); the
    exit status."""
    code = _main(argv)
    if argv is None:  # the program itself: its run is over, Ctrl-C while it exits is moot
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _run(args: argparse.Namespace) -> int:
    """Check the arguments, run the command, write its result; the exit status."""
    handler = command(args.command)
    handler.check(args)  # before the cache lookup and anything heavy
    with CtrlC().installed() as ctrl_c:
        rendered, code, line = handler.run(args)
    if ctrl_c.pressed:  # pressed, and the interrupt swallowed on the way: still Ctrl-C
        raise KeyboardInterrupt
    output = getattr(args, "output", None)
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(rendered)
        sys.stdout.write(f"graphcheck: {line}; report written to {output}\n")
    else:
        sys.stdout.write(rendered)
    return code


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(build_parser().parse_args(argv))
    except GraphcheckError as err:
        print(f"graphcheck: error: {err}", file=sys.stderr)
        for line in err.detail:
            print(f"  {line}", file=sys.stderr)
        error_document(argv, str(err), err.detail)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        print("graphcheck: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        print(f"graphcheck: error: {err}", file=sys.stderr)
        error_document(argv, str(err))
        return 2
    except Exception as err:  # a bug in graphcheck: could not verify, never a pass
        if os.environ.get("GRAPHCHECK_TRACEBACK"):
            raise
        print(
            f"graphcheck: internal error: {type(err).__name__}: {err} (nothing was proven; "
            "GRAPHCHECK_TRACEBACK=1 shows where)",
            file=sys.stderr,
        )
        error_document(argv, f"internal error: {type(err).__name__}: {err}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
