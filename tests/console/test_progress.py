"""Progress on stderr: the phases of a run with their times, live on a terminal, a line
each when forced onto a log, nothing by default off a terminal; stdout keeps the report
alone. Ctrl-C ends a run with one line and exit status 130, stage processes included.

The terminal runs are real: ``tmux`` gives the command a terminal and ``capture-pane``
reads the screen.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphcheck.console.progress import shown, wanted
from graphcheck.phases import Phase, phase

ROOT = Path(__file__).resolve().parents[2]
GRAPHCHECK = str(Path(sys.executable).with_name("graphcheck"))
FACTORY = f"""
import sys
sys.path.insert(0, {str(ROOT / "fixtures")!r})
import reference

def small():
    return reference.reference(2)

def deep():
    return reference.reference(94)
"""
PHASE_LINES = ("graphcheck: build", "graphcheck: export", "graphcheck: analyse", "graphcheck: cuts")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def factory(tmp_path) -> Path:
    path = tmp_path / "decoders.py"
    path.write_text(FACTORY)
    return path


def _run_phases() -> None:
    with phase(Phase.BUILD), phase(Phase.EXPORT):
        pass
    with phase(Phase.CUTS, total=3) as tick:
        for done in (1, 2, 3):
            tick(done)


def test_on_a_terminal_by_default_and_off_when_asked():
    assert wanted(_Terminal(), None) and not wanted(_Terminal(), False)
    assert not wanted(io.StringIO(), None) and wanted(io.StringIO(), True)
    screen = _Terminal()
    with shown(screen, False):
        _run_phases()
    assert screen.getvalue() == ""


def test_a_terminal_gets_the_live_display():
    screen = _Terminal()
    with shown(screen):
        _run_phases()
    text = screen.getvalue()
    assert "\x1b[" in text  # drawn with escape codes, not printed as lines
    for name in ("build", "export", "cuts", "3/3"):
        assert name in text
    assert "graphcheck: build ..." not in text


def test_a_failing_phase_prints_no_end_line():
    log = io.StringIO()
    with shown(log, True), pytest.raises(KeyError), phase(Phase.EXPORT):
        raise KeyError("x")
    assert log.getvalue() == "graphcheck: export ...\n"


def test_off_a_terminal_only_the_report_and_progress_when_forced(cli, factory):
    spec = f"{factory}:small"
    code, out, err = cli("verify", spec, "--cuts", "1")
    assert (code, err) == (0, "")
    assert out.startswith("graphcheck ")
    code, out, err = cli("verify", spec, "--cuts", "1", "--progress", "--format", "json")
    assert code == 0
    assert json.loads(out)["verdict"] == "pass"  # stdout is still the report alone
    lines = err.splitlines()
    for start in PHASE_LINES:
        assert f"{start} ..." in lines
        assert any(line.startswith(start) and line.endswith(" s") for line in lines)
    assert any(line.startswith("graphcheck: cuts 1/1 ") for line in lines)


def _wait_for(read, text: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = read()
        if text in seen:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} did not appear in {seconds} s:\n{read()}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_deep_map_shows_its_phases_on_a_terminal(factory):
    session = f"graphcheck-progress-{os.getpid()}"
    command = f"{GRAPHCHECK} map {factory}:deep; echo EXIT=$?; sleep 600"
    env = {**os.environ, "GRAPHCHECK_NO_CACHE": "1"}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command],
        check=True, cwd=ROOT, env=env,
    )  # fmt: skip

    def screen() -> str:
        capture = ["tmux", "capture-pane", "-p", "-J", "-S", "-", "-t", session]  # + history
        return subprocess.run(capture, capture_output=True, text=True).stdout

    try:
        during = _wait_for(screen, "export", 120)
        assert "94 layers" not in during  # shown while it runs, before the report
        after = _wait_for(screen, "EXIT=", 600)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert "EXIT=0" in after
    assert "94 layers" in after
    for name in ("build", "export", "analyse", "cuts", "95/95"):
        assert name in after
    assert "graphcheck: build ..." not in after  # the live display, not the log lines


def _interrupt(argv: list[str], wait_for: str, group: bool) -> tuple[int, list[str]]:
    """Run ``graphcheck argv`` with ``--progress``, send SIGINT once ``wait_for`` is on
    stderr (to its whole process group, as a terminal's Ctrl-C does, when ``group``);
    the exit status and the stderr lines."""
    process = subprocess.Popen(
        [GRAPHCHECK, *argv, "--progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "GRAPHCHECK_NO_CACHE": "1"},
    )  # fmt: skip
    lines = []
    try:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith(wait_for):
                break
        time.sleep(0.5)
        if group:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, lines + rest.splitlines()


def _not_progress(lines: list[str]) -> list[str]:
    return [ln for ln in lines if not (ln.endswith(" ...") or ln.endswith(" s"))]


def test_ctrl_c_during_the_export_is_one_line_and_130():
    code, lines = _interrupt(
        ["map", "fixtures/reference.py:reference_64"], "graphcheck: export", group=False
    )
    assert code == 130
    assert _not_progress(lines) == ["graphcheck: interrupted"], lines
    assert "graphcheck: export ..." in lines


def test_ctrl_c_swallowed_by_a_library_still_ends_the_run_130(monkeypatch, capsys):
    """A tracer that catches the interrupt and goes on (a broad ``except``) finishes the
    run; the press was seen, so the run says "interrupted", exit 130, no report."""
    from graphcheck import cli

    def swallowing(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except BaseException:  # what the library in question does
            pass
        return "verdict: PASS\n", 0, "PASS"

    from graphcheck.commands import verify

    monkeypatch.setattr(verify, "run", swallowing)
    code = cli.main(["verify", "fixtures/reference.py:reference", "--cuts", "4"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (130, "", "graphcheck: interrupted\n")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize(
    ("argv", "wait_for"),
    [
        (["verify", "--stage-builder", "keep-index"], "graphcheck: stages"),
        pytest.param(
            ["gate"],
            "graphcheck: gate uncut",
            # known race, about 1 run in 7: a fork-server child started by the gate's proof
            # as Ctrl-C lands prints a traceback of its own; to fix, not to hide
            marks=pytest.mark.xfail(reason="child started as Ctrl-C lands", strict=False),
        ),
    ],
    ids=["stage-builder", "gate"],
)
def test_ctrl_c_while_stage_processes_run_leaves_no_child_traceback(argv, wait_for):
    command, *options = argv
    model = [command, "fixtures/reference.py:reference", "--cuts", "4", *options]
    code, lines = _interrupt(model, wait_for, group=True)
    assert code == 130
    assert _not_progress(lines) == ["graphcheck: interrupted"], lines


def test_the_old_module_still_gives_the_hook_and_the_display_with_a_warning():
    import graphcheck.reporters.progress as old
    from graphcheck import phases
    from graphcheck.console import progress

    with pytest.warns(DeprecationWarning, match="moved to graphcheck.phases.phase"):
        assert old.phase is phases.phase
    with pytest.warns(DeprecationWarning, match="moved to graphcheck.console.progress.shown"):
        assert old.shown is progress.shown
