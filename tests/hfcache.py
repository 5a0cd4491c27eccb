"""Shared exports of ``hf:`` models: each (spec, options) is built and exported once
per test session, however many tests read its map, its verify or its graph.

Options left at their defaults and options not given share one export. Their
``verify`` proves no stage program unless given a builder (:class:`harness.RuleExplorer`).
"""

from __future__ import annotations

from functools import cache

import torch
from harness import RuleExplorer

from graphcheck.report import Report

# the ten transformers families of the coverage matrix
FAMILIES = (
    "llama",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "gemma3_text",
    "gpt_oss",
    "deepseek_v3",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
)
_DEFAULTS = {"settings": (), "stand_ins": True, "kernels": None, "allow_fp32": ()}


def explorer(spec: str, **options) -> RuleExplorer:
    """``options``: ``settings`` (tuple of pairs), ``stand_ins``, ``kernels``, ``allow_fp32``."""
    return _explorer(spec, _key(options))


def cut_map(spec: str, **options) -> Report:
    return _cut_map(spec, _key(options))


def _key(options: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in options.items() if _DEFAULTS[k] != v))


@cache
def _explorer(spec: str, key: tuple) -> RuleExplorer:
    options = {**_DEFAULTS, **dict(key)}
    return RuleExplorer(
        spec,
        settings=dict(options["settings"]),
        stand_ins=options["stand_ins"],
        kernels=options["kernels"],
        allow_fp32=options["allow_fp32"],
    )


@cache
def _cut_map(spec: str, key: tuple) -> Report:
    return _explorer(spec, key).map()


def custom_ops(spec: str, **options) -> dict[str, list[torch.fx.Node]]:
    """Nodes of the export by op, for ops outside ``aten``."""
    found: dict[str, list[torch.fx.Node]] = {}
    for node in explorer(spec, **options).program.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.namespace != "aten":
            found.setdefault(str(target), []).append(node)
    return found
