"""The model's tensors as the gate moves them, the model's own init, and the check that
every parameter was initialised.

**By name, no hooks.** Every place the gate saves or restores weights (the uncut
checkpoint the stages load, the state each isolation run starts from) goes through
``named_parameters(remove_duplicate=False)`` and ``named_buffers(remove_duplicate=False)``,
never ``state_dict()``/``load_state_dict()``: their hooks may rename or split keys (a
fused ``qkv.weight`` saved as ``q_proj``/``k_proj``/``v_proj``), and a stage looks its
tensors up by the names the module holds. The checkpoint holds parameters and persistent
buffers; a non-persistent buffer (a rotary table) is what each rank computes itself.

**The model's own init.** A framework may allocate weights with ``torch.empty`` (or on
the meta device) and fill them in an init method of the root module. After the factory,
in the same seeded generator state, every process calls the first of
:data:`INIT_METHODS` the root module has (``init_weights``, then ``init_states``, then
``reset_parameters``), with no arguments (or ``buffer_device=None``, torchtitan's
``init_weights`` signature, when that is all it asks for), under ``torch.no_grad()``.
``--init METHOD`` names another method, ``--init none`` calls none. On a Hugging Face
model ``init_weights()`` is a no-op after the constructor's ``post_init()``.

**Initialised.** Then a parameter that holds NaN or inf, or a weight of two or more
dimensions that is all zero (biases, stacked per expert or not, may be zero), is a
:class:`~graphcheck.errors.GateError`: memory nobody initialised, on which the bytes
compare nothing (a zero matrix hides whatever flows through it; a leak through it
would read as isolated).

>>> from torch import nn
>>> init_method(nn.Linear(2, 2), None), init_method(nn.Linear(2, 2), "none")
('reset_parameters', None)
>>> sorted(tensors_of(nn.Linear(2, 2)))
['bias', 'weight']
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from graphcheck.errors import GateError, UsageError

__all__ = [
    "INIT_METHODS",
    "NO_INIT",
    "check_initialised",
    "init_method",
    "initialise",
    "restore",
    "tensors_of",
]

INIT_METHODS = ("init_weights", "init_states", "reset_parameters")  # looked for in this order
NO_INIT = "none"  # --init none: call no init method
_TORCHTITAN = {"buffer_device": None}  # init_weights(buffer_device=None)
_SHOWN = 3  # parameters named in the message, before "and N more"


def tensors_of(module: nn.Module, persistent: bool = False) -> dict[str, torch.Tensor]:
    """Detached copies of the module's parameters and buffers, by every name they have;
    ``persistent``: without the non-persistent buffers (what a checkpoint holds)."""
    found = {n: p.detach().clone() for n, p in module.named_parameters(remove_duplicate=False)}
    skipped = _non_persistent(module) if persistent else set()
    for name, buffer in module.named_buffers(remove_duplicate=False):
        if name not in skipped:
            found[name] = buffer.detach().clone()
    return found


def _non_persistent(module: nn.Module) -> set[str]:
    names = set()
    for prefix, sub in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        names |= {dot + name for name in sub._non_persistent_buffers_set}
    return names


def restore(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (:func:`tensors_of` the same module) back into its tensors, in place."""
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors |= dict(module.named_buffers(remove_duplicate=False))
    with torch.no_grad():
        for name, tensor in tensors.items():
            source = state.get(name)
            if source is None or source.shape != tensor.shape:
                raise GateError(_unrestorable(name, source, tensor))
            tensor.copy_(source)


def _unrestorable(name: str, source: torch.Tensor | None, tensor: torch.Tensor) -> str:
    """Why ``name`` cannot be copied back: the forward made it or changed its shape."""
    if source is None:
        return f"cannot restore {name}: the model's forward registered it; register it in __init__"
    return (
        f"cannot restore {name}: the model's forward replaced it {list(source.shape)} -> "
        f"{list(tensor.shape)}; write it in place, keeping its shape"
    )


def init_method(module: nn.Module, init: str | None) -> str | None:
    """The init method to call on ``module`` (the root): ``init`` (``--init``) when given,
    ``None`` for ``none``, else the first of :data:`INIT_METHODS` it has. A method it
    lacks, or one that needs arguments, is a :class:`UsageError` naming it and ``--init``."""
    if init == NO_INIT:
        return None
    if init is None:
        init = next((name for name in INIT_METHODS if _method(module, name)), None)
        if init is None:
            return None
    elif _method(module, init) is None:
        raise UsageError(
            f"--init {init}: {type(module).__name__} has no method {init!r} ({_known(module)}); "
            f"name one of its methods with --init METHOD, or --init {NO_INIT}"
        )
    _arguments(module, init)
    return init


def _method(module: nn.Module, name: str):
    """The callable attribute ``name`` of ``module`` (not a submodule), else ``None``."""
    value = getattr(module, name, None) if name.isidentifier() else None
    return value if callable(value) and not isinstance(value, nn.Module) else None


def _known(module: nn.Module) -> str:
    """The methods of ``module`` whose name holds ``init`` or ``reset``."""
    names = [
        name
        for name in dir(type(module))
        if not name.startswith("_") and ("init" in name or "reset" in name)
        if _method(module, name) is not None
    ]
    return f"its init methods: {', '.join(names)}" if names else "it has no init or reset method"


def _arguments(module: nn.Module, name: str) -> dict:
    """The keywords ``name`` is called with: none, or torchtitan's ``buffer_device=None``."""
    try:
        signature = inspect.signature(_method(module, name))
    except (TypeError, ValueError):  # a builtin without a signature: called bare
        return {}
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not required:
        return {}
    if set(required) <= set(_TORCHTITAN):
        return dict(_TORCHTITAN)
    raise UsageError(
        f"{type(module).__name__}.{name}() needs arguments ({', '.join(required)}); name an "
        f"init method that takes none with --init METHOD, or --init {NO_INIT}"
    )


def initialise(model: nn.Module, method: str | None) -> None:
    """Call the init method ``method`` (:func:`init_method`) on ``model``, without grad;
    one that raises is a :class:`GateError`."""
    if method is None:
        return
    call = _method(model, method)
    if call is None:
        raise GateError(f"--init {method}: {type(model).__name__} has no method {method!r}")
    try:
        with torch.no_grad():
            call(**_arguments(model, method))
    except Exception as err:
        raise GateError(
            f"{type(model).__name__}.{method}() raised {type(err).__name__}: {err}; fix it, "
            f"or name another init method with --init METHOD (--init {NO_INIT}: none)"
        ) from err


def check_initialised(model: nn.Module, method: str | None) -> None:
    """A :class:`GateError` when a parameter holds NaN or inf or a weight of 2 or more
    dimensions is all zero, after the init method ``method`` (``None``: none ran)."""
    bad = []
    for name, p in model.named_parameters():
        if not p.is_floating_point() or p.numel() == 0:
            continue
        if not torch.isfinite(p).all():
            bad.append(f"{name} (NaN or inf)")
        elif p.dim() >= 2 and "bias" not in name.rpartition(".")[2] and not p.any():
            bad.append(f"{name} (all zero)")
    if not bad:
        return
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    after = f"after {type(model).__name__}.{method}()" if method else "no init method called"
    if method is None:
        after += f"; {_known(model)}"
    count = f"{len(bad)} parameter{'s' if len(bad) > 1 else ''}"
    raise GateError(
        f"the model allocates parameters it never initialises ({after}; {count} "
        f"uninitialised: {', '.join(bad[:_SHOWN])}{more}); name its init method with --init METHOD"
    )
