"""Building in the model's own dtype (``--dtype float32``) and ``Module.to()`` on fake
weights.

``float32`` runs the factory under an fp32 default dtype, then casts to bf16 every fp32
parameter and buffer but the carve-outs: declared (``_keep_in_fp32_modules_strict``,
``get_pp_module_config()["fp32_params"]``), ``--allow-fp32`` globs, and tensors the
model's code pins to fp32. GC501 allows the declared ones and still reports a pinned
one nobody declared. Cheap: builds and 2-layer verifies (``fixtures/framework_build.py``).
"""

from __future__ import annotations

import framework_build
import pytest
import torch
from torch import nn

import graphcheck
from graphcheck.errors import UsageError
from graphcheck.gate.weights import build_real
from graphcheck.model.dtype import BuildDtype, build_dtype, cast_to_bf16
from graphcheck.model.load import build_fake, fake_mode
from graphcheck.model.session import Session

BUILD = "fixtures/framework_build.py"
BIAS = "model.layers.{}.mlp.e_score_correction_bias"


def _dtypes(module: nn.Module) -> dict[str, torch.dtype]:
    tensors = [*module.named_parameters(), *module.named_buffers()]
    return {name: t.dtype for name, t in tensors}


def _fp32(module: nn.Module) -> set[str]:
    return {name for name, dtype in _dtypes(module).items() if dtype == torch.float32}


@pytest.mark.parametrize("name", ["declared_router", "pp_config_router"])
def test_float32_keeps_the_declared_carve_out_and_casts_the_rest(name):
    session = Session(f"{BUILD}:{name}", dtype="float32")
    biases = {BIAS.format(i) for i in range(2)}
    assert _fp32(session.module) == biases | {"model.inv_freq"}  # inv_freq: pinned by its code
    assert set(session.dtype_plan.declared) == biases
    assert session.module.model.layers[0].mlp.e_score_correction_bias.requires_grad is False


def test_bfloat16_builds_as_before_with_no_carve_out():
    session = Session(f"{BUILD}:declared_router")
    assert session.dtype is BuildDtype.BFLOAT16
    assert _fp32(session.module) == {"model.inv_freq"}
    assert session.dtype_plan.declared == ()


def test_allow_fp32_glob_is_kept_in_float32_and_not_otherwise():
    def factory():
        return framework_build.RouterLM(framework_build.SMALL)

    kept = Session(factory, dtype="float32", allow_fp32=["*.e_score_correction_bias"])
    cast = Session(factory, dtype="float32")
    assert BIAS.format(1) in _fp32(kept.module)
    assert BIAS.format(1) not in _fp32(cast.module)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_factory_that_calls_to_bfloat16_builds_on_fake_weights(dtype):
    session = Session(f"{BUILD}:casts_itself", dtype=dtype)
    assert set(_dtypes(session.module).values()) == {torch.bfloat16}


def test_module_to_on_fake_weights_keeps_tied_weights_tied():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(8, 4)
            self.head = nn.Linear(4, 8, bias=False)
            self.head.weight = self.embed.weight

    apply = nn.Module._apply
    model = build_fake(lambda: Tied().to(torch.bfloat16), fake_mode(), dtype=torch.float32)
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.dtype == torch.bfloat16 and model.embed.weight.requires_grad
    assert isinstance(model.embed.weight, nn.Parameter)
    assert nn.Module._apply is apply  # the replacement lasts for the build only


def test_cast_keeps_shared_tensors_shared_and_skips_kept_names():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].weight = model[0].weight
    model[0].weight.requires_grad_(False)
    cast = cast_to_bf16(model, keep={"1.bias"})
    assert cast == ["0.bias", "0.weight", "1.weight"]
    assert model[1].weight is model[0].weight and model[0].weight.requires_grad is False
    assert model[1].bias.dtype == torch.float32


def test_real_build_repeats_the_fake_builds_cast():
    session = Session(f"{BUILD}:declared_router", dtype="float32")
    model = build_real(framework_build.declared_router, 0, plan=session.dtype_plan)
    assert _fp32(model) == _fp32(session.module)
    assert not isinstance(model.model.norm.weight, torch._subclasses.FakeTensor)


def test_verify_float32_allows_the_declared_bias_and_reports_the_pinned_one(cli):
    code, out, _ = cli("verify", f"{BUILD}:declared_router", "--cuts", "1", "--dtype", "float32")
    assert code == 0 and "GC501" not in out
    code, out, _ = cli("verify", f"{BUILD}:undeclared_fp32", "--cuts", "1", "--dtype", "float32")
    assert code == 1
    assert f"parameter {BIAS.format(0)} is float32" in out
    assert "fp32_params" in out  # the fix names the declaration


def test_api_dtype_parity():
    explorer = graphcheck.api.Explorer(f"{BUILD}:pp_config_router", dtype="float32")
    assert explorer.session.dtype is BuildDtype.FLOAT32
    declared = explorer.session.dtype_plan.declared
    assert declared and set(declared) <= set(explorer.allow_fp32)  # GC501 allows them


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("verify", f"{BUILD}:declared_router", "--cuts", "1", "--dtype", "float16"), "float16"),
        (
            ("verify", f"{BUILD}:declared_router", "--cuts", "1", "--dtype", "float32",
             "--stage-builder", "keep-index"),
            "--stage-builder",
        ),
    ],
)  # fmt: skip
def test_bad_dtype_options_are_one_line_exit_2(cli, argv, words):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_dtype_of_a_built_module_or_unknown_name_is_a_usage_error():
    with pytest.raises(UsageError, match="not a built module"):
        Session(nn.Linear(2, 2), dtype="float32")
    with pytest.raises(UsageError, match="bfloat16 or float32"):
        build_dtype("half")
