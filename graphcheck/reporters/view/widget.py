"""The cut explorer as a Jupyter widget (anywidget), drawn by the page's own script.

anywidget is an optional extra (``pip install 'graphcheck[notebook]'``): it is imported
when a widget is made, never when graphcheck is. The widget's ``_esm`` is
``cut_map.js`` and its ``data`` traitlet the view document
(:func:`graphcheck.reporters.view.document`).
"""

from __future__ import annotations

import functools

from graphcheck.errors import UsageError
from graphcheck.reporters.view import script, style

__all__ = ["widget", "widget_class"]


@functools.cache
def widget_class() -> type:
    """The ``CutExplorer`` widget class (anywidget imported here)."""
    try:
        import anywidget
        import traitlets
    except ImportError as err:
        raise UsageError(
            "the cut explorer widget needs anywidget: pip install 'graphcheck[notebook]' "
            "(or write the page: graphcheck map MODEL --html FILE)"
        ) from err

    class CutExplorer(anywidget.AnyWidget):
        """Boundaries, layer kinds, costs, crossing sets and an editable balanced plan."""

        _esm = script()
        _css = style()
        data = traitlets.Dict().tag(sync=True)

    return CutExplorer


def widget(data: dict):
    """A ``CutExplorer`` widget showing the view document ``data``."""
    return widget_class()(data=data)
