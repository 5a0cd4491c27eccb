"""From a model spec to an ``nn.Module`` on fake weights and its pipeline layout.

* :mod:`~graphcheck.model.spec` - ``MODEL`` and ``--allow-fp32`` checked without torch
  (syntax, the file or folder it names), before anything is built;
* :mod:`~graphcheck.model.modes` - the program modes and the enum parser, without torch;
* :mod:`~graphcheck.model.load` - ``file.py:factory`` / ``pkg.mod:factory`` resolved
  and built under a fake tensor mode in bf16;
* :mod:`~graphcheck.model.hf` - ``hf:TYPE`` and ``hf:path/config.json``: tiny
  transformers configs, nothing downloaded;
* :mod:`~graphcheck.model.layout` - the layer container and the edge modules, from
  ``get_pp_module_config()``, flags or detection;
* :mod:`~graphcheck.model.session` - the built model, its layout and the options every
  later build repeats;
* :mod:`~graphcheck.model.values` - the real values of the small tensors (buffers,
  constants) the fake build computes beside it, for comparing them by value.
"""

__all__: list[str] = []
