"""``hf:`` model specs: transformers causal LMs on fake weights.

* ``hf:<model_type>`` (``hf:llama``, ``hf:qwen3_next``) builds the family's
  config class with its defaults shrunk to a tiny width (:data:`TINY`: hidden
  64, 4 heads, 2 kv heads, head dim 16, vocab 256, 8 layers, a few small
  experts). Only keys the config class has are overridden, and derived fields
  (``layer_types``, sliding-window patterns) are left to the class, so the
  family's own layer-type logic runs for the new depth. A multimodal type
  (``gemma3``, ``qwen3_5``) uses its text config.
* ``hf:path/to/config.json`` (or a directory holding one) builds the real,
  full-size config; it must state ``model_type``, ``hidden_size``,
  ``num_hidden_layers`` and ``num_attention_heads``. ``quantization_config``
  is dropped (graphcheck checks the bf16 training graph) and nothing is
  downloaded.

``settings`` (``--set KEY=VALUE``) override config keys after that; a value is
parsed as JSON when it parses (``8``, ``true``, ``[1, 2]``), else kept as a
string; ``num_hidden_layers`` on a full config keeps the first entries of its
``layer_types``. ``attn_implementation`` picks another attention
implementation (``eager``, ``sdpa``); by default the model attends through
``"graphcheck_varlen"`` (:mod:`graphcheck.kernels.attention`). The cache is
off (``use_cache=False``).

>>> parse_settings(["num_hidden_layers=4", "hidden_act=gelu", "mlp_only_layers=[0]"])
{'num_hidden_layers': 4, 'hidden_act': 'gelu', 'mlp_only_layers': [0]}
>>> is_hf_spec("hf:llama"), is_hf_spec("fixtures/reference.py:reference")
(True, False)
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from torch import nn

from graphcheck.errors import ModelLoadError, UsageError

__all__ = [
    "PREFIX",
    "TINY",
    "build_config",
    "hf_factory",
    "is_hf_spec",
    "offline",
    "parse_settings",
]

PREFIX = "hf:"
TINY: dict[str, object] = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "intermediate_size": 128,
    "num_hidden_layers": 8,
    # mixture of experts: a few small ones
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 2,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    # multi-head latent attention
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    # linear attention
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads")
_ATTN_KEY = "attn_implementation"


def is_hf_spec(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse_settings(pairs: Sequence[str]) -> dict[str, object]:
    """``["KEY=VALUE", ...]`` -> ``{key: value}`` with JSON values where they parse."""
    settings: dict[str, object] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r} is not KEY=VALUE")
        settings[key.strip()] = _value(text)
    return settings


def _value(text: object) -> object:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def hf_factory(spec: str, settings: Mapping[str, object] | None = None) -> Callable[[], nn.Module]:
    """A factory building the causal LM of ``spec`` (call it under the fake mode)."""
    config = build_config(spec, settings)
    from transformers import AutoModelForCausalLM

    def factory() -> nn.Module:
        with offline():
            return AutoModelForCausalLM.from_config(config)

    factory.__name__ = f"AutoModelForCausalLM[{config.model_type}]"
    return factory


@contextlib.contextmanager
def offline():
    """``HF_HUB_OFFLINE=1`` while transformers builds (nothing may be downloaded), and
    the variable as it was afterwards."""
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = before


def build_config(spec: str, settings: Mapping[str, object] | None = None):
    """The transformers config ``spec`` names, with ``settings`` applied."""
    _require_transformers()
    with offline():
        return _build_config(spec, settings)


def _build_config(spec: str, settings: Mapping[str, object] | None):
    from graphcheck.kernels import attention

    target = spec.removeprefix(PREFIX)
    if not target:
        raise UsageError("hf: needs a model type (hf:llama) or a path to config.json")
    settings = {k: _value(v) for k, v in (settings or {}).items()}
    attn = settings.pop(_ATTN_KEY, None) or attention.register()
    if _is_path(target):
        model_type, base = _file_config(target)
    else:
        model_type, base = _tiny_config(target)
    config = _make(model_type, base, settings, spec)
    config._attn_implementation = attn
    config.use_cache = False
    return config


def _is_path(target: str) -> bool:
    return target.endswith(".json") or "/" in target or os.sep in target or Path(target).exists()


def _require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise ModelLoadError("hf: specs need transformers: pip install 'graphcheck[hf]'")


def _config_class(model_type: str):
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown model type {model_type!r} for this transformers{hint}")
    return CONFIG_MAPPING[model_type]


def _text_type(model_type: str) -> str:
    """The text model type of a multimodal type (``gemma3`` -> ``gemma3_text``)."""
    config = _config_class(model_type)()
    text = config.get_text_config(decoder=True)
    return text.model_type if text is not config and text.model_type else model_type


def _tiny_config(model_type: str) -> tuple[str, dict[str, object]]:
    model_type = _text_type(model_type)
    defaults = _config_class(model_type)()
    base = {k: v for k, v in TINY.items() if hasattr(defaults, k)}
    if hasattr(defaults, "qk_rope_head_dim"):  # MLA: head dims come from the rope/nope split
        base.pop("head_dim", None)
        base["num_key_value_heads"] = base["num_attention_heads"]
    return model_type, base


def _file_config(target: str) -> tuple[str, dict[str, object]]:
    path = Path(target)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ModelLoadError(f"config not found: {file}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{file} is not a JSON config: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelLoadError(f"{file} has no model_type")
    data = _text_part(data)
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise ModelLoadError(f"{file} is missing required field(s): {', '.join(missing)}")
    data.pop("quantization_config", None)
    data.pop("auto_map", None)
    return data["model_type"], data


def _text_part(data: dict) -> dict:
    """The text config of a multimodal config.json (``text_config``), else itself."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        return dict(data)
    text = dict(text)
    text.setdefault("model_type", _text_type(data["model_type"]))
    if "tie_word_embeddings" in data:
        text.setdefault("tie_word_embeddings", data["tie_word_embeddings"])
    return text


def _make(model_type: str, base: dict, settings: dict, spec: str):
    cls = _config_class(model_type)
    try:
        cls.from_dict(dict(base))
    except Exception as err:
        raise ModelLoadError(f"{spec}: invalid config: {_one_line(err)}") from err
    base = _resized(base, settings)
    defaults = cls()
    unknown = [key for key in settings if not hasattr(defaults, key) and key not in base]
    if unknown:
        raise UsageError(f"--set {unknown[0]}: {cls.__name__} has no such key")
    try:
        return cls.from_dict({**base, **settings})
    except Exception as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
        raise UsageError(f"--set {shown}: {_one_line(err)}") from err


def _resized(base: dict, settings: dict) -> dict:
    """A shallower full config keeps the first entries of its own ``layer_types``."""
    depth = settings.get("num_hidden_layers")
    types = base.get("layer_types")
    if "layer_types" in settings or not isinstance(types, list) or not isinstance(depth, int):
        return base
    return {**base, "layer_types": types[:depth]} if 0 < depth <= len(types) else base


def _one_line(err: BaseException) -> str:
    """The last informative line of a (possibly multi-line) config error."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = lines[-1] if lines else type(err).__name__
    return text if len(text) <= 240 else text[:237] + "..."
