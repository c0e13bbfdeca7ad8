"""kubesim's garbage collector: collections sized for a store that holds every object it was sent.

kubesim keeps every stored object as decoded JSON (a 1,000-RayCluster burst leaves some 12,000 objects,
Events included, each a few hundred container objects) and allocates thousands of short-lived ones per
request. With CPython's default first-generation threshold (700 allocations) the collector ran 1,333
young, 121 middle and 11 full collections through such a burst, and the full ones, each walking the whole
store, took 3.3 of kubesim's 7.9 CPU-seconds. kubesim shares its machine with the operator it serves, so
that time was taken from the operator's. Young collections every :data:`YOUNG_THRESHOLD` allocations
took the collector's time through the same burst from 4.1 to 1.9 CPU-seconds, and kubesim's from 8.9 to
7.1 (the mean of three runs each).
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 20_000
"""Allocations (net of deallocations) between two collections of the youngest generation."""


def tune_collector() -> None:
    """Collect once, freeze what survives (the modules loaded), and space the young collections out; call
    once, when kubesim starts as a program (a test that imports it keeps its own collector)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
