"""What ``pip install`` gives a user: the package with everything the README names.

The wheel is built from the checkout and installed into a fresh virtual
environment (no checkout on the path; torch and transformers borrowed from the
test environment so nothing is downloaded), then used from another directory.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, capture_output=True, cwd=out,
    )  # fmt: skip
    return next(out.glob("graphcheck-*.whl"))


def test_wheel_holds_every_subpackage_and_the_transformers_builders(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("analysis", "analysis/passes", "gate", "kernels", "model", "reporters",
                    "rules", "stages"):  # fmt: skip
        assert f"graphcheck/{package}/__init__.py" in names
    assert "graphcheck/stages/hf_builders.py" in names
    assert not any(n.startswith(("fixtures/", "tests/")) for n in names)


def test_installed_package_offers_the_transformers_builders(wheel, tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # torch and transformers from this environment, but not its editable graphcheck
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    code = (
        "import graphcheck, pathlib; from graphcheck.stages.builders import BUILTINS; "
        "print(pathlib.Path(graphcheck.__file__).parent.parent.name, "
        "'hf-slice' in BUILTINS, 'hf-rebuild' in BUILTINS)"
    )
    out = subprocess.run(
        [python, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path
    ).stdout.split()
    assert out == ["site-packages", "True", "True"]
    proc = subprocess.run(
        [env / "bin" / "graphcheck", "verify", "hf:llama", "--set", "num_hidden_layers=2",
         "--cuts", "1", "--stage-builder", "hf-slice"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "verdict: PASS" in proc.stdout and "stage programs: 2" in proc.stdout
