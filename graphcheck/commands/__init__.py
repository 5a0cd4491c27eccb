"""The subcommands: one module each, with its own parser and handler, and what they
share (:mod:`~graphcheck.commands.arguments`: flag groups and the argument checks made
before anything heavy; :mod:`~graphcheck.commands.runs`: the model runs, their cache and
artifacts). The terminal plumbing is :mod:`graphcheck.console`'s.

A command module has ``NAME``, ``add_parser(sub)`` (its flags on the subcommands
``sub``), ``check(args)`` (the mistakes its arguments alone show, before anything heavy)
and ``run(args)`` (the rendered result, the exit status and the verdict line).
:func:`graphcheck.cli.main` looks the command up by name and runs it: adding a command is
one module here and its line in :data:`COMMANDS`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["COMMANDS", "command"]

# in the order ``graphcheck --help`` lists them
COMMANDS = ("verify", "map", "plan", "gate", "check", "lock", "rules")
_MODULES = {"map": "cut_map", "check": "project", "lock": "project"}


def command(name: str) -> ModuleType:
    """The module of command ``name``."""
    return importlib.import_module(f"{__name__}.{_MODULES.get(name, name)}")
