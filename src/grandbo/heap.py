"""The cycle collector's settings for a long-running server.

CPython's full collection walks every container object the process holds, under the GIL: in `grandbo serve`
with a few hundred organizations (modules, the app, the model, indexes' cached entries: about 400,000 objects)
each one took 210-290 ms, every request of the process waited it out, and with Python's default young generation
(700 objects) it came every few seconds under load. `settle` is called once the server has started: what exists
then (code, settings, the model) is put out of the collector's reach for good (`gc.freeze`), and the young
generation is made larger, so that collections come less often. What is frozen is what the server starts with
(about 150,000 objects); the indexes' cached entries, read later, are still walked by each full collection, which
comes less often (it counts young collections). Reference counting still frees everything as before; only
garbage that forms cycles waits for a collection: the young one, or for a cycle that outlived it, a rarer one.
"""

from __future__ import annotations

import gc


def settle(young_objects: int) -> int:
    """Freeze what the process holds after its start and collect young objects every `young_objects` net
    allocations (0: Python's own settings, nothing frozen); the number of objects frozen."""
    if young_objects <= 0:
        return 0
    gc.collect()  # what startup left as cyclic garbage is freed, not frozen
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_objects, middle, old)
    return gc.get_freeze_count()
