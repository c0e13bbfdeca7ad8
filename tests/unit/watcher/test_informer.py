"""Informer pieces without a server: line splitting and decoding, the resume state machine, sanitizing."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from services.edge.calls import ApiError
from services.edge.resources import (
    LAST_APPLIED_ANNOTATION,
    RESOURCES,
    by_api_version_kind,
    by_kind,
    sanitize,
    select_served,
    watched_resources,
)
from services.edge.watch.informer import (
    Bookmark,
    Change,
    Gone,
    Refused,
    Scope,
    WatchDriver,
    decode_line,
    make_change,
    scopes_for,
    split_lines,
)


def resource(kind: str) -> Any:
    found = by_kind(kind)
    assert found is not None
    return found


PODS = resource("Pod")
SECRETS = resource("Secret")


def line(type_: str, obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": type_, "object": obj})


def test_split_lines_regroups_chunks() -> None:
    chunks = [b'{"a":1}\n{"b"', b":2}\n", b"", b'{"c":3}', b"\n\n", b'{"d":4}']
    assert list(split_lines(iter(chunks))) == [[b'{"a":1}'], [b'{"b":2}'], [b'{"c":3}']]


def test_decode_line_change_bookmark_and_errors() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "5"}}
    change = decode_line(PODS, line("MODIFIED", pod))
    assert isinstance(change, Change)
    assert (change.type, change.uid, change.resource_version, change.namespace, change.name) == (
        "MODIFIED",
        "u",
        "5",
        "ns",
        "p",
    )
    assert change.obj["kind"] == "Pod" and change.obj["apiVersion"] == "v1"
    assert msgspec.json.decode(change.raw) == change.obj

    bookmark = decode_line(PODS, line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "77"}}))
    assert bookmark == Bookmark(resource_version="77")

    with pytest.raises(Gone, match="too old"):
        decode_line(PODS, line("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    with pytest.raises(ApiError) as raised:
        decode_line(PODS, line("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError", "message": "x"}))
    assert raised.value.status == 500
    with pytest.raises(ApiError, match="unknown watch event type"):
        decode_line(PODS, line("SURPRISE", pod))
    with pytest.raises(msgspec.DecodeError):
        decode_line(PODS, b"not json")


def test_secret_content_never_leaves_the_informer() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "1",
            "annotations": {LAST_APPLIED_ANNOTATION: '{"data":{"auth_token":"c2VjcmV0"}}', "keep": "me"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": {"auth_token": base64.b64encode(b"secret").decode()},
        "stringData": {"auth_token": "secret"},
        "type": "Opaque",
    }
    change = make_change(SECRETS, "ADDED", msgspec.json.encode(secret))
    assert b"c2VjcmV0" not in change.raw and b"secret" not in change.raw.replace(b'"Secret"', b"")
    assert "data" not in change.obj and "stringData" not in change.obj
    assert change.obj["metadata"]["annotations"] == {"keep": "me"}
    assert "managedFields" not in change.obj["metadata"]
    assert change.obj["type"] == "Opaque"
    assert secret["data"]  # the input is not mutated


@pytest.mark.parametrize(
    ("kind", "obj", "same"),
    [
        pytest.param("Pod", {"metadata": {"name": "p"}, "spec": {}}, True, id="untouched-is-the-same-dict"),
        pytest.param("Pod", {"metadata": {"name": "p", "managedFields": []}}, False, id="managed-fields-dropped"),
        pytest.param(
            "Pod",
            {"metadata": {"annotations": {LAST_APPLIED_ANNOTATION: "{}"}}},
            True,
            id="last-applied-kept-on-non-secrets",
        ),
        pytest.param("Secret", {"metadata": {"name": "s"}, "type": "Opaque"}, True, id="secret-without-data"),
    ],
)
def test_sanitize(kind: str, obj: dict[str, Any], same: bool) -> None:
    assert (sanitize(resource(kind), obj) is obj) == same


def test_watch_driver_lists_then_resumes_then_relists_on_gone() -> None:
    driver = WatchDriver(Scope(PODS, "ns"), None)
    assert driver.needs_list
    assert driver.list_query("") == (
        ("limit", "500"),
        ("labelSelector", "ray.io/node-type in (head,worker,redis-cleanup)"),
    )
    assert driver.list_query("tok")[-1] == ("continue", "tok")
    driver.listed("10")
    assert not driver.needs_list
    driver.seen("12")
    driver.seen("")
    assert dict(driver.watch_query(60)) == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": "12",
        "timeoutSeconds": "60",
        "labelSelector": "ray.io/node-type in (head,worker,redis-cleanup)",
    }
    driver.gone()
    assert driver.needs_list
    with pytest.raises(AssertionError):
        driver.watch_query()


def test_watch_driver_resumes_from_a_stored_point() -> None:
    driver = WatchDriver(Scope(resource("RayCluster")), "99")
    assert not driver.needs_list
    assert ("resourceVersion", "99") in driver.watch_query()
    assert all(name != "labelSelector" for name, _ in driver.watch_query())


def test_scopes_and_names() -> None:
    clusters, pods = resource("RayCluster"), PODS
    assert [s.name for s in scopes_for([clusters, pods], ())] == ["rayclusters.ray.io", "pods"]
    assert [s.name for s in scopes_for([clusters], ("a", "b"))] == ["rayclusters.ray.io/a", "rayclusters.ray.io/b"]


def test_resource_table() -> None:
    kinds = [r.kind for r in watched_resources()]
    assert kinds[:4] == ["RayCluster", "RayJob", "RayService", "RayCronJob"]
    assert kinds[4] == "Service"
    assert "Event" not in kinds
    assert len({r.kind for r in RESOURCES}) == len(RESOURCES)
    assert by_api_version_kind("ray.io/v1alpha1", "RayJob") == resource("RayJob")
    assert by_api_version_kind("other.io/v1", "RayJob") is None
    assert PODS.collection_path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.collection_path("") == "/api/v1/pods"
    assert resource("Ingress").collection_path("x") == "/apis/networking.k8s.io/v1/namespaces/x/ingresses"


def test_select_served_skips_optional_and_requires_the_rest() -> None:
    everything = {(r.group, r.version, r.plural) for r in RESOURCES}
    no_gateway = {s for s in everything if s[0] != "gateway.networking.k8s.io"}
    available, skipped = select_served(no_gateway)
    assert {r.kind for r in skipped} == {"Gateway", "HTTPRoute"}
    assert "Gateway" not in {r.kind for r in available}
    without_ray = {s for s in everything if s[0] != "ray.io"}
    with pytest.raises(LookupError, match=r"rayclusters\.ray\.io"):
        select_served(without_ray)


def test_an_object_too_deep_to_decode_is_refused_with_what_can_be_read_of_it() -> None:
    deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
    meta = b'{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7"}'
    line_of = b'{"type":"%s","object":{"metadata":' + meta + b',"spec":' + deep + b"}}"
    refused = decode_line(PODS, line_of % b"MODIFIED")
    assert isinstance(refused, Refused)
    assert (refused.change.uid, refused.change.name, refused.change.resource_version) == ("u", "p", "7")
    assert "nested deeper than" in refused.reason
    deleted = decode_line(PODS, line_of % b"DELETED")
    assert isinstance(deleted, Change)
    assert (deleted.type, deleted.uid) == ("DELETED", "u")
