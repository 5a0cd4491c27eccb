"""Deprecated: ``python -m graphcheck.interop.model_explorer DIR``; this still runs it."""

from __future__ import annotations

import importlib
import sys

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(importlib.import_module("graphcheck.interop.model_explorer.__main__").main())
