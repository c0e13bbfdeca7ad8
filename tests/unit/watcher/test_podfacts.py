"""Decoding only the slim part of a Pod gives exactly what slimming the whole decoded Pod gives, whatever
the shape of the JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from services.edge.watch.podfacts import decode_slim_pod, slim_pod

GOLDEN = Path(__file__).resolve().parents[2] / "golden"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3))
anything = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Well-formed ``value`` mostly; sometimes null or any other JSON value in its place."""
    return st.one_of(value, value, value, st.none(), anything)


def fields(required: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with any subset of ``required``'s fields, plus some unknown ones."""
    return st.fixed_dictionaries({}, optional={**required, "other": anything, "uid2": anything})


containers = st.lists(maybe(fields({"name": maybe(st.text(max_size=3)), "ports": maybe(st.lists(anything))})))
metadata = fields(
    {name: maybe(st.text(max_size=3)) for name in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")}
    | {"labels": maybe(st.dictionaries(st.text(max_size=3), st.text(max_size=3))), "ownerReferences": anything}
)
pods = fields(
    {
        "apiVersion": maybe(st.just("v1")),
        "kind": maybe(st.just("Pod")),
        "metadata": maybe(metadata),
        "spec": maybe(fields({"containers": maybe(containers)})),
        "status": maybe(fields({"podIP": maybe(st.sampled_from(["", "10.0.0.1"])), "phase": anything})),
    }
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(pods, pods, pods, anything))
def test_decoding_the_slim_part_is_slimming_the_whole(value: Any) -> None:
    data = msgspec.json.encode(value)
    if not isinstance(value, dict):
        with pytest.raises(msgspec.DecodeError):
            decode_slim_pod(data)
        return
    assert decode_slim_pod(data) == slim_pod(value)


def test_the_sample_pods_decode_to_their_slim_part() -> None:
    found = 0
    for path in sorted(GOLDEN.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for pod in _pods(doc):
                assert decode_slim_pod(msgspec.json.encode(pod)) == slim_pod(pod)
                found += 1
    assert found > 10


def _pods(value: object) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        own = [value] if value.get("kind") == "Pod" else []
        return own + [pod for child in value.values() for pod in _pods(child)]
    if isinstance(value, list):
        return [pod for child in value for pod in _pods(child)]
    return []
