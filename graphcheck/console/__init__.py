"""What the entry points show on the terminal, beside the report: the live progress
of a run (:mod:`graphcheck.console.progress`). Imported by the entry points only."""

from __future__ import annotations

__all__: list[str] = []
