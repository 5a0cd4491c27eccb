"""The README stays short and true: at most 200 lines, every link it holds leads to a file
of the repository, and the run it shows is what graphcheck prints (timings aside)."""

from __future__ import annotations

import re
import shlex

from harness import ROOT

from graphcheck.cli import main

README = (ROOT / "README.md").read_text(encoding="utf-8")
_TIMES = re.compile(r"\b\d+(\.\d+)? s\b")


def test_the_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository():
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [t.split("#")[0] for t in targets if not t.startswith(("http://", "https://"))]
    assert local, "the README links into the documentation"
    assert [t for t in local if not (ROOT / t).is_file()] == []


def test_the_run_the_readme_shows_is_what_graphcheck_prints(capsys, monkeypatch):
    block = README[README.index("<!-- run:begin -->") : README.index("<!-- run:end -->")]
    shown = block.split("```")[1].strip("\n").splitlines()
    command, expected = shown[0].removeprefix("$ "), shown[1:]
    monkeypatch.chdir(ROOT)
    assert main([*shlex.split(command)[1:], "--no-cache"]) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    assert [_TIMES.sub("N s", line) for line in printed] == [
        _TIMES.sub("N s", line) for line in expected
    ]
