"""``--format html``: the cut explorer as one self-contained page.

It renders a :class:`graphcheck.reporters.view.CutView` (``map`` and ``plan`` build one
from their explorer: ``--html FILE`` or ``--format html``); any other result is a usage
error, since the page needs the per-layer data a report does not keep.
"""

from __future__ import annotations

from graphcheck.errors import UsageError
from graphcheck.reporters.view import CutView, page

__all__ = ["KINDS", "render"]

KINDS = frozenset({"map", "plan"})  # the commands whose explorer it draws


def render(result) -> str:
    if not isinstance(result, CutView):
        raise UsageError(
            "the html format shows the cut explorer: use it with graphcheck map or plan, "
            f"not {result.kind}"
        )
    return page(result.document)
