"""Every transformers decoder family: tiny configs that build, and the README coverage table.

``hf:<model_type>`` must build for families whose defaults name real token ids (clipped into
the tiny vocabulary), per-layer tables and fixed-depth layer lists; ``scripts/coverage.py``
sorts ``graphcheck map`` runs into outcomes and keeps README's table, one row per family of
the pinned transformers.
"""

from __future__ import annotations

import doctest
import json

import pytest
from harness import ROOT, script

from graphcheck.errors import ModelLoadError
from graphcheck.model.hf import _defaults, build_config, clip_token_ids, hf_factory
from graphcheck.model.load import build_fake, fake_mode

coverage = script("coverage")


# --- tiny configs ----------------------------------------------------------------------------


def test_smollm3_builds_with_its_pad_id_inside_the_tiny_vocab():
    config = build_config("hf:smollm3")
    assert config.vocab_size == 256 and 0 <= config.pad_token_id < 256
    model = build_fake(hf_factory("hf:smollm3", {"num_hidden_layers": 1}), fake_mode())
    embed = model.model.embed_tokens
    assert embed.num_embeddings == 256 and embed.padding_idx == config.pad_token_id


def test_token_ids_beyond_the_vocab_are_clipped_lists_too():
    values = {
        "pad_token_id": 300,
        "eos_token_id": [2, 128001, 128009],
        "image_token_index": 256,
        "bos_token_id": 1,  # inside: kept
        "sep_token_id": None,
        "decoder_start_token_id": -1,  # below: not an index past the table
        "use_token_ids": True,  # a flag, not an id
        "max_position_embeddings": 4096,  # not a token id
    }
    assert clip_token_ids(values, 256) == {
        "pad_token_id": 255,
        "eos_token_id": [2, 255, 255],
        "image_token_index": 255,
    }
    assert clip_token_ids(values, 256, keep={"pad_token_id"}) == {
        "eos_token_id": [2, 255, 255],
        "image_token_index": 255,
    }
    assert clip_token_ids(values, None) == {}


def test_clipping_follows_the_vocab_and_spares_set_ids():
    config = build_config("hf:smollm3", {"vocab_size": 100})  # 128004, 128000, 128001
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (99, 99, 99)
    kept = build_config("hf:smollm3", {"pad_token_id": 7})
    assert (kept.pad_token_id, kept.bos_token_id) == (7, 255)


def test_family_tables_shrink_with_the_depth():
    zamba2 = build_config("hf:zamba2")  # layer types of a fixed length: their first entries
    assert zamba2.num_hidden_layers == 8 and len(zamba2.layers_block_type) == 8
    gemma4 = build_config("hf:gemma4_text")  # per-layer head dim: twice the tiny one
    full = [i for i, kind in enumerate(gemma4.layer_types) if kind == "full_attention"]
    table = gemma4.to_dict()["per_layer_config"]
    assert sorted(int(k) for k in table) == full and 7 in full  # the depth's own last layer
    assert {entry["head_dim"] for entry in table.values()} == {32}


def test_text_config_outside_the_auto_mapping_uses_the_listed_class():
    assert hf_factory("hf:mllama").__name__ == "MllamaForCausalLM[mllama_text_model]"


def test_family_with_its_own_attention_table_says_why_in_one_line():
    with pytest.raises(ModelLoadError, match="git picks its attention from its own table") as err:
        build_fake(hf_factory("hf:git", {"num_hidden_layers": 1}), fake_mode())
    assert "\n" not in str(err.value) and "attn_implementation=eager" in str(err.value)


def test_invalid_default_config_is_one_line():
    class Broken:
        def __init__(self):
            raise ValueError("checks\nhidden_size_per_layer_input must be 0, got 256")

    with pytest.raises(ModelLoadError) as err:
        _defaults(Broken, "hf:broken")
    assert str(err.value) == (
        "hf:broken: the default Broken is invalid: hidden_size_per_layer_input must be 0, got 256"
    )


# --- the coverage page's table ---------------------------------------------------------------


def _rows() -> list[list[str]]:
    text = (ROOT / "docs" / "explanation" / "coverage.md").read_text(encoding="utf-8")
    start, stop = text.index(coverage.BEGIN), text.index(coverage.END)
    lines = [ln for ln in text[start:stop].splitlines() if ln.startswith("| `")]
    return [[cell.strip() for cell in ln.strip("|").split(" | ")] for ln in lines]


def test_readme_table_has_one_row_per_family_of_the_pinned_transformers():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    rows = _rows()
    names = [row[0].strip("`") for row in rows]
    assert sorted(names) == sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert len(names) == len(set(names))
    outcomes = {str(o) for o in coverage.LABELS}
    assert all(row[4] in outcomes for row in rows), [r for r in rows if r[4] not in outcomes]


def test_readme_table_has_evidence_wherever_the_gate_can_speak():
    path = ROOT / "docs" / "coverage.json"
    saved = {r["family"]: r for r in json.loads(path.read_text(encoding="utf-8"))["results"]}
    for family, result in coverage.load(path).items():
        kind, shown = coverage.judge(result)
        assert saved[family]["evidence"] == coverage.evidence_text(result)
        assert (kind is coverage.Evidence.NONE) == (result.outcome == "unsupported"), family
        assert (kind, shown) != (coverage.Evidence.NOT_EXECUTED, "not run"), family


def test_readme_table_is_the_committed_results():
    path = ROOT / "docs" / "coverage.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    results = list(coverage.load(path).values())
    text = (ROOT / "docs" / "explanation" / "coverage.md").read_text(encoding="utf-8")
    table = coverage.markdown(results, saved["transformers"])
    assert coverage.rewrite(text, table) == text, "run scripts/coverage.py --load ... --write"


# --- the classifier --------------------------------------------------------------------------


def _report(verdicts: str, *diagnostics: tuple[str, str] | tuple[str, str, str]) -> str:
    cuts = [{"position": i, "verdict": v} for i, v in enumerate(verdicts.split())]
    diags = [
        {"code": d[0], "name": "n" + d[0], "severity": d[1], "message": d[2] if d[2:] else "m"}
        for d in diagnostics
    ]
    return json.dumps({"cuts": cuts, "diagnostics": diags, "export_seconds": 1.5, "nodes": 9})


UNKNOWN = "`aten.min.other` is not in graphcheck's op table and touches the token dimension"


def test_exit_0_is_all_cuts_proven():
    result = coverage.classify("llama", 0, _report("pass pass pass"), "", 2.0)
    assert (result.outcome, result.exported, result.cuts) == ("all cuts proven", "yes", "3/3")
    assert result.codes == {}
    assert "| all cuts proven | not executed: not run | - |" in coverage._row(result)


def test_exit_1_lists_the_distinct_error_codes():
    diags = [("GC205", "error")] * 3 + [("GC501", "error"), ("GC302", "warning")]
    result = coverage.classify("gpt2", 1, _report("fail fail pass", *diags), "")
    assert result.outcome == "true finding" and result.cuts == "1/3"
    assert result.codes == {"GC205": 3, "GC501": 1}
    assert "GC205 nGC205 ×3, GC501 nGC501 ×1" in coverage._row(result)


def test_findings_that_only_fail_closed_on_unknown_ops_are_unsupported():
    only = _report("pass fail", ("GC401", "error", UNKNOWN), ("GC401", "error", UNKNOWN))
    result = coverage.classify("apertus", 1, only, "")
    assert (result.outcome, result.exported, result.cuts) == ("unsupported", "yes", "1/2")
    assert coverage._details(result) == (
        "fail closed on ops graphcheck's table lacks: aten.min.other (GC401 nGC401 ×2)"
    )
    mixed = _report("fail", ("GC205", "error"), ("GC401", "error", UNKNOWN), ("GC401", "error"))
    result = coverage.classify("x", 1, mixed, "")
    assert result.outcome == "true finding" and result.codes == {"GC205": 1, "GC401": 1}
    assert coverage._details(result) == (
        "GC205 nGC205 ×1, GC401 nGC401 ×1; also fail closed on aten.min.other (GC401 ×1)"
    )


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "exported", "reason"),
    [
        (
            2,
            "",
            "Some warning\ngraphcheck: error: torch.export failed: GuardOnDataDependentSymNode: "
            "Eq(u0, 1)\n  at /x/transformers/models/a/modeling_a.py:57 in forward\n"
            "    if x:\n  expression: Eq(u0, 1)\n",
            "no (export failed)",
            "torch.export failed: GuardOnDataDependentSymNode: Eq(u0, 1) (at modeling_a.py:57)",
        ),
        (
            2,
            "",
            "graphcheck: error: factory AutoModelForCausalLM[a]() raised ModelLoadError: "
            "a reads a tensor's value while it is built\n",
            "no (build failed)",
            "a reads a tensor's value while it is built",
        ),
        (
            2,
            "",
            "graphcheck: error: no decoder-layer container found; pass --layers PREFIX\n",
            "no (layout not found)",
            "no decoder-layer container found; pass --layers PREFIX",
        ),
        (
            1,
            "",
            "Traceback (most recent call last):\n  ...\nValueError: boom\n",
            "no",
            "crashed (exit 1): ValueError: boom",
        ),
        (None, "", "", "no", "timed out after 300 s"),
    ],
)
def test_failures_are_unsupported_with_their_first_error_line(
    code, stdout, stderr, exported, reason
):
    result = coverage.classify("a", code, stdout, stderr, 300.0)
    assert (result.outcome, result.exported, result.cuts) == ("unsupported", exported, "-")
    assert coverage._details(result) == reason


def test_markdown_summary_and_rewrite_between_the_markers():
    results = [
        coverage.classify("a", 0, _report("pass"), ""),
        coverage.classify("b", 1, _report("fail", ("GC205", "error")), ""),
        coverage.classify("c", None, "", "", 5.0),
    ]
    table = coverage.markdown(results, "9.9")
    assert "transformers 9.9" in table
    assert (
        "3 families: 1 all cuts proven, 1 true finding, 0 false alarm, 0 finding not checked, "
        "1 unsupported" in table
    )
    assert "gate evidence: 0 isolated, 0 WRONG PASS, 0 stage programs differ, 0 leak shown" in table
    assert "1 not about documents, 1 not executed" in table
    assert "* **WRONG PASS**: none" in table and "not run yet: `a`" in table
    assert table.count("\n| `") == 3
    text = f"intro\n{coverage.BEGIN}\nold\n{coverage.END}\nrest\n"
    assert (
        coverage.rewrite(text, table)
        == f"intro\n{coverage.BEGIN}\n\n{table}\n{coverage.END}\nrest\n"
    )


def test_script_refuses_unknown_families_and_partial_writes(tmp_path, capsys):
    assert coverage.main(["--only", "no_such_family"]) == 2
    assert "not a causal-LM family: no_such_family" in capsys.readouterr().err
    saved = tmp_path / "partial.json"
    coverage.save(saved, [coverage.classify("llama", 0, _report("pass"), "")], "5.24.0")
    before = (ROOT / "docs" / "explanation" / "coverage.md").read_text(encoding="utf-8")
    assert coverage.main(["--load", str(saved), "--write"]) == 2
    assert "--write needs every family" in capsys.readouterr().err
    assert (ROOT / "docs" / "explanation" / "coverage.md").read_text(encoding="utf-8") == before


# --- execution evidence ----------------------------------------------------------------------


def _gate(bytes_="equal", perturb="bitwise", shift="bitwise", codes=("GC401",), **extra) -> str:
    """A ``graphcheck gate --format json`` report, cut to what the script reads."""
    crossing = {"test": "perturb", "document": 1, "token": 0, "layer": 2,
                "layer_fqn": "model.layers.2", "parameter": None, "max_abs_diff": 0.5}  # fmt: skip
    tests = {
        name: {"status": status, "crossing": crossing | {"test": name} if status == "fail"
               else None, "changed": [1] if status == "fail" else []}
        for name, status in (("perturb", perturb), ("shift", shift))
    }  # fmt: skip
    isolation = "bitwise" if perturb == shift == "bitwise" else "fail"
    report = {
        "bytes": {
            "status": bytes_,
            "message": extra.pop("message", ""),
            "first_diff": extra.pop("first", None),
            "max_abs_diff": 0.0,
        },
        "isolation": {"status": isolation, **tests, "alone": None},
        "static": {"verdict": "fail" if codes else "pass", "codes": list(codes)},
        "agrees": True,
        **extra,
    }
    return json.dumps(report)


def _with_gate(result, stdout, code=None):
    exit_code = code if code is not None else (0 if '"isolation": {"status": "bitwise"' in stdout
                                               and '"equal"' in stdout else 1)  # fmt: skip
    result.gate = coverage.gate_record(4, exit_code, stdout, "", 20.0)
    return result


def _proven():
    return coverage.classify("llama", 0, _report("pass pass pass"), "")


def _leaky(*codes):
    return coverage.classify("x", 1, _report("fail pass", *[(c, "error") for c in codes]), "")


def test_gate_record_reads_the_statuses_the_first_crossing_and_the_static_verdict():
    run = coverage.gate_record(4, 1, _gate(perturb="fail", shift="fail"), "", 21.04)
    assert (run.cut, run.exit, run.bytes, run.isolation) == (4, 1, "equal", "fail")
    assert (run.perturb, run.shift, run.seconds) == ("fail", "fail", 21.0)
    assert run.crossing == {"test": "perturb", "document": 1, "token": 0, "layer": 2,
                            "layer_fqn": "model.layers.2", "max_abs_diff": 0.5}  # fmt: skip
    assert (run.static, run.static_codes, run.agrees, run.reason) == ("fail", ["GC401"], True, "")
    shift_only = coverage.gate_record(4, 1, _gate(shift="fail"), "")
    assert shift_only.crossing["test"] == "shift" and shift_only.perturb == "bitwise"


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "reason"),
    [
        (None, "", "", "timed out after 300 s"),
        (2, "", "graphcheck: error: export failed: boom\n  at x.py:3\n", "export failed: boom"),
        (1, "", "Traceback (most recent call last):\nOSError: x\n", "crashed (exit 1): OSError: x"),
        (1, _gate("blocked", message="1 raised"), "", "a stage could not run: 1 raised"),
    ],
)  # fmt: skip
def test_a_gate_that_could_not_compare_is_not_executed(code, stdout, stderr, reason):
    result = _proven()
    result.gate = coverage.gate_record(4, code, stdout, stderr, 300.0)
    assert result.gate.reason == reason
    assert coverage.judge(result) == (coverage.Evidence.NOT_EXECUTED, reason)
    assert coverage.evidence_text(result) == f"not executed: {reason}"


def test_proven_and_isolated_stands():
    result = _with_gate(_proven(), _gate(codes=()))
    kind, shown = coverage.judge(result)
    assert kind == "isolated" and shown == "cut 4: bytes equal, perturb bitwise, shift bitwise"
    assert coverage.label(result) == "all cuts proven"
    assert "| all cuts proven | isolated (cut 4) | - |" in coverage._row(result)


@pytest.mark.parametrize(
    ("bytes_", "perturb", "shift"),
    [("equal", "fail", "bitwise"), ("equal", "bitwise", "fail"), ("differ", "bitwise", "bitwise")],
)
def test_proven_with_a_leak_or_unequal_bytes_is_a_wrong_pass(bytes_, perturb, shift):
    result = _with_gate(_proven(), _gate(bytes_, perturb, shift, codes=()))
    assert coverage.judge(result)[0] == "WRONG PASS"
    first = {"token": 7, "document": 0, "position": 7, "column": 3}
    if bytes_ == "differ":
        result = _with_gate(_proven(), _gate(bytes_, codes=(), first=first))
        assert coverage.judge(result)[1].endswith(f"first differing byte at {first}")
        staged = _with_gate(_proven(), _gate(bytes_, codes=("GC303",)))  # predicted by the gate
        assert coverage.judge(staged)[0] == "stage programs differ"
        assert coverage.judge(staged)[1].endswith("; the gate's proof: GC303")
        disagreed = _with_gate(_proven(), _gate(bytes_, codes=("GC303",), agrees=False))
        assert coverage.judge(disagreed)[0] == "WRONG PASS"
    table = coverage.markdown([result], "9.9")
    assert "0 isolated, 1 WRONG PASS" in table
    assert f"* **WRONG PASS**: `llama` (cut 4: bytes {bytes_}, perturb {perturb}" in table
    assert "| **WRONG PASS** (cut 4" in coverage._row(result)


@pytest.mark.parametrize("code", ["GC401", "GC402"])
def test_document_finding_the_gate_shows_is_a_true_finding(code):
    result = _with_gate(_leaky(code, "GC205"), _gate(perturb="fail", codes=(code, "GC205")))
    kind, shown = coverage.judge(result)
    assert kind == "leak shown" and coverage.label(result) == "true finding"
    assert shown.endswith("perturb: document 1 token 0 at layer 2 (model.layers.2)")
    assert not coverage.stale(result)


@pytest.mark.parametrize("code", ["GC401", "GC402"])
def test_document_finding_with_bitwise_isolated_documents_is_a_false_alarm(code):
    result = _with_gate(_leaky(code, "GC205"), _gate(codes=(code, "GC205")))
    assert coverage.judge(result)[0] == "false alarm"
    assert coverage.label(result) == "false alarm"  # GC205 too: the row is no true finding
    table = coverage.markdown([result], "9.9")
    assert "1 false alarm" in table and "* **WRONG PASS**: none" in table
    assert f"* **false alarm**: `x` ({code}; cut 4: bytes equal, perturb bitwise" in table
    assert "| false alarm | **false alarm** (cut 4: bytes equal" in coverage._row(result)
    unequal = _with_gate(_leaky(code), _gate(bytes_="differ", codes=(code,)))
    assert coverage.judge(unequal)[0] == "bytes differ" and coverage.label(unequal) == "false alarm"


def test_findings_not_about_documents_stand_without_a_gate():
    for codes in (("GC205",), ("GC501", "GC206"), ("GC403",)):
        result = _leaky(*codes)
        assert not coverage.needs_gate(result)
        assert coverage.judge(result) == (coverage.Evidence.OFF_TOPIC, "")
        assert coverage.label(result) == "true finding"
    unsupported = coverage.classify("a", None, "", "", 5.0)
    assert not coverage.needs_gate(unsupported) and coverage.judge(unsupported)[0] == "-"


def test_a_document_finding_not_yet_gated_is_not_checked():
    result = _leaky("GC401")
    assert coverage.needs_gate(result) and coverage.judge(result) == ("not executed", "not run")
    assert coverage.label(result) == "finding not checked"


def test_stale_when_the_gates_static_codes_differ_from_the_map_row():
    result = _with_gate(_leaky("GC401"), _gate(perturb="fail", codes=("GC401", "GC403")))
    assert coverage.stale(result)
    table = coverage.markdown([result], "9.9")
    assert "the gate's static codes differ from the map row: `x`" in table
    proven = _with_gate(_proven(), _gate(codes=()))
    assert not coverage.stale(proven)
    staged = _with_gate(_proven(), _gate(codes=("GC303",)))  # only the gate proves stages
    assert not coverage.stale(staged) and coverage.judge(staged)[0] == "isolated"


def test_a_train_program_with_dropout_is_gated_in_eval(monkeypatch):
    calls = []
    refusal = "graphcheck: error: the train program has random ops (GC304: dropout in m)\n"

    def fake(argv, timeout):
        calls.append(argv)
        if "eval" in argv:
            return 1, _gate(shift="fail", codes=("GC205", "GC402")), "", 3.0
        return 2, "", refusal, 1.0

    monkeypatch.setattr(coverage, "_graphcheck", fake)
    result = coverage.run_gate(_leaky("GC205", "GC304", "GC402"), 60.0)
    assert calls == [
        ["gate", "hf:x", "--cuts", "1"],
        ["gate", "hf:x", "--cuts", "1", "--mode", "eval"],
    ]
    assert result.gate.mode == "eval" and result.gate.shift == "fail"
    kind, shown = coverage.judge(result)
    assert kind == "leak shown" and shown.startswith("eval, cut 1: bytes equal")
    assert not coverage.stale(result)  # eval draws no random numbers: GC304 is the train's
    result.gate.mode = "train"
    assert coverage.stale(result)
    result.gate = coverage.replace(coverage.gate_record(1, 2, "", refusal), mode="eval")
    assert coverage.judge(result)[1] == (
        "train has random ops; in eval, the train program has random ops (GC304: dropout in m)"
    )


def test_to_gate_picks_the_families_that_need_it():
    gated = _with_gate(_proven(), _gate(codes=()))
    results = {"llama": gated, "x": _leaky("GC402"), "y": _leaky("GC205"), "z": _proven()}
    results["z"].family = "z"
    assert coverage.to_gate(results, list(results), True, ()) == ["x", "z"]
    assert coverage.to_gate(results, ["x"], True, ()) == ["x"]
    assert coverage.to_gate(results, list(results), False, ["llama", "y"]) == ["llama"]
    assert coverage.to_gate(results, list(results), False, ()) == []


def test_evidence_survives_save_and_load(tmp_path):
    result = _with_gate(_leaky("GC401"), _gate(perturb="fail"))
    result.date = "2026-12-04"
    path = tmp_path / "saved.json"
    coverage.save(path, [result, _proven()], "9.9")
    saved = json.loads(path.read_text(encoding="utf-8"))["results"]
    assert [r["evidence"] for r in saved] == ["leak shown", "not executed: not run"]
    loaded = coverage.load(path)
    assert loaded["x"] == result and loaded["llama"].gate is None


def test_load_then_evidence_gates_without_running_the_map(tmp_path, monkeypatch, capsys):
    path = tmp_path / "saved.json"
    coverage.save(path, [_proven(), _leaky("GC205")], "9.9")
    monkeypatch.setattr(coverage, "run", lambda *a: pytest.fail("the map ran"))
    monkeypatch.setattr(coverage, "families", lambda: ["llama", "x"])
    gated = []

    def fake_gate(result, timeout):
        gated.append(result.family)
        return coverage.replace(result, gate=coverage.gate_record(4, 0, _gate(codes=()), ""))

    monkeypatch.setattr(coverage, "run_gate", fake_gate)
    assert coverage.main(["--load", str(path), "--evidence", "--json", str(path)]) == 0
    assert gated == ["llama"]
    assert coverage.load(path)["llama"].gate.isolation == "bitwise"
    assert "1 isolated, 0 WRONG PASS" in capsys.readouterr().out


def test_rows_say_when_their_map_ran():
    old, new = _proven(), _leaky("GC205")
    old.date, new.date = "2026-12-02", "2026-12-04"
    assert coverage.dates([old, new], "5.24.0") == (
        "Map rows (transformers 5.24.0): 1 from 2026-12-02, 1 re-run 2026-12-04 (`x`)."
    )
    assert coverage.dates([old]) == "Map rows: 1 from 2026-12-02."


def test_script_doctests():
    assert doctest.testmod(coverage).failed == 0


def test_script_runs_families_in_subprocesses(tmp_path):
    out = tmp_path / "results.json"
    assert coverage.main(["--only", "llama", "git", "--jobs", "2", "--json", str(out)]) == 0
    results = coverage.load(out)
    assert results["llama"].outcome == "all cuts proven" and results["llama"].cuts == "9/9"
    assert (
        results["git"].outcome == "unsupported" and results["git"].exported == "no (build failed)"
    )
