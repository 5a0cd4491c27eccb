"""``--format json``: the result's ``as_dict()``, the public machine-readable contract."""

from __future__ import annotations

import json

__all__ = ["render"]


def render(result) -> str:
    return json.dumps(result.as_dict(), indent=2) + "\n"
