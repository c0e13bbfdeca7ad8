"""Watch semantics through ``kubernetes.watch.Watch``: initial state, resume, 410, bookmarks, selectors."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from kubesim.settings import KubeSimSettings
from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.helpers import eventually_sync
from tests.kubeobjects import unread, version_of


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    """A server with a tiny event window and fast bookmarks."""
    settings = KubeSimSettings(event_window=4, bookmark_interval=0.1)
    handle = start_kubesim(settings=settings, workdir=tmp_path_factory.mktemp("kubesim-watch"))
    try:
        yield handle
    finally:
        handle.close()


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}}


def _stream(list_fn: Callable[..., object], *args: str, **options: object) -> Iterator[dict[str, Any]]:
    """``watch.Watch().stream`` (the client leaves it unannotated): the events of watching ``list_fn``."""
    return watch.Watch().stream(list_fn, *args, **options)  # type: ignore[no-untyped-call,no-any-return]


def _events(stream: Iterator[dict[str, Any]], count: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for event in stream:
        out.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(out) == count:
            break
    return out


def test_watch_without_resource_version_starts_with_current_objects(
    core: client.CoreV1Api, kubesim_namespace: str
) -> None:
    for name in ("a", "b"):
        core.create_namespaced_config_map(kubesim_namespace, _cm(name))  # type: ignore[arg-type]
    stream = _stream(core.list_namespaced_config_map, kubesim_namespace, timeout_seconds=30)
    assert _events(stream, 2) == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_from_resource_version_replays_later_events_in_order(
    core: client.CoreV1Api, kubesim_namespace: str
) -> None:
    core.create_namespaced_config_map(kubesim_namespace, _cm("old"))  # type: ignore[arg-type]
    rv = version_of(core.list_namespaced_config_map(kubesim_namespace))
    core.create_namespaced_config_map(kubesim_namespace, _cm("a"))  # type: ignore[arg-type]
    core.patch_namespaced_config_map("a", kubesim_namespace, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("a", kubesim_namespace)
    stream = _stream(core.list_namespaced_config_map, kubesim_namespace, resource_version=rv, timeout_seconds=30)
    assert _events(stream, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_deleted_event_carries_a_new_resource_version(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    created = core.create_namespaced_config_map(kubesim_namespace, _cm("a"))  # type: ignore[arg-type]
    core.delete_namespaced_config_map("a", kubesim_namespace)
    stream = _stream(
        core.list_namespaced_config_map,
        kubesim_namespace,
        resource_version=version_of(created),
        timeout_seconds=30,
    )
    event = next(iter(stream))
    assert event["type"] == "DELETED"
    assert int(event["object"].metadata.resource_version) > int(version_of(created))


def test_live_events_reach_a_running_watch(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    seen: list[tuple[str, str]] = []
    w = watch.Watch()  # type: ignore[no-untyped-call]

    def consume() -> None:
        for event in w.stream(core.list_namespaced_config_map, kubesim_namespace, timeout_seconds=30):  # type: ignore[no-untyped-call]
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                w.stop()  # type: ignore[no-untyped-call]
                break

    thread = threading.Thread(target=consume)
    thread.start()
    core.create_namespaced_config_map(kubesim_namespace, _cm("live"))  # type: ignore[arg-type]
    eventually_sync(lambda: seen, message="ADDED not delivered")
    core.patch_namespaced_config_map("live", kubesim_namespace, {"data": {"v": "3"}})
    thread.join(timeout=30)
    assert seen == [("ADDED", "live"), ("MODIFIED", "live")]


def test_cluster_wide_watch_sees_every_namespace(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    marker = secrets.token_hex(4)
    rv = version_of(core.list_config_map_for_all_namespaces(limit=1))
    core.create_namespaced_config_map(kubesim_namespace, _cm("a", marker=marker))  # type: ignore[arg-type]
    core.create_namespaced_config_map("default", _cm(f"a-{marker}", marker=marker))  # type: ignore[arg-type]
    stream = _stream(
        core.list_config_map_for_all_namespaces,
        label_selector=f"marker={marker}",
        resource_version=rv,
        timeout_seconds=30,
    )
    assert _events(stream, 2) == [("ADDED", "a"), ("ADDED", f"a-{marker}")]
    core.delete_namespaced_config_map(f"a-{marker}", "default")


def test_label_selector_transitions_become_added_and_deleted(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, _cm("a", tier="x"))  # type: ignore[arg-type]
    rv = version_of(core.list_namespaced_config_map(kubesim_namespace))
    core.patch_namespaced_config_map("a", kubesim_namespace, {"metadata": {"labels": {"tier": "y"}}})
    core.patch_namespaced_config_map("a", kubesim_namespace, {"metadata": {"labels": {"tier": "x"}}})
    core.patch_namespaced_config_map("a", kubesim_namespace, {"data": {"v": "9"}})
    stream = _stream(
        core.list_namespaced_config_map,
        kubesim_namespace,
        label_selector="tier=x",
        resource_version=rv,
        timeout_seconds=30,
    )
    assert _events(stream, 3) == [("DELETED", "a"), ("ADDED", "a"), ("MODIFIED", "a")]


def test_field_selector_on_name_watches_one_object(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    rv = version_of(core.list_namespaced_config_map(kubesim_namespace))
    for name in ("a", "b"):
        core.create_namespaced_config_map(kubesim_namespace, _cm(name))  # type: ignore[arg-type]
    stream = _stream(
        core.list_namespaced_config_map,
        kubesim_namespace,
        field_selector="metadata.name=b",
        resource_version=rv,
        timeout_seconds=30,
    )
    assert _events(stream, 1) == [("ADDED", "b")]


def test_timeout_seconds_ends_the_stream(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    events = list(_stream(core.list_namespaced_config_map, kubesim_namespace, timeout_seconds=1))
    assert events == []


def test_too_old_resource_version_is_410_gone(tuned: KubeSimHandle) -> None:
    core = client.CoreV1Api(tuned.api_client)
    ns = f"gone-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    first = core.create_namespaced_config_map(ns, _cm("c0"))  # type: ignore[arg-type]
    for i in range(1, 8):
        core.create_namespaced_config_map(ns, _cm(f"c{i}"))  # type: ignore[arg-type]
    resp = unread(
        core.list_namespaced_config_map(
            ns, watch=True, resource_version=version_of(first), timeout_seconds=5, _preload_content=False
        )
    )
    lines = [json.loads(line) for line in resp.data.decode().splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert status["code"] == 410
    assert status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {version_of(first)} (")


def test_watch_client_raises_410_when_retries_are_off(tuned: KubeSimHandle) -> None:
    core = client.CoreV1Api(tuned.api_client)
    ns = f"gone-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    first = core.create_namespaced_config_map(ns, _cm("c0"))  # type: ignore[arg-type]
    for i in range(1, 8):
        core.create_namespaced_config_map(ns, _cm(f"c{i}"))  # type: ignore[arg-type]
    stream = _stream(core.list_namespaced_config_map, ns, resource_version=version_of(first), timeout_seconds=5)
    with pytest.raises(client.ApiException) as err:
        next(iter(stream))
    assert err.value.status == 410


def test_bookmarks_carry_only_the_resource_version(tuned: KubeSimHandle) -> None:
    core = client.CoreV1Api(tuned.api_client)
    ns = f"bm-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    stream = _stream(core.list_namespaced_config_map, ns, allow_watch_bookmarks=True, timeout_seconds=30)
    event = next(iter(stream))
    assert event["type"] == "BOOKMARK"
    assert event["raw_object"]["kind"] == "ConfigMap"
    assert set(event["raw_object"]["metadata"]) == {"resourceVersion"}
    assert int(event["raw_object"]["metadata"]["resourceVersion"]) > 0


def test_five_concurrent_watchers_each_see_every_event(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    rv = version_of(core.list_namespaced_config_map(kubesim_namespace))
    for i in range(20):
        core.create_namespaced_config_map(kubesim_namespace, _cm(f"c{i:02d}"))  # type: ignore[arg-type]
    results: list[list[tuple[str, str]]] = []

    def consume() -> None:
        stream = _stream(core.list_namespaced_config_map, kubesim_namespace, resource_version=rv, timeout_seconds=30)
        results.append(_events(stream, 20))

    threads = [threading.Thread(target=consume) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    expected = [("ADDED", f"c{i:02d}") for i in range(20)]
    assert results == [expected] * 5


def test_watch_via_path_prefix(kubesim_server: KubeSimHandle, core: client.CoreV1Api, kubesim_namespace: str) -> None:
    created = core.create_namespaced_config_map(kubesim_namespace, _cm("a"))  # type: ignore[arg-type]
    pool = kubesim_server.api_client.rest_client.pool_manager
    url = (
        f"{kubesim_server.url}/api/v1/watch/namespaces/{kubesim_namespace}/configmaps/a"
        "?timeoutSeconds=1&resourceVersion=0"
    )
    lines = pool.request("GET", url).data.decode().splitlines()
    event = json.loads(lines[0])
    assert created.metadata is not None
    assert (event["type"], event["object"]["metadata"]["uid"]) == ("ADDED", created.metadata.uid)


def test_send_initial_events_ends_with_a_marked_bookmark(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    core = client.CoreV1Api(kubesim_server.api_client)
    core.create_namespaced_config_map(kubesim_namespace, _cm("a"))  # type: ignore[arg-type]
    pool = kubesim_server.api_client.rest_client.pool_manager
    url = (
        f"{kubesim_server.url}/api/v1/namespaces/{kubesim_namespace}/configmaps?watch=1&timeoutSeconds=1"
        "&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    )
    events = [json.loads(line) for line in pool.request("GET", url).data.decode().splitlines()]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
