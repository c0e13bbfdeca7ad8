"""Every ray.io object in KubeRay's 85 samples decodes into the typed views and round-trips.

Round-trip means ``to_builtins(decode(x))`` keeps every field the sample set; a field may only be
dropped when it equals its default, which is checked exactly: removing it from the sample must decode
to the same struct.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
import yaml

from schema.ray import decode_ray_object, to_builtins
from tests.helpers import samples_dir

SAMPLES = samples_dir()


def _ray_objects() -> list[Any]:
    params = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ray.io/"):
                params.append(pytest.param(doc, id=f"{path.stem}#{index}-{doc['kind']}"))
    return params


RAY_OBJECTS = _ray_objects()
_DELETE = object()


def test_all_samples_are_seen() -> None:
    assert len(list(SAMPLES.glob("*.yaml"))) == 85
    kinds = sorted(p.values[0]["kind"] for p in RAY_OBJECTS)
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "RayCluster": 46,
        "RayJob": 19,
        "RayService": 15,
        "RayCronJob": 2,
    }


def _edited(obj: Any, path: tuple[str | int, ...], value: Any = _DELETE) -> Any:
    edited = copy.deepcopy(obj)
    node = edited
    for step in path[:-1]:
        node = node[step]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return edited


def _is_known_field(root: dict[str, Any], path: tuple[str | int, ...]) -> bool:
    """A known field rejects a value of no JSON type; an unknown one is silently ignored."""
    try:
        decode_ray_object(_edited(root, path, object()))
    except msgspec.ValidationError:
        return True
    return False


def _assert_kept(sample: Any, out: Any, root: dict[str, Any], path: tuple[str | int, ...] = ()) -> None:
    if isinstance(sample, dict):
        assert isinstance(out, dict), path
        for key, value in sample.items():
            if key in out:
                _assert_kept(value, out[key], root, (*path, key))
            else:
                # Dropped: only allowed for a known field whose value was the default.
                where = ".".join(map(str, (*path, key)))
                assert _is_known_field(root, (*path, key)), f"unknown field {where} in the sample"
                assert decode_ray_object(_edited(root, (*path, key))) == decode_ray_object(
                    root
                ), f"field {where} = {value!r} was lost"
    elif isinstance(sample, list):
        assert isinstance(out, list), path
        assert len(sample) == len(out), path
        for i, (s, o) in enumerate(zip(sample, out, strict=True)):
            _assert_kept(s, o, root, (*path, i))
    else:
        assert sample == out, (path, sample, out)


@pytest.mark.parametrize("obj", RAY_OBJECTS)
def test_sample_decodes_and_round_trips(obj: dict[str, Any]) -> None:
    typed = decode_ray_object(obj)
    out = to_builtins(typed)
    assert out["apiVersion"] == obj["apiVersion"]
    assert out["kind"] == obj["kind"]
    _assert_kept(obj, out, obj)
    assert decode_ray_object(out) == typed


def test_bad_input_raises_validation_error_with_path() -> None:
    bad = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c"},
        "spec": {"headGroupSpec": {"template": {}}, "workerGroupSpecs": [{"groupName": "g", "replicas": "x"}]},
    }
    with pytest.raises(msgspec.ValidationError, match=r"workerGroupSpecs\[0\]"):
        decode_ray_object(bad)


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="not a ray.io kind"):
        decode_ray_object({"apiVersion": "ray.io/v1", "kind": "RayThing", "spec": {}})
