"""KV entry keys: :func:`schema.subjects.parse_entry_key` inverts :func:`schema.subjects.entry_key`."""

from __future__ import annotations

import pytest

from schema import subjects
from schema.keys import ReconcileKey

KEY = ReconcileKey(kind="RayCluster", namespace="team.a", name="rc.1")


def test_an_entry_key_parses_back_to_its_key_kind_and_name() -> None:
    kv_key = subjects.entry_key(KEY, "Pod", "rc.1-head-x")
    assert subjects.parse_entry_key(kv_key) == subjects.EntryKey(KEY, "Pod", "rc.1-head-x")
    assert subjects.entry_kind_and_name(kv_key) == ("Pod", "rc.1-head-x")


@pytest.mark.parametrize(
    "kv_key",
    [
        "RayCluster.default.rc",  # a key alone, no entry
        "RayCluster.default.rc.Pod",
        "RayCluster.default.rc.Pod.p.extra",
        "Pod.default.rc.Pod.p",  # not a key kind
        "RayCluster..rc.Pod.p",  # no namespace
        "rv.pods",  # a resume point, not an entry
    ],
)
def test_anything_else_is_not_an_entry_key(kv_key: str) -> None:
    with pytest.raises(ValueError):
        subjects.parse_entry_key(kv_key)
