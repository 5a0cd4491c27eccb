"""``graphcheck check`` and ``graphcheck lock`` with the export cache: a warm run prints
the cold run's bytes in every format without exporting (and, as a whole process, without
importing torch); an edit of the model file runs afresh and the lock names the change;
an edit of one check's table re-runs that check alone; ``--no-cache`` neither reads nor
writes; a damaged entry is a note and a fresh run.

The test session runs with ``GRAPHCHECK_NO_CACHE=1`` (tests/conftest.py); these tests
turn the cache on with a temporary ``--cache-dir``. The models are two-layer reference
decoders in a file of the temporary project (``tiny`` passes, ``skip`` fails GC201).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import fresh_process

from graphcheck.cache import key
from graphcheck.cache.records import check_entry
from graphcheck.project.check import cache_options, run_project
from graphcheck.project.commands import CHECK_FORMATS as FORMATS
from graphcheck.project.config import load_config
from graphcheck.project.record import PlanResult, record_of, record_plain
from graphcheck.report import render

MODEL = """\
from reference import CausalLM, Config
from violations import SkipDecoder, _lm


def tiny():
    return CausalLM(Config(num_hidden_layers=2, window_every=2))


def skip():  # GC201: the embedding output crosses every cut
    return _lm(SkipDecoder, Config(num_hidden_layers=2))
"""
OFF = 'stage_builder = "none"\nrequire_stage_programs = false\n'  # the cache, not stages
TINY = '[[checks]]\nname = "tiny"\nmodel = "tiny.py:tiny"\ncuts = [1]\n' + OFF
SKIP = '[[checks]]\nname = "skip"\nmodel = "tiny.py:skip"\ncuts = [1]\n' + OFF
OTHER = '[[checks]]\nname = "other"\nmodel = "tiny.py:tiny"\nstages = 2\n' + OFF
UNPROVEN = "stage programs not proven: --stage-builder none"
WINDOW = ("window_every=2)", "window_every=2, sliding_window=8)")  # layer 1's window
PLAN = PlanResult("fail", 1, 0, 1, ("GC201",), ("GC201",), "text", "md", "{}", "{}")
PASSED = PlanResult("pass", 0, 1, 1, (), (), "text", "md", "{}", "{}", "", UNPROVEN)
PASSED_LINES = (
    f"  cuts 1: PASS (1/1 cuts proven; {UNPROVEN})\nverdict: PASS · 1 check · 1/1 plans proven\n"
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """``project(*checks)``: the working folder holding the model file and a
    ``graphcheck.toml`` of those checks; the cache folder is ``tmp_path / "c"``."""
    monkeypatch.chdir(tmp_path)

    def make(*checks: str) -> Path:
        (tmp_path / "tiny.py").write_text(MODEL, encoding="utf-8")
        (tmp_path / "graphcheck.toml").write_text("\n".join(checks), encoding="utf-8")
        return tmp_path

    return make


def _notes(err: str) -> list[str]:
    """The checks the cache served, by name, from the notes on stderr."""
    return [line.split("'")[1] for line in err.splitlines() if "from the cache" in line]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_warm_check_prints_the_cold_bytes_without_exporting_or_torch(
    project, exports, cli, capsys
):
    root = project(TINY, SKIP)
    cache = root / "c"
    cold = run_project(locked=True, update=True, cache=cache)  # no lock yet: it is written
    assert len(exports) == 2 and cold.exit_code == 1
    printed = {fmt: render(cold, fmt) for fmt in FORMATS}
    assert "-- cuts 1 --" in printed["text"] and "GC201" in printed["text"]  # skip's report
    (root / "graphcheck.lock").unlink()
    warm = run_project(locked=True, update=True, cache=cache)
    assert len(exports) == 2  # both checks from the cache
    assert {fmt: render(warm, fmt) for fmt in FORMATS} == printed
    assert json.loads(printed["json"])["checks"][1]["plans"][0]["report"]["verdict"] == "fail"
    assert _notes(capsys.readouterr().err) == ["tiny", "skip"]

    code, out, err = cli("check", "--locked", "--cache-dir", cache)
    assert (code, len(exports), _notes(err)) == (1, 2, ["tiny", "skip"])
    assert "== lock: 0 changes ==\n  no change\n" in out  # compared with the lock all the same
    whole = fresh_process(["check", "--locked", "--cache-dir", str(cache)], cwd=root)
    assert (whole.returncode, whole.stdout) == (code, out)
    assert whole.stderr.splitlines()[-1] == "heavy: [] False"


def _seed(name: str, plan: PlanResult) -> None:
    """A stored entry without lock state for check ``name``: what a ``check`` stores."""
    config = load_config()
    (check,) = [c for c in config.checks if c.name == name]
    entry = check_entry(config.path.parent / "c", cache_options(check, config.path.parent))
    entry.files = {}
    assert entry.save(record_plain({"cuts 1": plan}, None), plan.exit_code)


def test_an_edit_of_the_model_runs_afresh_and_the_lock_names_it(project, exports, cli):
    root = project(TINY)
    cache = ("--cache-dir", root / "c")
    _seed("tiny", PASSED)
    assert cli("check", *cache)[:2] == (0, "== tiny (tiny.py:tiny) ==\n" + PASSED_LINES)
    assert cli("lock", *cache)[0] == 0 and len(exports) == 1  # the entry had no lock state
    _edit(root / "tiny.py", *WINDOW)
    cold = cli("check", "--locked", *cache)
    assert cold[0] == 1 and len(exports) == 2 and _notes(cold[2]) == []
    lines = cold[1].splitlines()
    changed = lines.index("  ✗ tiny: layer 1: torch_attn._varlen_attn window_size [16, 0] → [8, 0]")
    assert lines[changed + 1].strip().startswith("at ") and "reference.py:" in lines[changed + 1]
    assert "  · tiny: source changed (tiny.py), programs changed" in lines
    warm = cli("check", "--locked", *cache)
    assert warm[:2] == cold[:2] and len(exports) == 2 and _notes(warm[2]) == ["tiny"]


def test_no_cache_neither_reads_nor_writes(project, exports, cli, monkeypatch):
    root = project(TINY)
    monkeypatch.delenv("GRAPHCHECK_NO_CACHE")
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(root / "c"))  # the variables verify honours
    cold = cli("check")
    entries = {p: p.read_bytes() for p in (root / "c").rglob("*.json")}
    assert len(entries) == 1 and len(exports) == 1
    assert _notes(cli("check")[2]) == ["tiny"] and len(exports) == 1
    fresh = cli("check", "--no-cache")
    assert (fresh[:2], len(exports), _notes(fresh[2])) == (cold[:2], 2, [])
    assert {p: p.read_bytes() for p in (root / "c").rglob("*.json")} == entries


def test_editing_one_checks_table_re_runs_that_check_alone(project, exports, cli):
    root = project(TINY, OTHER)
    cache = ("--cache-dir", root / "c")
    assert cli("lock", *cache)[0] == 0 and len(exports) == 2
    locked = json.loads((root / "graphcheck.lock").read_text(encoding="utf-8"))["models"]
    _edit(root / "graphcheck.toml", "stages = 2", "stages = 2\ncuts = [[1]]")
    code, out, err = cli("lock", *cache)
    assert (code, len(exports), _notes(err)) == (0, 3, ["tiny"])
    models = json.loads((root / "graphcheck.lock").read_text(encoding="utf-8"))["models"]
    assert models["tiny"] == locked["tiny"]
    assert [p[0] for p in models["other"]["plans"]] == ["cuts 1", "stages 2"]
    code, out, err = cli("check", *cache)  # the lock's entries serve a check without it
    assert (code, len(exports), _notes(err)) == (0, 3, ["tiny", "other"])
    assert f"  cuts 1: PASS (1/1 cuts proven; {UNPROVEN})\n  stages 2: PASS" in out


def test_the_key_holds_a_checks_own_table_not_the_configuration_or_its_name(project):
    root = project(TINY, OTHER)

    def keys() -> dict[str, str]:
        config = load_config()
        return {c.name: key.lookup_key(cache_options(c, root)) for c in config.checks}

    before = keys()
    _edit(root / "graphcheck.toml", "stages = 2", "stages = 2\nignore = ['GC5']")
    after = keys()
    assert after["tiny"] == before["tiny"] and after["other"] != before["other"]
    _edit(root / "graphcheck.toml", 'name = "tiny"', 'name = "renamed"')
    assert keys()["renamed"] == before["tiny"]
    (root / "graphcheck.toml").write_text(f"ignore = ['GC5']\n{TINY}", encoding="utf-8")
    assert keys()["tiny"] != before["tiny"]  # the top-level codes are the check's too
    _edit(root / "graphcheck.toml", "ignore = ['GC5']", "")
    assert keys()["tiny"] == before["tiny"]
    _edit(root / "tiny.py", *WINDOW)  # the model file named by the spec: its content
    assert keys()["tiny"] != before["tiny"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r["plans"][0][1].update(exit_code=0),  # a verdict of fail exiting 0
        lambda r: r["plans"][0][1].update(codes="GC201"),
        lambda r: r["plans"][0][1].pop("sarif"),
        lambda r: r["plans"].append(r["plans"][0]),  # a plan the check does not have
        lambda r: r.update(state={"entry": {"layers": []}, "lines": [], "parts": []}),
        lambda r: r.update(plans={}),
    ],
)
def test_a_damaged_record_is_a_note_and_a_fresh_run(tmp_path, capsys, damage):
    options = {"command": "check", "model": "m.py:f", "plans": ["cuts 1"]}
    record = record_plain({"cuts 1": PLAN}, None)
    entry = check_entry(tmp_path, options)
    entry.files = {}  # no dependency (the run's would be the test process's modules)
    assert entry.save(record, 1)
    assert entry.load(lambda r: record_of(r, ["cuts 1"]), "check 'm'") == ({"cuts 1": PLAN}, None)
    assert _notes(capsys.readouterr().err) == ["m"]
    damage(record)
    assert entry.save(record, 1)
    assert entry.load(lambda r: record_of(r, ["cuts 1"]), "check 'm'") is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("graphcheck: note: ignoring cache entry ") and "re-exporting" in line


def test_an_error_or_a_run_with_unknown_dependencies_is_never_stored(tmp_path):
    options = {"command": "check", "model": "m.py:f"}
    entry = check_entry(tmp_path, options)
    assert not entry.save(record_plain({"cuts 1": PLAN}, None), 1)  # depend() never ran
    entry.files = {}
    assert not entry.save(record_plain({}, None), 2)
    assert not list(tmp_path.rglob("*.json"))


def test_a_check_that_cannot_run_is_never_stored(project, exports, cli):
    root = project(TINY, '[[checks]]\nname = "boom"\nmodel = "tiny.py:boom"\ncuts = [1]\n')
    _edit(
        root / "tiny.py",
        "def tiny():",
        "def boom():\n    raise RuntimeError('boom')\n\n\ndef tiny():",
    )
    _seed("tiny", PASSED)  # the other check comes from the cache
    code, out, err = cli("check", "--cache-dir", root / "c")
    assert (code, len(exports), _notes(err)) == (2, 0, ["tiny"]) and "error: " in out
    assert len(list((root / "c").rglob("*.json"))) == 1  # the seeded entry alone
    code, out, err = cli("check", "--cache-dir", root / "c")
    assert (code, _notes(err)) == (2, ["tiny"])


def test_check_and_lock_take_the_cache_flags_checked_before_any_export(project, exports, cli):
    root = project(TINY)
    code, _, err = cli("check", "--no-cache", "--cache-dir", root)
    assert code == 2 and "not allowed with argument" in err
    code, out, err = cli("lock", "--cache-dir", root / "no/such")
    assert (code, out, len(exports)) == (2, "", 0)
    assert err == (
        f"graphcheck: error: --cache-dir {root / 'no/such'}: the folder {root / 'no'} does not "
        "exist; create it first (or --no-cache)\n"
    )
