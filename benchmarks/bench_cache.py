"""Export cache: the whole-process time of ``graphcheck verify`` and ``graphcheck check``,
cold against warm.

Each figure is a subprocess running the installed ``graphcheck`` command, timed from
start to exit: ``cold`` with an empty cache folder (build, export, analysis, report;
the run stores the report), ``warm`` the same command again (the stored report, no
build, no export). Also the cost of ``python -c "import torch"`` on this machine, the
floor of any run that imports torch. Best of ``--repeat`` runs; the goal is a warm
run at most 0.1 of the cold one. Every warm run's output is checked to be the cold
run's, byte for byte.

``check`` runs on a copy of ``examples/graphcheck.toml`` (three models: a small
transformers family, the reference decoder, the full-size Llama-3.1-8B config.json) in
a temporary folder, its paths made absolute, so the lock is written there: plain
``check``, and ``check --locked --format sarif`` (what the example CI workflow runs)
against a lock written once beforehand without the cache.

    .venv/bin/python benchmarks/bench_cache.py [--repeat 3] [--only verify|check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CASES = [
    ("reference_64 (64 layers)", "fixtures/reference.py:reference_64", "32"),
    ("Llama-3.1-405B config (126 layers)", "hf:fixtures/configs/llama-3.1-405b.json", "63"),
]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, bytes, int]:
    """Wall time, stdout and exit status of one process."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} failed: {done.stderr.decode().strip()}")
    return seconds, done.stdout, done.returncode


def cold_and_warm(argv: list[str], repeat: int, env: dict[str, str]) -> tuple[float, float]:
    """Best cold and best warm time of ``graphcheck *argv``, each cold run on an empty
    cache folder."""
    colds, warms = [], []
    for _ in range(repeat):
        folder = tempfile.mkdtemp(prefix="graphcheck-bench-cache-")
        command = [str(BIN / "graphcheck"), *argv, "--cache-dir", folder]
        try:
            cold, report, status = timed(command, env)
            warm, again, again_status = timed(command, env)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if (again, again_status) != (report, status):
            sys.exit(f"graphcheck {' '.join(argv)}: the warm run differs from the cold one")
        colds.append(cold)
        warms.append(warm)
    return min(colds), min(warms)


def example_config(folder: Path) -> Path:
    """``examples/graphcheck.toml`` copied into ``folder``, its relative paths absolute."""
    text = (ROOT / "examples/graphcheck.toml").read_text(encoding="utf-8")
    config = folder / "graphcheck.toml"
    config.write_text(text.replace('"../', f'"{ROOT}/').replace(":../", f":{ROOT}/"))
    return config


def bench_check(repeat: int, env: dict[str, str]) -> None:
    """``check`` and ``check --locked --format sarif`` on the example configuration."""
    folder = Path(tempfile.mkdtemp(prefix="graphcheck-bench-check-"))
    try:
        config = str(example_config(folder))
        print(f"{'graphcheck check (examples/graphcheck.toml)':44} {'cold s':>7} {'warm s':>7} "
              f"{'warm/cold':>10}")  # fmt: skip
        cold, warm = cold_and_warm(["check", "--config", config], repeat, env)
        print(f"{'check':44} {cold:7.2f} {warm:7.2f} {warm / cold:10.3f}")
        timed([str(BIN / "graphcheck"), "lock", "--config", config, "--no-cache"], env)
        argv = ["check", "--config", config, "--locked", "--format", "sarif"]
        cold, warm = cold_and_warm(argv, repeat, env)
        print(f"{'check --locked --format sarif':44} {cold:7.2f} {warm:7.2f} {warm / cold:10.3f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("verify", "check"), help="only these rows")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "GRAPHCHECK_NO_CACHE"}
    torch_import = min(
        timed([sys.executable, "-c", "import torch"], env)[0] for _ in range(args.repeat)
    )
    print(f"python -c 'import torch': {torch_import:.2f} s (best of {args.repeat})")
    if args.only != "check":
        print(f"{'graphcheck verify':38} {'cold s':>7} {'warm s':>7} {'warm/cold':>10}")
        for label, spec, cut in CASES:
            cold, warm = cold_and_warm(["verify", spec, "--cuts", cut], args.repeat, env)
            print(f"{label:38} {cold:7.2f} {warm:7.2f} {warm / cold:10.3f}")
    if args.only != "verify":
        bench_check(args.repeat, env)


if __name__ == "__main__":
    main()
