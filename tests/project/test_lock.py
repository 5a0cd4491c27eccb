"""``graphcheck lock`` and ``graphcheck check --locked`` on a temporary git repository
holding a copy of ``fixtures/lockable.py``: a window edit on layer 5, an fp32 skip
across cuts and a comment-only edit, each read back in words; the lock's own shape
(deterministic, one fact per line, a distinct layer program stored once); the diff's
words and grouping on hand-made locks (no export).
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess

import jsonschema
import pytest
from harness import ROOT

from graphcheck.project.diff import ChangeKind, diff_lock
from graphcheck.project.lock import FORMAT, ModelState, dumps

FIXTURE = ROOT / "fixtures/lockable.py"
SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
CONFIG = """\
[tool.graphcheck]
require_stage_programs = false  # lockable is not pipeline-aware: no stage builder can be had
[[tool.graphcheck.checks]]
name = "lockable"
model = "lockable.py:lockable"
cuts = [3]
"""
CALL = "window_size=self.window_size)"
LOOP = "        for layer in self.layers:\n            x = layer(x, *varlen)\n"
SKIP = """\
        for i, layer in enumerate(self.layers):
            x = layer(x, *varlen)
            if i == 0:
                skip = x.float()
            if i == 3:
                x = (x.float() + skip).to(x.dtype)
"""


def _git(repo, *argv: str) -> None:
    identity = ("-c", "user.name=graphcheck", "-c", "user.email=graphcheck@localhost")
    subprocess.run(["git", *identity, *argv], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with the model and its configuration, as the working folder."""
    shutil.copy(FIXTURE, tmp_path / "lockable.py")
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "model")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _edit(repo, old: str, new: str) -> str:
    """Restore the committed model, then replace ``old`` (once) by ``new``."""
    _git(repo, "checkout", "-q", "--", "lockable.py")
    path = repo / "lockable.py"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")
    return new


def _lock_section(out: str) -> list[str]:
    return out.split("== lock: ", 1)[1].splitlines()


def test_lock_then_a_window_edit_an_fp32_skip_and_a_comment(repo, cli):
    stale = _lock(_entry(["a"], {"a": OPS}))  # a model the configuration no longer lists
    (repo / "graphcheck.lock").write_text(dumps(stale), encoding="utf-8")
    code, out, err = cli("lock")
    assert code == 0, err
    assert out.splitlines()[-1].endswith("wrote graphcheck.lock")
    locked = (repo / "graphcheck.lock").read_text(encoding="utf-8")
    data = json.loads(locked)
    assert list(data["models"]) == ["lockable"]  # the stale model "m" is gone
    model = data["models"]["lockable"]
    assert [kind for _, _, kind in model["layers"]][2:4] == [
        "window 9 · dense",
        "full attention · dense",
    ]
    layer_programs = {fp for _, fp, _ in model["layers"]}
    assert len(layer_programs) == 2  # five identical layers, their program stored once
    assert [edge for edge, _ in model["edges"]] == ["input", "glue", "output"]
    assert set(model["programs"]) == layer_programs | {fp for _, fp in model["edges"]}
    assert [b[1] for b in model["boundaries"]] == ["pass"] * 7
    assert model["plans"] == [["cuts 3", "pass", []]]
    assert (model["model"], list(model["sources"])) == ("lockable.py:lockable", ["lockable.py"])
    assert set(data["versions"]) == {"graphcheck", "torch", "transformers"}

    # layer 5 attends with another window: named, with the argument and the edited line
    _edit(repo, CALL, "window_size=(4, 0) if self.layer_idx == 5 else self.window_size)")
    code, out, _ = cli("check", "--locked")
    assert code == 1
    changes = _lock_section(out)
    (layer,) = [line for line in changes if "layer" in line and "✗" in line]
    assert "layer 5: torch_attn._varlen_attn" in layer and "window_size [-1, 0] → [4, 0]" in layer
    where = changes[changes.index(layer) + 1].strip()
    assert where.startswith("at lockable.py:") and "if self.layer_idx == 5 else" in where
    assert "source changed (lockable.py), programs changed" in out

    # an fp32 skip from after layer 0 to after layer 3: the boundaries it crosses (at 1
    # the residual is the skip; the cast to fp32 is placed where it is read)
    _edit(repo, LOOP, SKIP)
    code, out, _ = cli("check", "--locked", "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    assert not [e.message for e in validator.iter_errors(log)]
    (run,) = log["runs"]
    lock = {r["message"]["text"] for r in run["results"] if r["ruleId"] == "lock/boundary"}
    assert lock == {
        f"lockable: boundary {k}: legal → illegal (GC201); activations crossing now: "
        "bfloat16[1, T, 32], bfloat16[1, T, 32]"
        for k in (2, 3)
    }
    at = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert at == {"lockable.py", "pyproject.toml"}  # boundaries and plans: where declared
    plans = [r for r in run["results"] if r["ruleId"] == "lock/plan"]
    assert [r["message"]["text"] for r in plans] == [
        "lockable: plan cuts 3: proven → fails (GC201)"
    ]
    assert not [r for r in run["results"] if r["ruleId"] == "lock/layer"]
    (glue,) = [r for r in run["results"] if r["ruleId"] == "lock/edge"]
    assert glue["message"]["text"].startswith("lockable: model-level code: new ")
    region = glue["locations"][0]["physicalLocation"]["region"]
    lines = (repo / "lockable.py").read_text(encoding="utf-8").splitlines()
    assert "skip" in lines[region["startLine"] - 1]  # a line the edit added
    assert {r["ruleId"] for r in run["results"]} >= {"GC201"}

    # a comment: re-exported (the source hash moved), no program changed
    _edit(repo, "class Layer(nn.Module):\n", "# a comment\nclass Layer(nn.Module):\n")
    code, out, _ = cli("check", "--locked")
    assert code == 0
    assert _lock_section(out)[1:-1] == [
        "  · lockable: source changed (lockable.py), programs unchanged"
    ]

    # the lock rewritten: one line differs, the source hash
    code, _, _ = cli("lock")
    assert code == 0
    rewritten = (repo / "graphcheck.lock").read_text(encoding="utf-8")
    diff = [
        line
        for line in difflib.unified_diff(locked.splitlines(), rewritten.splitlines(), n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert [line[:1] for line in diff] == ["-", "+"] and '"lockable.py": ' in diff[0]


def test_update_rewrites_the_lock_and_exits_with_the_checks(repo, cli):
    assert cli("lock")[0] == 0
    _edit(repo, CALL, "window_size=(4, 0) if self.layer_idx == 5 else self.window_size)")
    code, out, _ = cli("check", "--locked", "--update")
    assert code == 0  # the change is reported, and now recorded
    assert "✗ lockable: layer 5:" in out and "the lock now records these changes" in out
    programs = json.loads((repo / "graphcheck.lock").read_text("utf-8"))["models"]["lockable"]
    ops = [op for ops in programs["programs"].values() for op in ops]
    assert any("window_size=[4, 0]" in op for op in ops)


def test_a_missing_or_foreign_lock_is_exit_2_before_any_export(repo, cli):
    code, out, err = cli("check", "--locked")
    assert (code, out) == (2, "")
    assert err == (
        f"graphcheck: error: no graphcheck.lock next to {repo}: run graphcheck lock first\n"
    )
    (repo / "graphcheck.lock").write_text('{"lock": 0}', encoding="utf-8")
    code, _, err = cli("check", "--locked")
    assert code == 2 and "not a lock of this graphcheck's format; run graphcheck lock" in err
    damaged = _lock(_entry(["a"], {"a": OPS}))
    del damaged["models"]["m"]["boundaries"]
    (repo / "graphcheck.lock").write_text(dumps(damaged), encoding="utf-8")
    code, _, err = cli("check", "--locked")
    assert code == 2 and "m.boundaries is missing or malformed; run graphcheck lock" in err
    (repo / "graphcheck.lock").write_text("{", encoding="utf-8")
    code, _, err = cli("check", "--locked")
    assert code == 2 and "not a graphcheck lock" in err and err.count("\n") == 1


def test_lock_is_left_as_it_was_when_a_check_cannot_run(repo, cli):
    config = CONFIG.replace("lockable.py:lockable", "lockable.py:no_such_factory")
    (repo / "pyproject.toml").write_text(config, encoding="utf-8")
    code, out, _ = cli("lock")
    assert code == 2 and "error: lockable.py has no callable 'no_such_factory'" in out
    assert out.splitlines()[-1].endswith("graphcheck.lock left as it was: a check could not run")
    assert not (repo / "graphcheck.lock").exists()


# --- the diff on hand-made locks ------------------------------------------------------------

OPS = [["aten.linear", "bfloat16[1, T, 32]"], ["aten.silu", "bfloat16[1, T, 32]"]]
ADDED = [*OPS, ["aten.add.Tensor", "bfloat16[1, T, 32]"]]


def _entry(fingerprints: list[str], programs: dict, boundaries=None, plans=None) -> dict:
    layers = [[i, fp, "dense"] for i, fp in enumerate(fingerprints)]
    default = [[k, "pass", [], []] for k in range(len(fingerprints) + 1)]
    return {
        "model": "m.py:f",
        "layers": layers,
        "edges": [],
        "programs": programs,
        "boundaries": boundaries or default,
        "findings": [],
        "plans": plans or [["stages 2", "pass", []]],
        "sources": {"m.py": "aaaa"},
    }


def _lock(entry: dict, versions: dict | None = None) -> dict:
    versions = versions or {"graphcheck": "1", "torch": "2", "transformers": "3"}
    return {"lock": FORMAT, "versions": versions, "models": {"m": entry}}


VERSIONS = {"graphcheck": "1", "torch": "2", "transformers": "3"}


def test_consecutive_layers_with_the_same_change_are_one_group():
    old = _entry(["a"] * 48, {"a": OPS})
    new = _entry(["a"] * 12 + ["b"] * 36, {"a": OPS, "b": ADDED})
    diff = diff_lock(_lock(old), VERSIONS, {"m": ModelState(new)})
    (change,) = diff.changes
    assert change.message == "layers 12-47: new aten.add.Tensor after aten.silu"
    assert (change.kind, change.fails, diff.exit_code) == (ChangeKind.LAYER, True, 1)


def test_boundaries_and_plans_both_ways_and_versions_alone():
    old = _entry(
        ["a", "a"],
        {"a": OPS},
        [[0, "pass", [], []], [1, "fail", ["GC201"], []]],
        [["stages 2", "pass", []], ["cuts 9", "pass", []]],
    )
    new = _entry(
        ["a", "a"],
        {"a": OPS},
        [[0, "fail", ["GC202"], ["activation float32[1, T, 32]"]], [1, "pass", [], []]],
        [["stages 2", "fail", ["GC202"]], ["cuts 1", "pass", []]],
    )
    diff = diff_lock(_lock(old), VERSIONS, {"m": ModelState(new)})
    assert [(c.message, c.fails) for c in diff.changes] == [
        (
            "boundary 0: legal → illegal (GC202); activations crossing now: float32[1, T, 32]",
            True,
        ),
        ("boundary 1: illegal (GC201) → legal", False),
        ("plan cuts 9 is in the lock but no longer checked", False),
        ("plan stages 2: proven → fails (GC202)", True),
        ("plan cuts 1 is not in the lock: run graphcheck lock (or check --update)", True),
    ]
    same = diff_lock(_lock(old, {**VERSIONS, "torch": "9"}), VERSIONS, {"m": ModelState(old)})
    assert [(c.kind, c.message, c.fails) for c in same.changes] == [
        (ChangeKind.VERSIONS, "library versions changed: torch 9 → 2; nothing else changed", False)
    ]
    assert same.exit_code == 0


def test_an_argument_change_is_said_with_both_values():
    before = [["torch_attn._varlen_attn", "(Tensor, Tensor)", "window_size=[-1, 0]"]]
    after = [["torch_attn._varlen_attn", "(Tensor, Tensor)", "window_size=[4095, 0]"]]
    old = _entry(["a", "a"], {"a": before})
    new = _entry(["a", "b"], {"a": before, "b": after})
    (change,) = diff_lock(_lock(old), VERSIONS, {"m": ModelState(new)}).changes
    assert change.message == "layer 1: torch_attn._varlen_attn window_size [-1, 0] → [4095, 0]"


def test_the_lock_is_one_fact_per_line_and_reads_back():
    entry = _entry(["a", "a"], {"a": OPS})
    text = dumps(_lock(entry))
    assert json.loads(text) == _lock(entry)
    ops = '      "programs": {\n        "a": [\n          ["aten.linear", "bfloat16[1, T, 32]"],'
    assert ops in text
    assert '        [0, "a", "dense"],\n        [1, "a", "dense"]\n' in text
    assert dumps(_lock(entry)) == text


def test_lock_changes_in_markdown_and_json():
    from pathlib import Path

    from markdown_it import MarkdownIt

    from graphcheck.project.check import CheckResult
    from graphcheck.report import render

    old = _entry(["a"] * 48, {"a": OPS})
    new = _entry(["a"] * 12 + ["b"] * 36, {"a": OPS, "b": ADDED})
    result = CheckResult(
        Path("pyproject.toml"), [], diff_lock(_lock(old), VERSIONS, {"m": ModelState(new)})
    )
    assert result.exit_code == 1
    tokens = MarkdownIt("commonmark").enable("table").parse(render(result, "markdown"))
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["❌ graphcheck check: FAIL", "graphcheck.lock: 1 change"]
    items = [tokens[i + 2].content for i, t in enumerate(tokens) if t.type == "list_item_open"]
    assert items == ["❌ **m** layers 12-47: new aten.add.Tensor after aten.silu"]
    data = json.loads(render(result, "json"))
    assert (data["verdict"], data["lock"]["verdict"]) == ("fail", "changed")
    assert data["lock"]["changes"] == [
        {
            "kind": "layer",
            "model": "m",
            "message": "layers 12-47: new aten.add.Tensor after aten.silu",
            "fails": True,
            "source": None,
        }
    ]


def test_layers_added_or_removed_and_whole_program_findings():
    old = _entry(["a"] * 4, {"a": OPS})
    new = _entry(["a"] * 6, {"a": OPS})
    new["findings"] = ["GC403"]
    diff = diff_lock(_lock(old), VERSIONS, {"m": ModelState(new)})
    assert [(c.kind, c.message, c.fails) for c in diff.changes] == [
        (ChangeKind.LAYER, "layers 4-5: new layer (the lock has none at this index)", True),
        (ChangeKind.FINDINGS, "whole-program findings none → GC403", True),
    ]
    fewer = diff_lock(_lock(new), VERSIONS, {"m": ModelState(old)})
    assert [(c.message, c.fails) for c in fewer.changes] == [
        ("layers 4-5: layer removed (the lock has it, this run does not)", True),
        ("whole-program findings GC403 → none", False),
    ]
    unknown = diff_lock(_lock(old), VERSIONS, {"other": ModelState(old)})
    assert [(c.kind, c.fails) for c in unknown.changes] == [(ChangeKind.MODEL, True)]
