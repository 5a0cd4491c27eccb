"""First-use latency: whole-process wall time of the commands that build no model.

An argument error past argparse (``--cuts x``: checked by graphcheck, not by argparse's
own choices) is one of them: every error the arguments alone decide answers before
torch is imported.

Each command runs as a new process (interpreter start, imports, argument parsing,
output), as a user types it; the figure is the best of ``--repeat`` runs. None of
them imports torch (``tests/commands/test_startup.py``), so each should answer well under 1 s.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPHCHECK = str(Path(sys.executable).with_name("graphcheck"))
REF = "fixtures/reference.py:reference"

COMMANDS = {
    "graphcheck --help": [GRAPHCHECK, "--help"],
    "graphcheck rules": [GRAPHCHECK, "rules"],
    "graphcheck rules GC203": [GRAPHCHECK, "rules", "GC203"],
    "graphcheck verify (usage error)": [GRAPHCHECK, "verify"],
    "graphcheck verify --cuts x (argument error)": [GRAPHCHECK, "verify", REF, "--cuts", "x"],
    'python -c "import graphcheck"': [sys.executable, "-c", "import graphcheck"],
}


def best(repeat: int, argv: list[str]) -> float:
    """Best wall time of ``repeat`` runs of ``argv``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    width = max(map(len, COMMANDS))
    print(f"startup, whole process, best of {args.repeat}:")
    for label, argv in COMMANDS.items():
        print(f"  {label:<{width}}  {best(args.repeat, argv) * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
