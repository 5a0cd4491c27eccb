"""Write the generated pages into the site as it builds (mkdocs-gen-files): the reference
pages (graphcheck.console.reference), the op table (the op registry), the cut explorer's
screenshot (taken by the Chromium test) and the notebook."""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

from graphcheck.analysis.locality.transfer import table_markdown
from graphcheck.console.reference import pages

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "tests" / "artifacts" / "cut_map.png"  # tests/reporters/test_view.py

for path, text in pages().items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)

with mkdocs_gen_files.open("reference/op-table.md", "w") as page:
    page.write(
        "# Op table\n\nEvery op the token-locality proof has a rule for, by family module "
        "(`graphcheck/analysis/locality/`); an op that is not here fails closed.\n\n"
        + table_markdown()
    )

if not SCREENSHOT.is_file():
    raise SystemExit(
        f"{SCREENSHOT.relative_to(ROOT)} is missing: the cut explorer guide shows the "
        "screenshot the Chromium test takes; run make docs (it runs that test first)"
    )
with mkdocs_gen_files.open("images/cut_map.png", "wb") as image:
    image.write(SCREENSHOT.read_bytes())

with mkdocs_gen_files.open("guides/cut-explorer-notebook.ipynb", "w") as notebook:
    notebook.write((ROOT / "examples" / "cut_explorer.ipynb").read_text(encoding="utf-8"))
