"""The export cache: a warm re-run prints the cold report without exporting; any change
to the model's files, the options, the versions or graphcheck's own source runs afresh;
a damaged entry is a note and a fresh run, never a crash or a wrong verdict.

The test session runs with ``GRAPHCHECK_NO_CACHE=1`` (tests/conftest.py); these tests
turn the cache on with a temporary ``--cache-dir``. The model is a two-layer copy of
the reference decoder whose factory lives in a file of its own, importing a helper
module: the helper is a dependency known only after the build (the manifest).
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from harness import fresh_process

from graphcheck import api
from graphcheck.cache import (
    Store,
    cacheable,
    key,
    report_of,
    report_record,
    resolve_folder,
    result_entry,
)
from graphcheck.cli import build_parser
from graphcheck.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def model(tmp_path):
    """``(spec, helper file)``: a two-layer decoder whose factory imports a helper module
    (a unique name: the helper stays imported in this process)."""
    helper = f"cache_helper_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{helper}.py").write_text(
        "from reference import CausalLM, Config\n"
        "from violations import SkipDecoder, _lm\n\n"
        "def build():\n"
        "    return CausalLM(Config(num_hidden_layers=2))\n\n"
        "def skip():  # GC201: the embedding output crosses every cut\n"
        "    return _lm(SkipDecoder, Config(num_hidden_layers=2))\n"
    )
    spec_file = tmp_path / "tiny.py"
    spec_file.write_text(
        f"import {helper}\n\n\ndef tiny():\n    return {helper}.build()\n\n\n"
        f"def skip():\n    return {helper}.skip()\n"
    )
    return f"{spec_file}:tiny", tmp_path / f"{helper}.py"


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.json"))


def _same(run: tuple[int, str, str], cold: tuple[int, str, str]) -> bool:
    """A fresh run's exit status and report are the cold run's (but for the timings in
    the header's first line)."""
    return run[0] == cold[0] and run[1].splitlines()[1:] == cold[1].splitlines()[1:]


def _key(*argv: str, folder: Path) -> str:
    options = vars(build_parser().parse_args([*argv, "--cache-dir", str(folder)]))
    cache = result_entry(options, cache_dir=str(folder))
    assert cache is not None
    return cache.key


@pytest.mark.parametrize(
    ("command", "fmt"),
    [("verify", "text"), ("verify", "json"), ("map", "text"), ("plan", "text")],
)
def test_warm_run_prints_the_cold_report_without_exporting(
    cli, exports, model, tmp_path, command, fmt
):
    spec, _ = model
    plan = {"verify": ("--cuts", "1"), "plan": ("--stages", "2")}.get(command, ())
    argv = (command, spec, *plan, "--format", fmt, "--cache-dir", tmp_path / "c")
    cold = cli(*argv)
    assert len(exports) == 1 and cold[0] == 0 and len(_entries(tmp_path / "c")) == 1
    warm = cli(*argv)
    assert len(exports) == 1  # no export: the stored report
    assert warm[:2] == cold[:2]
    assert "report from the cache" in warm[2] and len(warm[2].splitlines()) == 1
    if fmt == "json":
        assert json.loads(warm[1])["verdict"] == "pass"
    if command == "map":
        assert "legal cuts: 0, 1, 2" in warm[1]
    if command == "plan":
        assert "legal boundaries: 0, 1, 2" in warm[1] and "plan: --cuts 1" in warm[1]


def test_an_edit_of_a_model_file_runs_afresh(cli, exports, model, tmp_path):
    """A comment in the helper (known only after the build) or in the spec's file."""
    spec, helper = model
    argv = ("verify", spec, "--cuts", "1", "--cache-dir", tmp_path / "c")
    cold = cli(*argv)
    helper.write_text(helper.read_text() + "# a comment\n")
    assert _same(cli(*argv), cold) and len(exports) == 2
    assert _same(cli(*argv), cold) and len(exports) == 2  # stored again: a hit
    spec_file = Path(spec.rpartition(":")[0])
    spec_file.write_text(spec_file.read_text() + "# a comment\n")
    assert _same(cli(*argv), cold) and len(exports) == 3


def test_a_violation_is_stored_and_served_with_its_exit_status(cli, exports, model, tmp_path):
    spec = model[0].replace(":tiny", ":skip")
    cold = cli("verify", spec, "--cuts", "1", "--cache-dir", tmp_path / "c")
    warm = cli("verify", spec, "--cuts", "1", "--cache-dir", tmp_path / "c")
    assert cold[0] == warm[0] == 1 and "GC201" in cold[1]
    assert warm[1] == cold[1] and len(exports) == 1


@pytest.mark.parametrize(
    "changed",
    [
        ("--cuts", "2"),
        ("--stages", "2"),
        ("--cuts", "1", "--mode", "eval"),
        ("--cuts", "1", "--dtype", "float32"),
        ("--cuts", "1", "--tokens", "64"),
        ("--cuts", "1", "--strict"),
        ("--cuts", "1", "--no-stand-ins"),
        ("--cuts", "1", "--allow-fp32", "*.bias"),
        ("--cuts", "1", "--layers", "model.layers"),
        ("--cuts", "1", "--stage-builder", "keep-index"),
        ("--cuts", "1", "--format", "json"),
    ],
)
def test_every_option_is_in_the_key(tmp_path, changed):
    spec = f"{FIXTURES / 'reference.py'}:reference"
    base = _key("verify", spec, "--cuts", "1", folder=tmp_path)
    assert base == _key("verify", spec, "--cuts", "1", folder=tmp_path)
    assert _key("verify", spec, *changed, folder=tmp_path) != base


def test_settings_kernels_file_and_plan_are_in_the_key(tmp_path):
    kernels = tmp_path / "kernels.py"
    kernels.write_text("STAND_INS = []\n")
    hf = ("verify", "hf:llama", "--cuts", "2", "--kernels", str(kernels))
    base = _key(*hf, folder=tmp_path)
    assert _key(*hf, "--set", "num_hidden_layers=4", folder=tmp_path) != base
    assert _key(*hf[:2], "--layout", "E|t*2|t*6|L", *hf[4:], folder=tmp_path) != base
    kernels.write_text("STAND_INS = []  # edited\n")
    assert _key(*hf, folder=tmp_path) != base


def test_an_hf_config_files_content_is_in_the_key(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    base = _key("map", f"hf:{config}", folder=tmp_path)
    folder = _key("map", f"hf:{tmp_path}", folder=tmp_path)  # a folder holding config.json
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 128}))
    assert _key("map", f"hf:{config}", folder=tmp_path) != base
    assert _key("map", f"hf:{tmp_path}", folder=tmp_path) != folder


def test_other_versions_or_graphcheck_source_are_another_key(tmp_path, monkeypatch):
    spec = f"{FIXTURES / 'reference.py'}:reference"
    base = _key("map", spec, folder=tmp_path)
    for name in ("source", "torch", "transformers", "graphcheck"):
        changed = {**key.versions(), name: "other"}
        monkeypatch.setattr(key, "versions", lambda changed=changed: changed)
        assert _key("map", spec, folder=tmp_path) != base, name
    monkeypatch.undo()
    assert _key("map", spec, folder=tmp_path) == base


def test_source_hash_reads_graphcheck_files(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(key, "PACKAGE", tmp_path)
    key.source_hash.cache_clear()
    try:
        first = key.source_hash()
        key.source_hash.cache_clear()
        (tmp_path / "a.py").write_text("x = 1  # edited\n")
        assert key.source_hash() != first
    finally:
        key.source_hash.cache_clear()


def test_a_corrupt_entry_is_a_note_and_a_fresh_export(cli, exports, model, tmp_path):
    spec, _ = model
    argv = ("verify", spec, "--cuts", "1", "--cache-dir", tmp_path / "c")
    cold = cli(*argv)
    (entry,) = _entries(tmp_path / "c")
    entry.write_bytes(b"\x00\xffnot json at all")
    again = cli(*argv)
    assert _same(again, cold) and len(exports) == 2
    notes = again[2].splitlines()
    assert len(notes) == 1 and notes[0].startswith("graphcheck: note: ignoring cache entry")
    assert cli(*argv)[:2] == again[:2] and len(exports) == 2  # rewritten whole: a hit


def _damage(entry: Path, other: Path, how: str) -> None:
    if how == "truncated":
        entry.write_text(entry.read_text()[:40])
    elif how == "foreign":
        entry.write_text(other.read_text())
    elif how == "malformed":  # the right key, a field of the wrong type
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "exit_code": "0"}))
    else:  # a file gone from the recorded dependencies: no note, a miss
        entry.write_text(json.dumps({**json.loads(entry.read_text()), "files": {"/no/f": "0"}}))


@pytest.mark.parametrize("how", ["truncated", "foreign", "malformed", "stale"])
def test_a_damaged_entry_is_never_served(tmp_path, capsys, how):
    """What the CLI then does is the corrupt entry's fresh run, above."""
    options = {"command": "verify", "model": f"{FIXTURES / 'reference.py'}:reference"}
    caches = [result_entry({**options, "cuts": c}, cache_dir=str(tmp_path)) for c in "12"]
    for cache in caches:
        cache.files = {}  # no dependency (the run's would be the test process's modules)
        assert cache.load(report_of, "report") is None
        assert cache.save(report_record("the report\n", 0, "PASS"), 0)
    assert caches[0].load(report_of, "report") == ("the report\n", 0, "PASS")
    _damage(caches[0].store.path(caches[0].key), caches[1].store.path(caches[1].key), how)
    capsys.readouterr()
    assert caches[0].load(report_of, "report") is None
    notes = capsys.readouterr().err.splitlines()
    assert notes == [] if how == "stale" else len(notes) == 1 and "ignoring cache" in notes[0]


@pytest.mark.parametrize("off", ["--no-cache", "GRAPHCHECK_NO_CACHE=1"])
def test_no_cache_never_reads_or_writes(cli, exports, model, tmp_path, monkeypatch, off):
    """A stored report planted under the run's key is neither printed nor rewritten, and
    no other entry is written."""
    spec, _ = model
    folder = tmp_path / "env"
    argv = ("verify", spec, "--cuts", "1", "--stage-builder", "none")  # as cli() runs it
    planted = result_entry(vars(build_parser().parse_args(argv)), cache_dir=str(folder), environ={})
    assert planted is not None
    planted.files = {}
    assert planted.save(report_record("the planted report\n", 0, "PASS"), 0)
    (entry,) = _entries(folder)
    before = entry.read_bytes(), entry.stat().st_mtime_ns
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(folder))  # on, but for the switch
    if off == "--no-cache":
        monkeypatch.delenv("GRAPHCHECK_NO_CACHE")  # else it stays 1, as in every test
    code, out, err = cli(*argv, *([off] if off == "--no-cache" else []))
    assert code == 0 and "verdict: PASS" in out and len(exports) == 1 and err == ""
    assert _entries(folder) == [entry]
    assert (entry.read_bytes(), entry.stat().st_mtime_ns) == before
    monkeypatch.delenv("GRAPHCHECK_NO_CACHE", raising=False)
    assert cli(*argv)[1] == "the planted report\n"  # the entry was live: a hit without off


def test_a_cache_dir_without_its_parent_is_exit_2_before_export(cli, exports, tmp_path):
    spec = f"{FIXTURES / 'reference.py'}:reference"
    code, out, err = cli("verify", spec, "--cuts", "4", "--cache-dir", tmp_path / "no" / "c")
    assert (code, out, exports) == (2, "", [])
    assert err.startswith("graphcheck: error: --cache-dir") and "does not exist" in err
    assert len(err.splitlines()) == 1
    (tmp_path / "file").write_text("")
    code, _, err = cli("map", spec, "--cache-dir", tmp_path / "file")
    assert code == 2 and "not a folder" in err and exports == []


def test_no_cache_and_cache_dir_together_are_a_usage_error(cli, tmp_path):
    code, _, err = cli("verify", "m.py:f", "--no-cache", "--cache-dir", tmp_path)
    assert code == 2 and "not allowed with" in err


def test_an_unwritable_cache_dir_is_a_note_not_a_failure(cli, exports, model, tmp_path):
    spec, _ = model
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v1").write_text("a file where the folder goes")
    code, out, err = cli("verify", spec, "--cuts", "1", "--cache-dir", tmp_path / "c")
    assert code == 0 and "verdict: PASS" in out and len(exports) == 1
    assert "not writable" in err and len(err.splitlines()) == 1


def test_an_error_is_never_stored(cli, exports, model, tmp_path):
    spec, _ = model
    code, _, err = cli("verify", spec, "--cuts", "1", "--set", "x=1", "--cache-dir", tmp_path)
    assert code == 2 and "--set applies to hf: models only" in err
    assert _entries(tmp_path) == []


def test_side_files_and_gate_are_not_cached(tmp_path):
    assert cacheable({"command": "verify", "model": "m.py:f", "format": "sarif"})
    assert not cacheable({"command": "verify", "model": "m.py:f", "model_explorer": "d"})
    assert not cacheable({"command": "map", "model": "m.py:f", "format": "html"})
    assert not cacheable({"command": "gate", "model": "m.py:f"})
    options = {"command": "gate", "model": "m.py:f"}
    assert result_entry(options, cache_dir=str(tmp_path)) is None


def test_folder_resolution():
    assert resolve_folder(None, environ={}) == Path.home() / ".cache" / "graphcheck"
    assert str(resolve_folder(None, environ={"XDG_CACHE_HOME": "/x"})) == "/x/graphcheck"
    env = {"GRAPHCHECK_CACHE_DIR": "/tmp", "XDG_CACHE_HOME": "/x"}
    assert str(resolve_folder(None, environ=env)) == "/tmp"
    assert resolve_folder(None, environ={**env, "GRAPHCHECK_NO_CACHE": "1"}) is None
    assert str(resolve_folder(None, environ={**env, "GRAPHCHECK_NO_CACHE": "0"})) == "/tmp"
    assert str(resolve_folder("/tmp", environ={"GRAPHCHECK_NO_CACHE": "1"})) == "/tmp"
    assert resolve_folder("/tmp", no_cache=True, environ={}) is None
    with pytest.raises(
        UsageError, match="GRAPHCHECK_CACHE_DIR /no/such/c: the folder /no/such does"
    ):
        resolve_folder(None, environ={"GRAPHCHECK_CACHE_DIR": "/no/such/c"})


def test_dependencies_follow_model_files_not_libraries(tmp_path, monkeypatch):
    import sys
    import types

    library = key._library_dirs()[0]
    fake = {
        "transformers.models.fake.modeling_fake": f"{library}transformers/models/fake/m.py",
        "userpkg.layers": f"{library}userpkg/layers.py",
        "json.fakepart": f"{library}json/fakepart.py",
        "cache_dep_user_code": str(tmp_path / "user_code.py"),
    }
    for name, file in fake.items():
        module = types.ModuleType(name)
        module.__file__ = file
        monkeypatch.setitem(sys.modules, name, module)
    hf, own, pkg = key.dependencies("hf:llama"), key.dependencies("m.py:f"), None
    pkg = key.dependencies("userpkg.models:build")
    assert fake["transformers.models.fake.modeling_fake"] in hf
    assert fake["transformers.models.fake.modeling_fake"] not in own
    assert fake["userpkg.layers"] in pkg and fake["userpkg.layers"] not in own
    assert all(fake["json.fakepart"] not in deps for deps in (hf, own, pkg))
    assert all(str(tmp_path / "user_code.py") in deps for deps in (hf, own, pkg))
    assert not any(path.startswith(str(key.PACKAGE) + "/") for path in own)
    assert own[str(tmp_path / "user_code.py")] is None  # never written: recorded as absent


def test_concurrent_writers_leave_one_whole_entry(tmp_path, capsys):
    store = Store(tmp_path, "results")
    payloads = [{"output": str(i) * 200_000, "exit_code": 0, "files": {}} for i in range(6)]
    seen: list[object] = []

    def read_many():
        for _ in range(50):
            seen.append(store.read("k"))

    threads = [threading.Thread(target=store.write, args=("k", p)) for p in payloads]
    threads.append(threading.Thread(target=read_many))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = store.read("k")
    assert final is not None and final["output"] in {p["output"] for p in payloads}
    assert all(entry is None or entry["key"] == "k" for entry in seen)
    assert capsys.readouterr().err == ""  # no reader saw a partial entry
    assert [p.name for p in store.folder.iterdir()] == ["k.json"]  # no temporary file left


def test_a_hit_imports_neither_torch_nor_the_api(cli, exports, model, tmp_path):
    """The warm whole process: the command line, the key, the hashes, the stored report."""
    argv = ["verify", model[0], "--cuts", "1", "--cache-dir", str(tmp_path / "c")]
    argv += ["--stage-builder", "none"]  # what cli() adds: the warm process runs the same
    cold = cli(*argv)
    warm = fresh_process(argv)
    assert (warm.returncode, warm.stdout) == cold[:2]
    assert "report from the cache" in warm.stderr
    assert warm.stderr.splitlines()[-1] == "heavy: [] False"


def test_a_run_during_which_a_file_changed_is_not_stored(model, tmp_path):
    """Its report may describe the file before the edit."""
    import os
    import time

    spec, _ = model
    options = vars(build_parser().parse_args(["verify", spec, "--cuts", "1"]))
    cache = result_entry(options, cache_dir=str(tmp_path / "c"), environ={})
    assert cache is not None
    cache.depend()
    later = time.time() + 60
    os.utime(spec.rpartition(":")[0], (later, later))  # edited while the model exported
    stored = cache.save(report_record("the report\n", 0, "PASS"), 0)
    assert not stored and _entries(tmp_path / "c") == []
    assert not cache.save(report_record("graphcheck: error\n", 2, ""), 2)  # nor an error


def test_an_option_too_long_to_be_a_path_is_still_keyed(tmp_path):
    """A JSON option is no file name (the OS refuses one this long): keyed as text."""
    spec = f"{FIXTURES / 'reference.py'}:reference"
    fqns = json.dumps([[f"model.layers.{i}" for i in range(k, k + 200)] for k in (0, 200)])
    assert len(fqns) > 4096
    keys = {_key("verify", spec, "--fqns-per-stage", f, folder=tmp_path) for f in (fqns, "[]")}
    assert len(keys) == 2


def test_a_reloaded_program_does_not_analyse_as_the_live_one():
    """Why only reports are cached (graphcheck/cache/__init__.py): an exported program saved
    with ``torch.export.save`` and loaded back judges the reference decoder's cuts
    otherwise. Should this fail, a program cache may have become sound: compare again."""
    import dataclasses
    import io
    import logging

    import torch

    from graphcheck.analysis.program import analyse

    live = api.Explorer(f"{FIXTURES / 'reference.py'}:reference")
    buffer = io.BytesIO()
    torch.export.save(live.program.exported.program, buffer)
    buffer.seek(0)
    loaded = api.Explorer(f"{FIXTURES / 'reference.py'}:reference")
    logging.disable(logging.CRITICAL)  # torch.export.load warns with a broken format string
    try:
        program = torch.export.load(buffer)
    finally:
        logging.disable(logging.NOTSET)
    exported = dataclasses.replace(live.program.exported, program=program)
    loaded._program = analyse(exported, loaded.session.layout)
    assert live.map().legal_cuts() == list(range(9))
    assert loaded.map().legal_cuts() != live.map().legal_cuts()
    assert "GC205" in loaded.verify([4]).codes and not live.verify([4]).codes


def test_pythonpath_is_in_the_key(tmp_path, monkeypatch):
    """It decides which file a model's ``import`` finds."""
    spec = f"{FIXTURES / 'reference.py'}:reference"
    monkeypatch.delenv("PYTHONPATH", raising=False)
    base = _key("map", spec, folder=tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert _key("map", spec, folder=tmp_path) != base
