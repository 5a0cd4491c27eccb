"""The export cache: a warm re-run on unchanged model code skips the build and export.

Exports are the cost of a run, and a CI job re-runs the same ``verify`` on every push.
The cache stores the **result of a command** (``verify``, ``map``, ``plan``: the
rendered report and the exit status, :mod:`graphcheck.cache.results`) under a key of
everything that can change the graph or the verdict (:mod:`graphcheck.cache.key`):

* the command and every option it was given (any option: one graphcheck adds later is
  in the key without anyone listing it), and the working directory;
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

A hit imports neither torch nor transformers (nor :mod:`graphcheck.api`): this package
imports only :mod:`graphcheck.errors` and :mod:`graphcheck._version`.

Why the result, and not the exported program: a program saved with
``torch.export.save`` still has to be loaded (torch imported, the fake model built for
its layout) and analysed again, which is most of a warm run's cost; and a warm re-run
of the very same command is the case CI repeats. Only results are cached.

The folder and its safety (atomic writes, damaged entries ignored with a note, an
unwritable folder a note): :mod:`graphcheck.cache.store`.
"""

from __future__ import annotations

from graphcheck.cache.results import COMMANDS, ResultCache, cacheable
from graphcheck.cache.store import Store, resolve_folder

__all__ = ["COMMANDS", "ResultCache", "Store", "cacheable", "resolve_folder"]
