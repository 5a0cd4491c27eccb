"""What ``pip install`` gives a user: the package with everything the README names.

``python -m build`` makes the wheel and the sdist from a copy of the checkout (``twine
check`` passes both); the wheel is installed into a fresh virtual environment offline
(``--no-index``: its dependencies are resolved against the torch and transformers of the
test environment, so no CUDA build can be pulled), then used from another directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from graphcheck import __version__

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The wheel and the sdist ``python -m build`` makes from a copy of the checkout."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "graphcheck", source / "graphcheck",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
         "--outdir", str(out), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    return next(dist.glob("graphcheck-*.whl"))


def test_build_makes_a_wheel_and_an_sdist_twine_accepts(dist):
    made = sorted(p.name for p in dist.iterdir())
    assert made == [
        f"graphcheck-{__version__}-py3-none-any.whl",
        f"graphcheck-{__version__}.tar.gz",
    ]
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True, text=True,
    )  # fmt: skip
    assert twine.returncode == 0, twine.stdout + twine.stderr


def test_the_metadata_says_what_a_user_needs(wheel):
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"graphcheck-{__version__}.dist-info/METADATA").decode()
    meta = Parser().parsestr(text)
    assert meta["Requires-Python"] == ">=3.11" and meta["Summary"]
    assert {"hf", "test"} <= set(meta.get_all("Provides-Extra"))
    assert any(
        c.startswith("Programming Language :: Python :: 3.11") for c in meta.get_all("Classifier")
    )
    assert meta["Description-Content-Type"] == "text/markdown"
    assert any(r.startswith("torch") for r in meta.get_all("Requires-Dist"))


def test_wheel_holds_every_subpackage_and_the_transformers_builders(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("analysis", "analysis/passes", "gate", "kernels", "model", "reporters",
                    "rules", "stages"):  # fmt: skip
        assert f"graphcheck/{package}/__init__.py" in names
    assert "graphcheck/stages/hf_builders.py" in names
    assert not any(n.startswith(("fixtures/", "tests/")) for n in names)


def test_installed_package_offers_the_transformers_builders(wheel, tmp_path):
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no checkout in sight
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # torch and transformers from this environment, but not its editable graphcheck
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # the venv's own older setuptools would hide the environment's (torch asks for >= 77)
    subprocess.run(
        [python, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], capture_output=True
    )
    # offline, dependencies included: each is satisfied by what the environment has (run
    # away from any checkout on the path, which pip would take for graphcheck installed)
    subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, cwd=tmp_path, env=clean,
    )  # fmt: skip
    version = subprocess.run(
        [env / "bin" / "graphcheck", "--version"],
        capture_output=True, text=True, cwd=tmp_path, env=clean,
    )  # fmt: skip
    assert version.stdout.strip() == f"graphcheck {__version__}", version.stderr
    code = (
        "import graphcheck, pathlib; from graphcheck.stages.builders import BUILTINS; "
        "print(pathlib.Path(graphcheck.__file__).parent.parent.name, "
        "'hf-slice' in BUILTINS, 'hf-rebuild' in BUILTINS)"
    )
    out = subprocess.run(
        [python, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path, env=clean
    ).stdout.split()
    assert out == ["site-packages", "True", "True"]
    proc = subprocess.run(
        [env / "bin" / "graphcheck", "verify", "hf:llama", "--set", "num_hidden_layers=2",
         "--cuts", "1", "--stage-builder", "hf-slice"],
        capture_output=True, text=True, cwd=tmp_path, env=clean,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "verdict: PASS" in proc.stdout and "stage programs: 2" in proc.stdout
