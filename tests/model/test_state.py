"""Library calls leave the caller's process as they found it, and a user's stage
builder that raises is one line and exit 2 on every path."""

from __future__ import annotations

import json
import logging
import os
import warnings

import pytest
from harness import spec
from torch import nn

import graphcheck
from graphcheck.analysis.export import export_model
from graphcheck.model.load import build_fake, fake_mode, resolve_factory

BAD_BUILDER = "def build(model, index, layers, num_stages):\n    raise KeyError('boom')\n"


@pytest.fixture
def bad_builder(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(BAD_BUILDER)
    return f"{path}:build"


def test_raising_stage_builder_is_one_line_exit_2_on_verify(cli, bad_builder):
    code, out, err = cli(
        "verify", spec("reference:reference"), "--cuts", "4", "--stage-builder", bad_builder
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "stage builder" in err and "KeyError" in err and "stage 0" in err


def test_raising_stage_builder_is_one_line_exit_2_on_gate(cli, bad_builder):
    code, out, err = cli(
        "gate", spec("reference:reference"), "--cuts", "4", "--stage-builder", bad_builder
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "stage builder" in err and "KeyError" in err


def test_raising_builder_callable_in_the_api_is_a_graphcheck_error():
    def build(model, index, layers, num_stages):
        raise KeyError("boom")

    factory = resolve_factory(spec("reference:reference"))
    with pytest.raises(graphcheck.ModelLoadError, match="KeyError"):
        graphcheck.verify(factory, [4], stage_builder=build)


class KwargsLM(nn.Module):
    """A ``**kwargs`` forward (export wraps it) whose export fails: a Python branch
    on a tensor value."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)

    def forward(self, input_ids, **kwargs):
        if input_ids.sum() > 0:
            return self.embed(input_ids)
        return self.embed(input_ids + 1)


def test_failed_export_leaves_the_users_module_unchanged():
    mode = fake_mode()
    model = build_fake(KwargsLM, mode)
    forward = model.forward
    with pytest.raises(graphcheck.ExportError):
        export_model(model, mode)
    assert "forward" not in vars(model)  # the explicit-argument wrapper is gone
    assert model.forward == forward


def test_cli_restores_warning_filters_and_log_level(cli):
    logger = logging.getLogger("torch")
    logger.setLevel(logging.INFO)
    warnings.simplefilter("default", ResourceWarning)
    before = list(warnings.filters)
    try:
        code, _, _ = cli("verify", spec("reference:reference"), "--cuts", "4")
        assert code == 0
        assert warnings.filters == before
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(logging.NOTSET)
        warnings.filters.remove(("default", None, ResourceWarning, None, 0))


def test_cli_restores_them_when_the_run_fails(cli):
    logger = logging.getLogger("torch")
    before, level = list(warnings.filters), logger.level
    code, _, err = cli("verify", spec("violations:export_fails"), "--cuts", "4")
    assert code == 2 and "torch.export failed" in err
    assert warnings.filters == before and logger.level == level


def test_hf_build_leaves_hf_hub_offline_as_it_was(monkeypatch):
    pytest.importorskip("transformers")
    from graphcheck.model.hf import build_config

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    build_config("hf:llama")
    assert "HF_HUB_OFFLINE" not in os.environ
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    build_config("hf:llama")
    assert os.environ["HF_HUB_OFFLINE"] == "0"


def test_api_allow_fp32_adds_to_the_default_allowlist():
    """``allow_fp32`` means what ``--allow-fp32`` means: more globs, not a new list."""
    fp32 = {"stage_builder": "none"}  # the partition's rules alone
    report = graphcheck.verify(spec("violations:fp32_allowlisted"), [4], allow_fp32=["x.*"], **fp32)
    assert report.verdict == "pass", report.codes
    report = graphcheck.verify(spec("violations:fp32_param"), [4], allow_fp32=["*.A_log"], **fp32)
    assert "GC501" in report.codes  # a name outside the allowlist still fails


CHATTY = """
import sys
sys.path.insert(0, {fixtures!r})
from reference import CausalLM, Config

class Chatty(CausalLM):
    def forward(
        self, input_ids, position_ids, cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k
    ):
        print("tracing the chatty model")
        varlen = (cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k)
        return super().forward(input_ids, position_ids, *varlen)

def chatty():
    print("building the chatty model")
    return Chatty(Config(num_hidden_layers=2))
"""


def test_what_the_model_prints_goes_to_stderr_not_into_the_json(cli, tmp_path):
    from harness import ROOT

    path = tmp_path / "chatty.py"
    path.write_text(CHATTY.format(fixtures=str(ROOT / "fixtures")))
    code, out, err = cli("verify", f"{path}:chatty", "--cuts", "1", "--format", "json")
    assert code == 0
    assert json.loads(out)["verdict"] == "pass"
    assert "building the chatty model" in err and "tracing the chatty model" in err
