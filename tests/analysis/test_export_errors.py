"""An export failure names the line of the user's model that failed.

The message stays one line (torch's first line); :attr:`ExportError.detail` holds the
innermost frame of the model code with its source line, the data-dependent
expression or guard, and a hint only where it applies. The command line prints the
detail indented below the error line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness import FIXTURES, spec
from torch import nn

from graphcheck.analysis.export import export_model
from graphcheck.analysis.export_failure import user_frame
from graphcheck.errors import ExportError
from graphcheck.model.load import build_fake, fake_mode

BRANCH = "if input_ids.sum() > 0:"


def _line_of(path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_cli_shows_the_failing_line_of_the_fixture(cli):
    code, out, err = cli("verify", spec("violations:export_fails"), "--cuts", "4")
    assert (code, out) == (2, "")
    first, *detail = err.splitlines()
    assert first.startswith("graphcheck: error: torch.export failed: ")
    assert "data-dependent expression Eq(u0, 1)" in first
    line = _line_of(FIXTURES / "violations.py", BRANCH)
    assert detail[0].startswith("  at ") and detail[0].endswith(f"violations.py:{line} in forward")
    assert detail[1].strip().startswith(BRANCH)
    assert "  expression: Eq(u0, 1)" in detail
    assert any("draft_export" in d for d in detail) and "--strict" not in err
    assert all(d.startswith("  ") for d in detail) and "Traceback" not in err


class NumpyLM(nn.Module):
    """Reads its input through ``.numpy()``: the non-strict tracer's fake tensors
    have no data, dynamo would trace the numpy calls."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)

    def forward(self, input_ids):
        return self.embed(torch.from_numpy(input_ids.numpy()))


def _export_error(model_class: type[nn.Module]) -> ExportError:
    mode = fake_mode()
    with pytest.raises(ExportError) as info:
        export_model(build_fake(model_class, mode), mode)
    return info.value


def test_message_is_one_line_and_the_hint_fits_the_failure():
    err = _export_error(NumpyLM)
    assert "\n" not in str(err) and str(err).startswith("torch.export failed: RuntimeError")
    line = _line_of(Path(__file__), "from_numpy(input_ids")
    assert err.detail[0].endswith(f"test_export_errors.py:{line} in forward")
    assert err.detail[1] == "  return self.embed(torch.from_numpy(input_ids.numpy()))"
    assert err.detail[-1] == "hint: the non-strict tracer cannot run this; try --strict"
    assert not any("draft_export" in line for line in err.detail)


def test_frames_in_torchs_text_count_when_the_traceback_has_none():
    """Strict export reports the user's frames in its message only; torch shortens
    its own paths there, and those are never the user's."""
    fixture = FIXTURES / "violations.py"
    line = _line_of(fixture, BRANCH)
    err = RuntimeError(
        "Data-dependent branching\n"
        f'from user code:\n  File "{fixture}", line {line}, in forward\n'
        "Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)"
    )
    frame = user_frame(err)
    assert (frame.filename, frame.lineno, frame.name) == (str(fixture), line, "forward")
    assert frame.line.startswith(BRANCH)
