"""A service's garbage collector: what ``tune_collector`` leaves behind (in a process of its own, as the
collector's settings are the whole interpreter's)."""

from __future__ import annotations

import json
import subprocess
import sys

from services.runtime.collector import YOUNG_THRESHOLD

_PROBE = """
import gc, json
before = gc.get_threshold()
from services.runtime.collector import tune_collector
tune_collector()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_a_tuned_service_collects_its_young_objects_less_often_and_never_walks_what_it_loaded() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True).stdout
    seen = json.loads(out)
    assert seen["after"] == [YOUNG_THRESHOLD, *seen["before"][1:]]
    assert seen["frozen"] > 0
