"""``hf:`` model specs: transformers causal LMs on fake weights.

* ``hf:<model_type>`` (``hf:llama``, ``hf:qwen3_next``) builds the family's
  config class with its defaults shrunk to a tiny width (:data:`TINY`: hidden
  64, 4 heads, 2 kv heads, head dim 16, vocab 256, 8 layers, a few small
  experts). Only keys the config class has are overridden, and derived fields
  (``layer_types``, sliding-window patterns) are left to the class, so the
  family's own layer-type logic runs for the new depth. A multimodal type
  (``gemma3``, ``qwen3_5``) uses its text config. Token ids past the tiny
  vocabulary (``pad_token_id``, ``eos_token_id`` lists) are clipped to its last
  id (:func:`clip_token_ids`); a per-layer table (``per_layer_config``) and
  per-layer lists a class keeps at its own depth are shrunk to the tiny one;
  :data:`QUIRKS` holds the few per-family settings a validator forces.
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
``"graphcheck_varlen"`` (:mod:`graphcheck.kernels.attention`), which refuses (exit 2,
naming it) a call passing what it would drop: a family is proven on the attention it
runs or not at all. The cache is off (``use_cache=False``).

>>> parse_settings(["num_hidden_layers=4", "hidden_act=gelu", "mlp_only_layers=[0]"])
{'num_hidden_layers': 4, 'hidden_act': 'gelu', 'mlp_only_layers': [0]}
>>> is_hf_spec("hf:llama"), is_hf_spec("fixtures/reference.py:reference")
(True, False)
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from graphcheck.errors import ModelLoadError, UsageError, one_line
from graphcheck.model.spec import PREFIX, config_file, hf_target, is_config_path, is_hf_spec

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "PREFIX",
    "QUIRKS",
    "TINY",
    "build_config",
    "clip_token_ids",
    "hf_factory",
    "is_hf_spec",
    "is_transformers_model",
    "offline",
    "parse_settings",
]


def is_transformers_model(module: object) -> bool:
    """``module`` is a transformers model (a ``PreTrainedModel``), however it was built.

    >>> from torch import nn
    >>> is_transformers_model(nn.Linear(1, 1))
    False
    """
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return False
    return isinstance(module, transformers.PreTrainedModel)


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
    # encoder-decoder families run as decoders, and families that name sizes their own way
    "is_decoder": True,
    "decoder_layers": 8,
    "num_decoder_layers": 8,
    "decoder_attention_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "n_shared_experts": 1,
    "d_head": 16,
    "rotary_dim": 8,  # partial rotary embeddings: a part of the head dim
}
# Per-family settings a tiny config cannot do without, each for a reason the family states
# (a validator or a shape rule of its modeling code); applied after TINY, None drops a key.
QUIRKS: dict[str, dict[str, object]] = {
    # its kv-sharing layers must cover every layer type the other layers produce
    "gemma3n_text": {"num_hidden_layers": 10, "num_kv_shared_layers": 5},
    # attention_types counts layers: [[pattern, repeats]] must add up to the depth
    "gpt_neo": {"attention_types": [[["global", "local"], 4]]},
    # hidden_size * expand must equal num_heads * head_dim
    "mamba2": {"num_heads": 8, "n_groups": 1},
    # num_hidden_layers is derived from num_decoder_layers and cannot be set
    "prophetnet": {"num_hidden_layers": None},
    # validator: only top-1 routing is supported
    "zaya": {"num_experts_per_tok": 1},
    # validator: the sliding layers' head_dim is their qk_nope + qk_rope (24 + 8 at tiny width)
    "dots3_note_text": {"head_dim": 32},
    # num_hidden_layers is the length of attn_layers
    "reformer": {"attn_layers": ["local", "lsh"] * 4, "axial_pos_embds_dim": [32, 32]},
    # its default leaves layer_types unset, which its modeling code reads: a mix of conv
    # and full-attention layers
    "lfm2_moe": {"layer_types": ["conv", "conv", "full_attention", "conv"] * 2},
}
_TOKEN_ID = re.compile(r"(^|_)token_(id|ids|index)$")
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads")
_ATTN_KEY = "attn_implementation"


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
    name, build = _builder(spec.removeprefix(PREFIX), config)

    def factory() -> nn.Module:
        with offline():
            try:
                return build(config)
            except Exception as err:
                reason = _build_failure(config, err)
                if reason is None:
                    raise
                raise ModelLoadError(reason) from err

    factory.__name__ = f"{name}[{config.model_type}]"
    return factory


def _builder(target: str, config) -> tuple[str, Callable]:
    """How to build ``config``'s causal LM: the auto class, else the class transformers
    lists for the requested type when it takes this config (a text config the auto
    mapping does not list, as ``mllama``'s)."""
    import transformers
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return "AutoModelForCausalLM", AutoModelForCausalLM.from_config
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(target)
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None or not isinstance(config, cls.config_class):
        raise ModelLoadError(f"transformers has no causal LM for {type(config).__name__}")
    return cls.__name__, cls._from_config


def _build_failure(config, err: Exception) -> str | None:
    """What a failed build means, for the failures of a known cause (else None)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    name, attn, where = config.model_type, config._attn_implementation, _model_line(err)
    if isinstance(err, KeyError) and err.args == (attn,):
        return (
            f"{name} picks its attention from its own table, not transformers' "
            f"AttentionInterface, so {attn!r} cannot reach it; --set attn_implementation=eager "
            "runs its own attention (without the document boundaries)"
        )
    if isinstance(err, DataDependentOutputException):
        return f"{name} reads a tensor's value while it is built{where}; fake weights have none"
    if isinstance(err, RuntimeError) and str(err).startswith("_apply(): Couldn't swap"):
        return f"{name} casts a module with .to() while it is built{where}; {err} on fake weights"
    return None


def _model_line(err: BaseException) -> str:
    """`` at modeling_x.py:LINE``: the innermost frame of transformers' modeling code."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/models/" in f.filename]
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


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

    target = hf_target(spec)
    settings = {k: _value(v) for k, v in (settings or {}).items()}
    attn = settings.pop(_ATTN_KEY, None) or attention.register()
    if is_config_path(target):
        model_type, base = _file_config(target)
        config = _make(model_type, base, settings, spec)
    else:
        model_type, base = _tiny_config(target, spec)
        config = _make(model_type, base, settings, spec)
        ids = clip_token_ids(config.to_dict(), getattr(config, "vocab_size", None), settings)
        if ids:
            config = _make(model_type, {**base, **ids}, settings, spec)
    config._attn_implementation = attn
    config.use_cache = False
    return config


def clip_token_ids(
    values: Mapping[str, object], vocab: object, keep: Collection[str] = ()
) -> dict[str, object]:
    """The token-id fields of ``values`` (``pad_token_id``, ``eos_token_id`` lists,
    ``image_token_index``) that fall outside a vocabulary of ``vocab``, clipped to its last
    id; fields in ``keep`` (given with ``--set``) stay as they are.

    >>> clip_token_ids({"pad_token_id": 151643, "eos_token_id": [1, 151645],
    ...                 "bos_token_id": None, "vocab_size": 151936}, 256)
    {'pad_token_id': 255, 'eos_token_id': [1, 255]}
    """
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        return {}
    clipped = {}
    for key, value in values.items():
        if key in keep or not _TOKEN_ID.search(key):
            continue
        new = _clip(value, vocab - 1)
        if new != value:
            clipped[key] = new
    return clipped


def _clip(value: object, last: int) -> object:
    if isinstance(value, list | tuple):
        return type(value)(_clip(v, last) for v in value)
    if isinstance(value, int) and not isinstance(value, bool) and value > last:
        return last
    return value


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
    config = _defaults(_config_class(model_type), f"{PREFIX}{model_type}")
    text = config.get_text_config(decoder=True)
    return text.model_type if text is not config and text.model_type else model_type


def _defaults(cls, spec: str):
    """``cls()``: the family's default config, or a one-line error when it is invalid."""
    try:
        return cls()
    except Exception as err:
        raise ModelLoadError(
            f"{spec}: the default {cls.__name__} is invalid: {_one_line(err)}"
        ) from err


def _tiny_config(model_type: str, spec: str) -> tuple[str, dict[str, object]]:
    model_type = _text_type(model_type)
    cls = _config_class(model_type)
    defaults = _defaults(cls, spec)
    base = {k: v for k, v in TINY.items() if _settable(defaults, k)}
    if _has(defaults, "qk_rope_head_dim"):  # MLA: head dims come from the rope/nope split
        base.pop("head_dim", None)
        base["num_key_value_heads"] = base["num_attention_heads"]
        if _get(defaults, "head_dim") == _get(defaults, "qk_rope_head_dim"):  # the rope dim
            base["head_dim"] = base["qk_rope_head_dim"]
    base.update(QUIRKS.get(model_type, {}))
    base = {k: v for k, v in base.items() if v is not None}
    if isinstance(defaults.to_dict().get("per_layer_config"), dict):
        base["per_layer_config"] = {}  # the full table names layers the tiny one lacks
    base.update(_depth_lists(cls, defaults, base))
    base.update(_per_layer(cls, defaults, base))
    return model_type, base


def _has(config, key: str) -> bool:
    """Whether ``config`` has ``key`` (an attribute that varies per layer counts)."""
    try:
        return hasattr(config, key)
    except Exception:  # transformers refuses a global read of a per-layer attribute
        return True


def _settable(config, key: str) -> bool:
    """A key of ``config`` that is not a read-only property (``falcon``'s ``head_dim``)."""
    attr = inspect.getattr_static(type(config), key, None)
    return _has(config, key) and not (isinstance(attr, property) and attr.fset is None)


def _per_layer(cls, defaults, base: dict) -> dict[str, object]:
    """A per-layer override table (``per_layer_config``) for the tiny depth: each tiny
    layer takes the entry of its layer type when the full table is one entry per type,
    else the entry of its index; sizes scaled like the global ones (a layer with twice
    the head dim keeps twice the tiny one)."""
    full = defaults.to_dict()
    table = full.get("per_layer_config")
    if not isinstance(table, dict) or not table:
        return {}
    entries = {
        int(layer): {k: _scaled(v, full.get(k), base.get(k)) for k, v in entry.items()}
        for layer, entry in table.items()
        if str(layer).isdigit() and isinstance(entry, dict)
    }
    by_type = _entry_per_type(entries, full.get("layer_types"))
    types = _tiny_layer_types(cls, base)
    if by_type is not None and types is not None:
        picked = {i: by_type[t] for i, t in enumerate(types) if t in by_type}
    else:
        depth = base.get("num_hidden_layers") or 0
        picked = {i: entry for i, entry in entries.items() if i < depth}
    width = len(str(next(iter(table))))
    return {"per_layer_config": {str(i).zfill(width): e for i, e in picked.items()}}


def _entry_per_type(entries: dict[int, dict], types: object) -> dict[str, dict] | None:
    """``{layer type: entry}`` when every layer of a type has the same entry (or none)."""
    if not isinstance(types, list):
        return None
    by_type: dict[str, dict | None] = {}
    for index, kind in enumerate(types):
        entry = entries.get(index)
        if by_type.setdefault(kind, entry) != entry:
            return None
    return {kind: entry for kind, entry in by_type.items() if entry is not None}


def _tiny_layer_types(cls, base: dict) -> list | None:
    try:
        types = cls.from_dict({**base, "per_layer_config": {}}).to_dict().get("layer_types")
    except Exception:
        return None
    return types if isinstance(types, list) else None


def _scaled(value: object, default: object, tiny: object) -> object:
    """``value`` scaled as ``default`` was to ``tiny``: exact integers, else ``tiny``.

    >>> _scaled(512, 256, 16), _scaled(64, 128, 4), _scaled(3, 7, 4), _scaled(1e-6, 1e-5, None)
    (32, 2, 4, 1e-06)
    """
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (value, default, tiny))
    if not ints:
        return value if tiny is None else tiny
    scaled, rest = divmod(tiny * value, default) if default else (0, 1)
    return scaled if not rest and scaled > 0 else tiny


def _depth_lists(cls, defaults, base: dict) -> dict[str, object]:
    """Per-layer lists (``layer_types``) the class keeps at its default depth rather
    than deriving them for the tiny one: their first entries."""
    depth, full_depth = base.get("num_hidden_layers"), _get(defaults, "num_hidden_layers")
    if not isinstance(depth, int) or not isinstance(full_depth, int) or depth == full_depth:
        return {}
    lists = {
        k: v
        for k, v in defaults.to_dict().items()
        if isinstance(v, list) and len(v) == full_depth and k not in base
    }
    if not lists:
        return {}
    try:
        tiny = cls.from_dict(dict(base)).to_dict()
    except Exception:
        tiny = {}
    return {k: v[:depth] for k, v in lists.items() if len(tiny.get(k) or ()) != depth}


def _get(config, key: str) -> object:
    try:
        return getattr(config, key, None)
    except Exception:
        return None


def _file_config(target: str) -> tuple[str, dict[str, object]]:
    file = config_file(target)
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
    _check_keys(cls, base, settings)
    try:
        return cls.from_dict({**base, **settings})
    except Exception as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
        raise UsageError(f"--set {shown}: {_one_line(err)}") from err


def _check_keys(cls, base: dict, settings: dict) -> None:
    """A :class:`UsageError` naming the nearest known key for a ``--set`` key the config
    class would only store and never read (a typo: ``intermediate_sise`` builds the model
    of the defaults). Known: the class's attributes (``to_dict()``, ``attribute_map``,
    properties), the config's own keys, and keys its ``__init__`` folds into others
    (``rope_theta`` into ``rope_parameters``): those change the built config."""
    defaults = cls()
    unknown = [key for key in settings if not _has(defaults, key) and key not in base]
    if not unknown:
        return
    plain = _as_dict(cls, base)
    for key in unknown:
        built = _as_dict(cls, {**base, key: settings[key]})
        if plain is None or built is None or key not in built:
            continue  # refused (the build says why) or folded into another key
        if {k: v for k, v in built.items() if k != key} != plain:
            continue
        known = {*plain, *getattr(defaults, "attribute_map", {})}
        close = difflib.get_close_matches(key, sorted(k for k in known if k[:1] != "_"), n=1)
        hint = f"; did you mean {close[0]}?" if close else "; it would be ignored"
        raise UsageError(f"--set {key}: {cls.__name__} has no such key{hint}")


def _as_dict(cls, values: dict) -> dict | None:
    try:
        return cls.from_dict(dict(values)).to_dict()
    except Exception:
        return None


def _resized(base: dict, settings: dict) -> dict:
    """A shallower full config keeps the first entries of its own ``layer_types``."""
    depth = settings.get("num_hidden_layers")
    types = base.get("layer_types")
    if "layer_types" in settings or not isinstance(types, list) or not isinstance(depth, int):
        return base
    return {**base, "layer_types": types[:depth]} if 0 < depth <= len(types) else base


def _one_line(err: BaseException) -> str:
    """The last informative line of a (possibly multi-line) config error."""
    return one_line(err, typed=False, last=True, limit=240)
