"""Stage-program equivalence: each stage, built the way a rank builds it, runs the
slice of the uncut program it replaces.

* :mod:`~graphcheck.stages.builders` - the stage builders (builtins, the transformers
  builders of :mod:`~graphcheck.stages.hf_builders`, user functions) and the one
  call that runs them;
* :mod:`~graphcheck.stages.fresh` - a fresh process per call, as a rank starts;
* :mod:`~graphcheck.stages.build` - one stage built, exported and summarised;
* :mod:`~graphcheck.stages.fingerprint` - labelled parts of a program, as plain data;
* :mod:`~graphcheck.stages.compare` - stage parts against the uncut program's;
* :mod:`~graphcheck.stages.programs` - every stage of a plan, built and compared.
"""

__all__: list[str] = []
