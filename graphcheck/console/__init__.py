"""What the entry points show on the terminal, beside the report: the live progress of a
run (:mod:`graphcheck.console.progress`), the stdout/stderr plumbing (what the model code
prints goes to stderr, torch stays quiet, Ctrl-C, error documents:
:mod:`graphcheck.console.streams`) and the generated command-line reference
(:mod:`graphcheck.console.reference`). Imported by the entry points only."""

from __future__ import annotations

__all__: list[str] = []
