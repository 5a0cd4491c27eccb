"""``--format json``: the result's ``as_dict()``, the public machine-readable contract.

A run that could not verify (exit 2) writes :func:`error_document` instead, so a consumer
parsing stdout reads why there is no report:

>>> print(error_document("--cuts 'x' is not a comma-separated list of layer indices"))
{"error": "--cuts 'x' is not a comma-separated list of layer indices", "detail": [], "exit_code": 2}
"""

from __future__ import annotations

import json

__all__ = ["error_document", "render"]


def render(result) -> str:
    return json.dumps(result.as_dict(), indent=2) + "\n"


def error_document(message: str, detail: tuple[str, ...] = ()) -> str:
    """The JSON of an error: its one line, the lines below it (an export failure's), exit 2."""
    return json.dumps({"error": message, "detail": list(detail), "exit_code": 2})
