"""The command-line reference, generated from the parser the command line runs
(``docs/reference/cli.md``; ``tests/test_options.py`` fails when the page drifts).

>>> "## `graphcheck verify`" in cli_markdown()
True
"""

from __future__ import annotations

import argparse

__all__ = ["cli_markdown"]


def cli_markdown() -> str:
    """Every command and flag of ``graphcheck``, with its help, as Markdown."""
    from graphcheck.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command-line reference",
        "",
        "Generated from the parser `graphcheck` runs (`graphcheck/console/reference.py`);",
        "the model options are declared once in `graphcheck/options.py`.",
    ]
    for name, sub in _commands(parser):
        lines += ["", f"## `graphcheck {name}`", "", sub.description or _helps(parser)[name], ""]
        lines += _flags(sub)
    return "\n".join(lines) + "\n"


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices.items())


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help or "" for choice in action._choices_actions}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        rows.append(f"| `{_escaped(_spelled(action))}` | {_escaped(action.help or '')} |")
    return rows


def _spelled(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    flag = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flag
    if action.choices:
        return f"{flag} {{{','.join(map(str, action.choices))}}}"
    return f"{flag} {action.metavar or action.dest.upper()}"


def _escaped(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())
