"""Keep start-up's objects out of every later full garbage collection.

Importing torch, transformers and a backend and loading a model leave several hundred
thousand long-lived Python objects (the driver of the shipped rlvr_sync example: ~440k).
CPython's full (generation 2) collection walks all of them each time it runs: ~250 ms in the
driver and ~200 ms in a train worker, several times in a 40-step run, each one a stall of
whatever step it falls in (measured with a `gc.callbacks` probe that timed every
generation-2 collection of the driver and the workers over a 40-step run of that example).
`gc.freeze()` moves what exists now to the permanent generation, which no collection
walks, so later full collections walk only what the run itself allocates. It is called once
per process, when start-up is over and before the first step: the driver's step loop calls
it for itself and for every role's workers (RoleWorker.freeze_startup_heap).

The cost: a start-up object that later becomes cyclic garbage is never freed (its memory
stays); start-up objects are the modules, the model and the config, which live as long as
the process.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, then freeze the rest; the objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
