"""The export cache: a warm re-run on unchanged model code skips the build and export.

Exports are the cost of a run, and a CI job re-runs the same ``verify`` on every push.
The cache stores the **result of a command** (``verify``, ``map``, ``plan``: the
rendered report and the exit status, :mod:`graphcheck.cache.results`), and for
``check`` and ``lock`` the **record of each check** of the configuration (its plans'
reports and its lock entry in plain data, :mod:`graphcheck.cache.records`: an edit of
one check's table re-runs that check alone), under a key of everything that can
change the graph or the verdict (:mod:`graphcheck.cache.key`):

* the command and every option it was given (any option: one graphcheck adds later is
  in the key without anyone listing it; only ``--no-cache``, ``--cache-dir`` and
  ``--progress``, which change no report, are left out; for a check, its own table of
  the configuration, not the whole file), and the working directory (reports print
  source paths relative to it);
* the content of the files the options name (``file.py``, an ``hf:`` ``config.json``,
  ``--kernels``, a ``--stage-builder`` file);
* the Python, graphcheck, torch and transformers versions and a hash of graphcheck's
  own source files;
* recorded after the run, as ccache's direct mode does, the model's dependencies with
  their content hashes: every Python file the run imported outside the standard
  library, site-packages and graphcheck (the modules defining the model's classes and
  what they import), and for ``hf:`` specs transformers' modeling and configuration
  files. A hit needs each of them to hash the same still: an edit, even of a comment,
  runs afresh.

Nothing here imports torch, transformers or :mod:`graphcheck.api`: this package imports
only :mod:`graphcheck.errors` and :mod:`graphcheck._version`, so a hit costs what the
command line imports before it, the key and the dependency hashes (0.1 s for a whole
``graphcheck verify`` process on this machine, against 2.5 s for ``import torch``).

Left out: the Python API does not use the cache (its reports hold the live FX nodes of
their crossing sets, which do not outlive the process); nothing evicts old entries
(delete the folder); what the model's code reads other than Python modules (a data file,
an environment variable) is not in the key: ``--no-cache`` for such a model.

Why the result, and not also the exported program (``torch.export.save``) for other
plans of the same model: a saved program does not analyse as the live one does. Loaded
back with ``torch.export.load`` (torch 2.13), the fake parameters come back sharing
one storage: the reference decoder's map went from every boundary legal to none, each
cut a false GC205 (``model.embed_tokens.weight`` and a layer norm "share one storage"),
and so on every fixture tried (``skip_connection``, ``fp32_residual``,
``tied_embeddings``, ``ignores_cu_seqlens``, ``length_guard``). Loading also took 1.5
to 3.3 s against an export of 2 to 7 s on those 8-layer fixtures, with torch imported
and the fake model built for the layout either way. So only results are cached:
another plan of the same model is a fresh export.

The folder and its safety (atomic writes, damaged entries ignored with a note, an
unwritable folder a note): :mod:`graphcheck.cache.store`.
"""

from __future__ import annotations

from graphcheck.cache.entry import Entry
from graphcheck.cache.records import RecordCache, check_entry
from graphcheck.cache.results import (
    COMMANDS,
    cacheable,
    report_of,
    report_record,
    result_entry,
)
from graphcheck.cache.store import Store, add_options, resolve_folder

__all__ = [
    "COMMANDS",
    "Entry",
    "RecordCache",
    "check_entry",
    "report_of",
    "report_record",
    "result_entry",
    "Store",
    "add_options",
    "cacheable",
    "resolve_folder",
]
