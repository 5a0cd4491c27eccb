"""``python -m graphcheck.interop.model_explorer DIR [--port N]``: open the overlay
``--model-explorer DIR`` wrote in Model Explorer (exit 2 with one line when it cannot)."""

from __future__ import annotations

import argparse
import sys

from graphcheck.errors import GraphcheckError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphcheck.interop.model_explorer",
        description="Open a graphcheck overlay in Model Explorer.",
    )
    parser.add_argument("folder", metavar="DIR", help="the folder --model-explorer DIR wrote")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    from graphcheck.interop.model_explorer.adapter import open_overlay

    try:
        open_overlay(args.folder, args.host, args.port)
    except GraphcheckError as err:
        print(f"graphcheck: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
