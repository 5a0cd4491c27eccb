"""Write the generated pages into the site as it builds (mkdocs-gen-files): the reference
pages (graphcheck.console.reference), the op table (the op registry), the cut explorer's
screenshot (taken by the Chromium test) and the example notebook as its test ran it."""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

from graphcheck.analysis.locality.transfer import table_markdown
from graphcheck.console.reference import pages

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"  # what tests/reporters/test_view.py leaves
SCREENSHOT = ARTIFACTS / "cut_map.png"  # the cut explorer, as the Chromium test saw it
NOTEBOOK = ARTIFACTS / "cut_explorer.ipynb"  # examples/cut_explorer.ipynb, as the test ran it

for path, text in pages().items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)

with mkdocs_gen_files.open("reference/op-table.md", "w") as page:
    page.write(
        "# Op table\n\nEvery op the token-locality proof has a rule for, by family module "
        "(`graphcheck/analysis/locality/`); an op that is not here fails closed.\n\n"
        + table_markdown()
    )

for made in (SCREENSHOT, NOTEBOOK):
    if not made.is_file():
        raise SystemExit(
            f"{made.relative_to(ROOT)} is missing: the site shows what the cut explorer's "
            "tests saw; run make docs (it runs those tests first)"
        )
with mkdocs_gen_files.open("images/cut_map.png", "wb") as image:
    image.write(SCREENSHOT.read_bytes())

with mkdocs_gen_files.open("guides/cut-explorer-notebook.ipynb", "w") as notebook:
    notebook.write(NOTEBOOK.read_text(encoding="utf-8"))
