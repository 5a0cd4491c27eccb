"""The JSON Schemas of graphcheck's machine-readable files, shipped with the package:
``report.schema.json`` (``--format json`` of verify, map, plan and gate, and the error
document of a run that could not verify) and ``lock.schema.json`` (``graphcheck.lock``).

>>> sorted(schema("report")["$defs"])[:3]
['crossing', 'cut', 'cut_report']
"""

from __future__ import annotations

import json
from importlib import resources

__all__ = ["NAMES", "schema"]

NAMES = ("report", "lock")


def schema(name: str) -> dict:
    """The schema ``name`` (one of :data:`NAMES`) as a dict."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}: the schemas are {', '.join(NAMES)}")
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)
