"""Open an overlay in Model Explorer: its own PyTorch adapter on graphcheck's ``.pt2``.

Needs the extra ``graphcheck[explorer]`` (``ai-edge-model-explorer``); without it
:func:`require` is a one-line :class:`~graphcheck.errors.UsageError` naming the
install command.

:func:`load_program` registers the custom ops graphcheck's export may hold
(``torch_attn::_varlen_attn``, ``graphcheck::*``) before ``torch.export.load``: the
plain ``model-explorer`` command loads the ``.pt2`` in a process that has not defined
them and fails. :func:`adapter_graphs` runs Model Explorer's
``PytorchExportedProgramAdapterImpl``: its nodes, ids, namespaces, edges and
attributes are the adapter's own. One method is widened: the adapter raises on a
node whose value is a symbolic size (``max_length_q``, ``sym_size``) and on a tuple
of tensors with a symbolic dim (an attention kernel's outputs), which every program
exported with symbolic T has; such a node's output metadata is written the way the
adapter writes a single tensor's (``torch.bfloat16[1, "s0", 64]``), a scalar's as
``SymInt[]`` with its value next to it.

:func:`open_overlay` starts Model Explorer on the graph with every node-data file of
the overlay (``python -m graphcheck.interop.model_explorer DIR``).
"""

from __future__ import annotations

import json
import os

import torch

from graphcheck.errors import AnalysisError, UsageError
from graphcheck.interop.model_explorer import GRAPH_ID, OverlayFile

__all__ = ["adapter_graphs", "load_program", "open_overlay", "require"]

INSTALL = "pip install 'graphcheck[explorer]'"
_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float)


def require():
    """The ``model_explorer`` package, or a one-line :class:`UsageError`."""
    try:
        import model_explorer
    except ImportError:
        raise UsageError(
            f"opening the overlay needs Model Explorer (ai-edge-model-explorer): {INSTALL}"
        ) from None
    return model_explorer


def load_program(path: str) -> torch.export.ExportedProgram:
    """The saved program, with the custom ops graphcheck's export uses registered first;
    an :class:`AnalysisError` naming the ops ``overlay.json`` lists when it fails."""
    import torch.nn.attention.varlen  # defines torch_attn::_varlen_attn

    import graphcheck.kernels.custom_ops  # noqa: F401  (defines the graphcheck:: ops)

    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file; write it with --model-explorer DIR")
    try:
        return torch.export.load(path)
    except Exception as err:
        manifest = os.path.join(os.path.dirname(path), OverlayFile.MANIFEST)
        ops = _listed_ops(manifest)
        hint = f"; import the code defining {', '.join(ops)} first" if ops else ""
        raise AnalysisError(f"cannot load {path}: {type(err).__name__}{hint}") from None


def _listed_ops(manifest: str) -> list[str]:
    try:
        with open(manifest, encoding="utf-8") as handle:
            return list(json.load(handle).get("custom_ops", []))
    except (OSError, ValueError):
        return []


def _adapter_class():
    require()
    from model_explorer.graph_builder import KeyValue, MetadataItem
    from model_explorer.pytorch_exported_program_adapter_impl import (
        PytorchExportedProgramAdapterImpl,
    )

    class Adapter(PytorchExportedProgramAdapterImpl):
        """Model Explorer's adapter; a symbolic or plain scalar value is described
        instead of raising."""

        def add_outputs_metadata(self, fx_node, node):
            val = fx_node.meta.get("val")
            if not isinstance(val, (tuple, list, *_SCALARS)) or isinstance(val, bool):
                return super().add_outputs_metadata(fx_node, node)
            values = val if isinstance(val, (tuple, list)) else (val,)
            for idx, value in enumerate(values):
                if value is None:
                    continue
                attrs = [KeyValue(key="tensor_shape", value=_described(value))]
                if not isinstance(value, torch.Tensor):
                    attrs.append(KeyValue(key="value", value=str(value)))
                node.outputsMetadata.append(MetadataItem(id=str(idx), attrs=attrs))

    return Adapter


def _described(value) -> str:
    """``torch.bfloat16[1, "s0", 64]`` as the adapter writes a tensor (symbolic dims as
    strings, which its own tuple branch cannot); ``SymInt[]`` for a scalar."""
    if isinstance(value, torch.Tensor):
        dims = [int(d) if str(d).isdigit() else str(d) for d in value.shape]
        return f"{value.dtype}{json.dumps(dims)}"
    return f"{type(value).__name__}[]"


def adapter_graphs(path: str) -> dict:
    """Model Explorer's graphs of the ``.pt2`` at ``path`` (``{"graphs": [Graph]}``; the
    one graph's id is :data:`GRAPH_ID`)."""
    from model_explorer.consts import DEFAULT_SETTINGS

    adapter = _adapter_class()
    graphs = adapter(load_program(path), dict(DEFAULT_SETTINGS)).convert()
    if [g.id for g in graphs["graphs"]] != [GRAPH_ID]:
        raise AnalysisError(f"Model Explorer built graphs {[g.id for g in graphs['graphs']]}")
    return graphs


def open_overlay(folder: str, host: str = "localhost", port: int = 8080) -> None:
    """Start Model Explorer on ``folder``'s program with its node data (blocks)."""
    model_explorer = require()
    graphs = adapter_graphs(os.path.join(folder, OverlayFile.PROGRAM))
    config = model_explorer.config()
    config.graphs_list.append(graphs)
    config.model_sources.append({"url": f"graphs://graphcheck/{len(config.graphs_list) - 1}"})
    for name in (
        OverlayFile.STAGES,
        OverlayFile.LAYERS,
        OverlayFile.CROSSING,
        OverlayFile.FINDINGS,
    ):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            config.add_node_data_from_path(path)
    model_explorer.visualize_from_config(config, host=host, port=port)
