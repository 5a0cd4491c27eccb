"""What kind of work an op is, in one place: the op sets the cost model
(:mod:`graphcheck.analysis.cost`) counts and the cut explorer's layer kinds
(:mod:`graphcheck.analysis.kinds`) label, keyed by the op's qualified name
(:func:`graphcheck.analysis.fx.op_name`).

>>> "aten.mm.default" in MATMUL, "aten.add.Tensor" in MATMUL
(True, False)
"""

from __future__ import annotations

__all__ = [
    "CONVOLUTION",
    "LINEAR_ATTENTION",
    "MATMUL",
    "ROUTED",
    "SDPA_ATTENTION",
    "VARLEN_ATTENTION",
]

# contractions: 2·M·N·K FLOPs; a layer that runs one has a dense (or routed) MLP
MATMUL = frozenset({
    "aten.mm.default", "aten.bmm.default", "aten.addmm.default", "aten.linear.default",
    "aten.matmul.default", "aten._grouped_mm.default",
})  # fmt: skip
CONVOLUTION = frozenset({"aten.convolution.default", "aten.conv1d.default", "aten.conv2d.default"})
VARLEN_ATTENTION = frozenset({
    "torch_attn._varlen_attn.default", "graphcheck.varlen_attention.default",
})  # fmt: skip
SDPA_ATTENTION = frozenset({
    "aten.scaled_dot_product_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
})  # fmt: skip
LINEAR_ATTENTION = frozenset({"graphcheck.chunk_gated_delta_rule.default"})
# a router's choice, or a matmul over the rows it routed: a mixture of experts
ROUTED = frozenset({"aten.topk.default", "aten._grouped_mm.default"})
