"""kubesim measured against the real API server: each scenario runs the same official-client calls on both
(a namespace of the same name on each) and every answer is compared after normalisation (see
differential.py). A difference either fails the test or is one of KNOWN, each naming the item of
docs/differences.md ("kubesim and a real API server") that explains it; a known difference that is no
longer seen fails too, so the table stays true."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from kubesim.settings import KubeSimSettings
from realkube import ControlPlane
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, kubesim_server, start_kubesim  # noqa: F401
from tests.helpers import eventually_sync
from tests.kubeobjects import meta
from tests.realkube.crds import ensure_crds
from tests.realkube.differential import Side, differences, normalised

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "differences.md"
DOC_SECTION = "## kubesim and a real API server"
RAY_CRDS = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "deploy" / "crds").glob("ray.io_*.yaml"))]
# The garbage collector and the finalizer-driven deletions of the real server act through its controllers,
# which on a busy machine can take a while after start.
CONTROLLERS = 180.0
HOLD = "raybus.io/test-hold"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Known:
    """A documented difference: in ``scenario``, at steps matching ``step`` and paths matching ``path``."""

    scenario: str
    step: str
    path: str
    doc: str
    """The item's bold title in docs/differences.md, section "kubesim and a real API server"."""

    def covers(self, scenario: str, step: str, path: str) -> bool:
        return scenario == self.scenario and bool(re.fullmatch(self.step, step)) and bool(re.fullmatch(self.path, path))


GENERATION = "Every object has a generation"
ITEM_TYPES = "List items carry apiVersion and kind"
ROOT_CA = "No kube-root-ca.crt in each namespace"
WORDING = "Some error messages are worded differently"
NOT_VALIDATED = "Built-in kinds are not validated"
ANY_GENERATION = r"(.*\.)?metadata\.generation"

KNOWN: list[Known] = [
    # Objects as stored.
    *(
        Known(s, ".*", ANY_GENERATION, GENERATION)
        for s in (
            "config_map_crud_and_errors",
            "finalizers",
            "garbage_collection",
            "list_paging_and_selectors",
            "patches",
            "pods",
            "services",
            "watch_from_a_resource_version",
        )
    ),
    Known("config_map_crud_and_errors", "empty labels", "metadata.labels", "Empty metadata maps are kept"),
    Known("list_paging_and_selectors", ".*", r"items\[\d+\]\.(apiVersion|kind)", ITEM_TYPES),
    Known("pods", ".*", r"items\[\d+\]\.(apiVersion|kind)", ITEM_TYPES),
    # The namespace's kube-root-ca.crt, published by a controller, is in every unselected ConfigMap list.
    Known("list_paging_and_selectors", "page [123]", r"items|metadata\.remainingItemCount", ROOT_CA),
    Known(
        "list_paging_and_selectors",
        r"(labels (tier!=web|tier notin \(web\)|!canary)|fields not name).*",
        r"items|\.",
        ROOT_CA,
    ),
    Known("delete_collection", "list|left", r"items|\.", ROOT_CA),
    Known("watch_bookmarks_and_initial_events", "initial events", r"\.", ROOT_CA),
    # Answers.
    Known(
        "delete_collection",
        "delete (web|custom objects)",
        r"items|kind|status|apiVersion|metadata\.(resourceVersion|continue)",
        "deletecollection answers a Status",
    ),
    Known("garbage_collection", "orphan delete", ".*", "Orphaning happens at once"),
    Known("pods", "delete", r"metadata\.(deletionTimestamp|deletionGracePeriodSeconds)", "Deleting an unscheduled Pod"),
    Known("status_subresource", "list", r"metadata\.continue", "Custom-object lists omit an empty continue"),
    Known(
        "custom_object_selectors",
        "(label|field) selector",
        r"metadata\.continue",
        "Custom-object lists omit an empty continue",
    ),
    Known("status_subresource", "pod status patch", r"metadata\.labels", "A Pod's /status ignores metadata"),
    Known(
        "status_subresource",
        "invalid: 422",
        r"body\.(message|details\.causes)",
        "Schema errors come in another order, without the note on unchecked rules",
    ),
    Known("expired_resource_versions", ".*", ".*", "A resourceVersion expires sooner"),
    Known("service_patches", ".*", ANY_GENERATION, GENERATION),
    Known("service_patches", "change clusterIP: 422", ".*", NOT_VALIDATED),
    Known(
        "watch_bookmarks_and_initial_events", "types until the timeout", r"\.", "No BOOKMARK before a watch times out"
    ),
    Known("list_paging_and_selectors", "bad continue: 400|bad label selector: 400", r"body\.message", WORDING),
    Known("patches", "json (test fails|missing path): 422", r"body\.(message|details)", WORDING),
    Known("patches", "custom object strategic: 415", r"body\.message", WORDING),
    Known("patches", "apply again|apply without fieldManager: 400", ".*", "Server-side apply is a merge"),
    Known("patches", "pod merge: containers replaced", ".*", NOT_VALIDATED),
    Known("services", "no ports: 422", ".*", NOT_VALIDATED),
]


# Scenarios run on a kubesim keeping EVENT_WINDOW events per resource, and make more changes than that.
EVENT_WINDOW = 4
EXPIRING = {"expired_resource_versions"}

ScenarioFn = Callable[[Side], None]
SCENARIOS: dict[str, ScenarioFn] = {}


def scenario(fn: ScenarioFn) -> ScenarioFn:
    SCENARIOS[fn.__name__] = fn
    return fn


# --- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_api(real_kube: ControlPlane, kube_admin: client.ApiClient) -> client.ApiClient:
    ensure_crds(kube_admin, RAY_CRDS)
    return kube_admin


@pytest.fixture(scope="module")
def small_window_kubesim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    """A kubesim keeping only a few events per resource, so a resourceVersion soon expires."""
    handle = start_kubesim(
        crd_paths=default_crd_paths(),
        settings=KubeSimSettings(event_window=EVENT_WINDOW),
        workdir=tmp_path_factory.mktemp("kubesim-small-window"),
    )
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def sides(
    request: pytest.FixtureRequest,
    real_kube: ControlPlane,
    real_api: client.ApiClient,
    kubesim_server: KubeSimHandle,  # noqa: F811
) -> Iterator[tuple[Side, Side]]:
    """The same fresh namespace on both servers; the real one waits for what its controllers put in every
    namespace (the default ServiceAccount, the kube-root-ca.crt ConfigMap), which kubesim's lacks."""
    namespace = f"diff-{secrets.token_hex(4)}"
    sim = kubesim_server
    if request.node.callspec.params.get("name") in EXPIRING:
        sim = request.getfixturevalue("small_window_kubesim")
    pair = (
        Side("kubesim", sim.api_client, namespace),
        Side("real", real_api, namespace, expire=lambda: None if real_kube.compact_etcd() else None),
    )
    for side in pair:
        client.CoreV1Api(side.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    real_core = client.CoreV1Api(real_api)
    eventually_sync(
        lambda: real_core.read_namespaced_service_account("default", namespace),
        timeout=CONTROLLERS,
        message="the default ServiceAccount exists",
    )
    eventually_sync(
        lambda: real_core.read_namespaced_config_map("kube-root-ca.crt", namespace),
        timeout=CONTROLLERS,
        message="the kube-root-ca.crt ConfigMap exists",
    )
    yield pair
    for side in pair:
        client.CoreV1Api(side.api).delete_namespace(namespace)


# --- helpers --------------------------------------------------------------------------------------------


def _cm(name: str, labels: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **({"labels": labels} if labels else {}), **metadata}, "data": {"k": "v"}}


def _create_cm(core: client.CoreV1Api, ns: str, body: dict[str, Any]) -> client.V1ConfigMap:
    """Create a ConfigMap without recording the answer (from a JSON body, as the scenarios write them)."""
    return core.create_namespaced_config_map(ns, body)  # type: ignore[arg-type]


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _until_gone(read: Callable[[], object], what: str) -> None:
    eventually_sync(lambda: _gone(read), timeout=CONTROLLERS, message=f"{what} is gone")


def _names(body: Any) -> Any:
    if isinstance(body, dict) and "items" in body:
        return [item["metadata"]["name"] for item in body["items"]]
    return body


def _raycluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0"}]}},
            },
            **spec,
        },
    }


def _ray(side: Side) -> tuple[client.CustomObjectsApi, tuple[str, str, str, str]]:
    return client.CustomObjectsApi(side.api), ("ray.io", "v1", side.namespace, "rayclusters")


# --- scenarios ------------------------------------------------------------------------------------------


@scenario
def config_map_crud_and_errors(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    created = side.call("create", core.create_namespaced_config_map, ns, _cm("one", {"app": "x"}))
    side.call("get", core.read_namespaced_config_map, "one", ns)
    side.call("create again: 409 AlreadyExists", core.create_namespaced_config_map, ns, _cm("one"))
    side.call("get missing: 404", core.read_namespaced_config_map, "nope", ns)
    stale = {**_cm("one"), "metadata": {"name": "one", "resourceVersion": created["metadata"]["resourceVersion"]}}
    side.call("update", core.replace_namespaced_config_map, "one", ns, {**stale, "data": {"k": "2"}})
    side.call("update stale: 409 Conflict", core.replace_namespaced_config_map, "one", ns, stale)
    side.call("create invalid name: 422", core.create_namespaced_config_map, ns, _cm("Bad_Name"))
    side.call("create invalid label: 422", core.create_namespaced_config_map, ns, _cm("two", {"bad key!": "v"}))
    side.call("generateName", core.create_namespaced_config_map, ns, {"metadata": {"generateName": "gen-"}})
    side.call("empty labels", core.create_namespaced_config_map, ns, {"metadata": {"name": "empty", "labels": {}}})
    side.call(
        "delete with a wrong uid precondition: 409",
        core.delete_namespaced_config_map,
        "one",
        ns,
        body={"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}},
    )
    side.call(
        "delete with a wrong resourceVersion precondition: 409",
        core.delete_namespaced_config_map,
        "one",
        ns,
        body={"preconditions": {"resourceVersion": "1"}},
    )
    side.call("delete", core.delete_namespaced_config_map, "one", ns)
    side.call("delete again: 404", core.delete_namespaced_config_map, "one", ns)
    side.call("update missing: 404", core.replace_namespaced_config_map, "one", ns, _cm("one"))
    side.call("name mismatch: 400", core.replace_namespaced_config_map, "other", ns, _cm("one"))


@scenario
def list_paging_and_selectors(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    for index, tier in enumerate(["web", "web", "db", "cache", "web"]):
        labels = {"tier": tier, **({"canary": "yes"} if index % 2 else {})}
        _create_cm(core, ns, _cm(f"cm-{index}", labels))
    first = side.call("page 1", core.list_namespaced_config_map, ns, limit=2)
    second = side.call("page 2", core.list_namespaced_config_map, ns, limit=2, _continue=first["metadata"]["continue"])
    side.call("page 3", core.list_namespaced_config_map, ns, limit=2, _continue=second["metadata"]["continue"])
    side.call("bad continue: 400", core.list_namespaced_config_map, ns, limit=2, _continue="garbage")
    for selector in ("tier=web", "tier!=web", "tier in (db,cache)", "tier notin (web)", "canary", "!canary"):
        body = side.call(f"labels {selector}", core.list_namespaced_config_map, ns, label_selector=selector)
        side.note(f"labels {selector} names", _names(body))
    side.call("labels web, paged", core.list_namespaced_config_map, ns, label_selector="tier=web", limit=1)
    side.call("fields name", core.list_namespaced_config_map, ns, field_selector="metadata.name=cm-3")
    side.call("fields not name", core.list_namespaced_config_map, ns, field_selector="metadata.name!=cm-3")
    side.call("bad label selector: 400", core.list_namespaced_config_map, ns, label_selector="tier in web")
    side.call("unknown field: 400", core.list_namespaced_config_map, ns, field_selector="data.k=v")


@scenario
def watch_from_a_resource_version(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    start = _create_cm(core, ns, _cm("w"))
    core.patch_namespaced_config_map("w", ns, {"data": {"k": "2"}})
    _create_cm(core, ns, _cm("other", {"skip": "me"}))
    core.delete_namespaced_config_map("w", ns)
    events = []
    for event in side.watch(core.list_namespaced_config_map, ns, resource_version=meta(start).resource_version):
        events.append(event)
        if event["type"] == "DELETED":
            break
    side.note("events", events)
    selected = []
    for event in side.watch(
        core.list_namespaced_config_map, ns, resource_version=meta(start).resource_version, label_selector="!skip"
    ):
        selected.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            break
    side.note("events with a selector", selected)


@scenario
def watch_bookmarks_and_initial_events(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    for name in ("a", "b"):
        _create_cm(core, ns, _cm(name))
    events = []
    for event in side.watch(
        core.list_namespaced_config_map,
        ns,
        allow_watch_bookmarks=True,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
    ):
        events.append(event)
        if event["type"] == "BOOKMARK":
            break
    side.note("initial events", events)
    # Without a resourceVersion the watch starts with the current objects; it ends at its timeout.
    side.note(
        "types until the timeout",
        [
            e["type"]
            for e in side.watch(core.list_namespaced_config_map, ns, allow_watch_bookmarks=True, timeout_seconds=3)
        ],
    )
    side.call(
        "initial events without resourceVersionMatch: 422",
        core.list_namespaced_config_map,
        ns,
        watch=True,
        send_initial_events=True,
        allow_watch_bookmarks=True,
        timeout_seconds=3,
    )


@scenario
def expired_resource_versions(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    for name in ("a", "b"):
        _create_cm(core, ns, _cm(name))
    first = core.list_namespaced_config_map(ns, limit=1)
    assert first.metadata is not None
    for value in range(EVENT_WINDOW + 1):
        core.patch_namespaced_config_map("a", ns, {"data": {"k": str(value)}})
    side.expire()
    events = list(side.watch(core.list_namespaced_config_map, ns, resource_version="1", timeout_seconds=30))
    side.note("watch from an expired resourceVersion", events)
    side.call(
        "list with an expired continue: 410",
        core.list_namespaced_config_map,
        ns,
        limit=1,
        _continue=first.metadata._continue,
    )


@scenario
def patches(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    _create_cm(core, ns, {"metadata": {"name": "p", "labels": {"a": "1"}}, "data": {"k": "v", "j": "w"}})
    patch = core.patch_namespaced_config_map
    side.call(
        "merge",
        patch,
        "p",
        ns,
        {"data": {"k": None, "n": "new"}, "metadata": {"labels": {"b": "2"}}},
        _content_type=MERGE,
    )
    side.call(
        "json add", patch, "p", ns, [{"op": "add", "path": "/data/added", "value": "x"}], _content_type=JSON_PATCH
    )
    side.call(
        "json test fails: 422",
        patch,
        "p",
        ns,
        [{"op": "test", "path": "/data/n", "value": "old"}],
        _content_type=JSON_PATCH,
    )
    side.call(
        "json missing path: 422", patch, "p", ns, [{"op": "remove", "path": "/data/none"}], _content_type=JSON_PATCH
    )
    side.call("strategic", patch, "p", ns, {"data": {"s": "1"}}, _content_type=STRATEGIC)
    side.call(
        "stale resourceVersion in a patch: 409",
        patch,
        "p",
        ns,
        {"metadata": {"resourceVersion": "1"}, "data": {"k": "z"}},
        _content_type=MERGE,
    )
    side.call("patch missing: 404", patch, "nope", ns, {"data": {}}, _content_type=MERGE)
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}}
    side.call("apply creates", patch, "applied", ns, applied, field_manager="diff", _content_type=APPLY)
    side.call(
        "apply again", patch, "applied", ns, {**applied, "data": {"b": "2"}}, field_manager="diff", _content_type=APPLY
    )
    side.call("apply without fieldManager: 400", patch, "applied", ns, applied, _content_type=APPLY)

    pod = {
        "metadata": {"name": "pod"},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "a", "image": "busybox", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "busybox"},
            ],
        },
    }
    side.call("pod", core.create_namespaced_pod, ns, pod)
    side.call(
        "pod strategic: containers merge by name",
        core.patch_namespaced_pod,
        "pod",
        ns,
        {"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}},
        _content_type=STRATEGIC,
    )
    side.call(
        "pod merge: containers replaced",
        core.patch_namespaced_pod,
        "pod",
        ns,
        {"metadata": {"labels": {"m": "1"}}, "spec": {"containers": [{"name": "a", "image": "busybox:3"}]}},
        _content_type=MERGE,
    )
    ray, (group, version, rns, plural) = _ray(side)
    ray.create_namespaced_custom_object(group, version, rns, plural, _raycluster("rc"))
    side.call(
        "custom object strategic: 415",
        ray.patch_namespaced_custom_object,
        group,
        version,
        rns,
        plural,
        "rc",
        {"metadata": {"labels": {"x": "1"}}},
        _content_type=STRATEGIC,
    )
    side.call(
        "custom object merge",
        ray.patch_namespaced_custom_object,
        group,
        version,
        rns,
        plural,
        "rc",
        {"spec": {"suspend": True}},
        _content_type=MERGE,
    )


@scenario
def status_subresource(side: Side) -> None:
    ray, (group, version, ns, plural) = _ray(side)
    rc = (group, version, ns, plural, "rc")
    body = {**_raycluster("rc"), "status": {"state": "ready"}}
    side.call("create drops status", ray.create_namespaced_custom_object, group, version, ns, plural, body)
    side.call(
        "status patch ignores spec",
        ray.patch_namespaced_custom_object_status,
        *rc,
        {"spec": {"suspend": True}, "status": {"state": "ready"}},
        _content_type=MERGE,
    )
    side.call(
        "main patch ignores status, bumps generation",
        ray.patch_namespaced_custom_object,
        *rc,
        {"spec": {"suspend": True}, "status": {"state": "failed"}},
        _content_type=MERGE,
    )
    side.call(
        "metadata change keeps generation",
        ray.patch_namespaced_custom_object,
        *rc,
        {"metadata": {"labels": {"l": "1"}}},
        _content_type=MERGE,
    )
    side.call("get status", ray.get_namespaced_custom_object_status, group, version, ns, plural, "rc")
    side.call(
        "invalid: 422",
        ray.create_namespaced_custom_object,
        group,
        version,
        ns,
        plural,
        _raycluster("bad", workerGroupSpecs=[{"groupName": "w", "replicas": "many", "rayStartParams": {}}]),
    )
    side.call("list", ray.list_namespaced_custom_object, group, version, ns, plural)
    core, ns = client.CoreV1Api(side.api), side.namespace
    pod = {
        "metadata": {"name": "p"},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "busybox"}]},
    }
    core.create_namespaced_pod(ns, pod)  # type: ignore[arg-type]
    side.call(
        "pod status patch",
        core.patch_namespaced_pod_status,
        "p",
        ns,
        {"metadata": {"labels": {"from-status": "1"}}, "status": {"message": "hi"}},
        _content_type=MERGE,
    )


@scenario
def custom_objects(side: Side) -> None:
    ray, (group, version, ns, plural) = _ray(side)
    coords = (group, version, ns, plural)
    created = side.call("create", ray.create_namespaced_custom_object, *coords, _raycluster("rc"))
    side.call("create again: 409 AlreadyExists", ray.create_namespaced_custom_object, *coords, _raycluster("rc"))
    side.call("get missing: 404", ray.get_namespaced_custom_object, *coords, "nope")
    side.call(
        "generateName",
        ray.create_namespaced_custom_object,
        *coords,
        {**_raycluster(""), "metadata": {"generateName": "rc-"}},
    )
    stale = {**_raycluster("rc"), "metadata": {"name": "rc", "resourceVersion": created["metadata"]["resourceVersion"]}}
    side.call(
        "update",
        ray.replace_namespaced_custom_object,
        *coords,
        "rc",
        {**stale, "spec": {**stale["spec"], "suspend": True}},
    )
    side.call("update stale: 409 Conflict", ray.replace_namespaced_custom_object, *coords, "rc", stale)
    side.call(
        "update without resourceVersion: 422", ray.replace_namespaced_custom_object, *coords, "rc", _raycluster("rc")
    )
    side.call(
        "json patch test of a stale resourceVersion: 409",
        ray.patch_namespaced_custom_object,
        *coords,
        "rc",
        {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "spec": {"suspend": False}},
        _content_type=MERGE,
    )
    side.call(
        "delete with a wrong uid precondition: 409",
        ray.delete_namespaced_custom_object,
        *coords,
        "rc",
        body={"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}},
    )
    side.call(
        "create in a missing namespace: 404",
        ray.create_namespaced_custom_object,
        group,
        version,
        "no-such-namespace",
        plural,
        _raycluster("rc"),
    )
    owner = cast(dict[str, Any], ray.get_namespaced_custom_object(*coords, "rc"))
    reference = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": owner["metadata"]["uid"]}
    core = client.CoreV1Api(side.api)
    _create_cm(core, ns, _cm("owned", ownerReferences=[reference]))
    start = owner["metadata"]["resourceVersion"]
    ray.patch_namespaced_custom_object_status(*coords, "rc", {"status": {"state": "ready"}}, _content_type=MERGE)
    side.call("delete", ray.delete_namespaced_custom_object, *coords, "rc")
    events = []
    for event in side.watch(ray.list_namespaced_custom_object, *coords, resource_version=start):
        events.append(event)
        if event["type"] == "DELETED":
            break
    side.note("events", events)
    _until_gone(lambda: core.read_namespaced_config_map("owned", ns), "the RayCluster's ConfigMap")


@scenario
def services(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    spec = {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 80}]}
    side.call("cluster ip", core.create_namespaced_service, ns, {"metadata": {"name": "svc"}, "spec": spec})
    side.call(
        "headless",
        core.create_namespaced_service,
        ns,
        {"metadata": {"name": "headless"}, "spec": {**spec, "clusterIP": "None"}},
    )
    side.call(
        "no ports: 422",
        core.create_namespaced_service,
        ns,
        {"metadata": {"name": "bad"}, "spec": {"selector": {"app": "x"}}},
    )


@scenario
def service_patches(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    spec = {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]}
    core.create_namespaced_service(ns, {"metadata": {"name": "svc"}, "spec": spec})  # type: ignore[arg-type]
    patch = core.patch_namespaced_service
    side.call(
        "strategic: ports merge by port",
        patch,
        "svc",
        ns,
        {"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
        _content_type=STRATEGIC,
    )
    side.call(
        "strategic: $patch delete",
        patch,
        "svc",
        ns,
        {"spec": {"ports": [{"port": 9090, "$patch": "delete"}]}},
        _content_type=STRATEGIC,
    )
    side.call(
        "merge: ports replaced",
        patch,
        "svc",
        ns,
        {"spec": {"ports": [{"name": "grpc", "port": 50051}]}},
        _content_type=MERGE,
    )
    side.call("change clusterIP: 422", patch, "svc", ns, {"spec": {"clusterIP": "10.0.0.99"}}, _content_type=MERGE)


@scenario
def custom_object_selectors(side: Side) -> None:
    ray, (group, version, ns, plural) = _ray(side)
    for name in ("a", "b"):
        body = _raycluster(name)
        body["metadata"]["labels"] = {"x": name}
        ray.create_namespaced_custom_object(group, version, ns, plural, body)
    side.call("label selector", ray.list_namespaced_custom_object, group, version, ns, plural, label_selector="x")
    side.call(
        "field selector",
        ray.list_namespaced_custom_object,
        group,
        version,
        ns,
        plural,
        field_selector="metadata.name=a",
    )
    side.call(
        "unknown field selector: 400",
        ray.list_namespaced_custom_object,
        group,
        version,
        ns,
        plural,
        field_selector="spec.suspend=true",
    )


@scenario
def pods(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    pod = {
        "metadata": {"name": "pod", "labels": {"app": "x"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}],
        },
    }
    side.call("create", core.create_namespaced_pod, ns, pod)
    side.call("list by phase", core.list_namespaced_pod, ns, field_selector="status.phase=Pending")
    side.call("delete", core.delete_namespaced_pod, "pod", ns, grace_period_seconds=0)


@scenario
def delete_collection(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
        _create_cm(core, ns, _cm(name, {"tier": tier}))
    side.call("delete web", core.delete_collection_namespaced_config_map, ns, label_selector="tier=web")
    side.note("left", _names(side.call("list", core.list_namespaced_config_map, ns)))
    ray, (group, version, rns, plural) = _ray(side)
    ray.create_namespaced_custom_object(group, version, rns, plural, _raycluster("rc"))
    side.call("delete custom objects", ray.delete_collection_namespaced_custom_object, group, version, rns, plural)
    side.note("custom left", _names(ray.list_namespaced_custom_object(group, version, rns, plural)))


@scenario
def finalizers(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    _create_cm(core, ns, _cm("held", finalizers=[HOLD]))
    side.call("delete", core.delete_namespaced_config_map, "held", ns)
    side.call("get while held", core.read_namespaced_config_map, "held", ns)
    side.call(
        "update while held", core.patch_namespaced_config_map, "held", ns, {"data": {"k": "2"}}, _content_type=MERGE
    )
    side.call(
        "new finalizer while deleting: 422",
        core.patch_namespaced_config_map,
        "held",
        ns,
        {"metadata": {"finalizers": [HOLD, "raybus.io/other"]}},
        _content_type=MERGE,
    )
    side.call(
        "release", core.patch_namespaced_config_map, "held", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    _until_gone(lambda: core.read_namespaced_config_map("held", ns), "the released object")
    side.call("get after release: 404", core.read_namespaced_config_map, "held", ns)


def _owner_and_dependent(core: client.CoreV1Api, ns: str, tag: str, **reference: Any) -> None:
    owner = _create_cm(core, ns, _cm(f"{tag}-owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": f"{tag}-owner", "uid": meta(owner).uid, **reference}
    _create_cm(core, ns, _cm(f"{tag}-dependent", ownerReferences=[ref]))


@scenario
def garbage_collection(side: Side) -> None:
    core, ns = client.CoreV1Api(side.api), side.namespace
    read = core.read_namespaced_config_map

    _owner_and_dependent(core, ns, "bg")
    side.call("background delete", core.delete_namespaced_config_map, "bg-owner", ns, propagation_policy="Background")
    _until_gone(lambda: read("bg-dependent", ns), "the background dependent")

    _owner_and_dependent(core, ns, "orphan")
    side.call("orphan delete", core.delete_namespaced_config_map, "orphan-owner", ns, propagation_policy="Orphan")
    _until_gone(lambda: read("orphan-owner", ns), "the orphaning owner")
    eventually_sync(
        lambda: not meta(read("orphan-dependent", ns)).owner_references,
        timeout=CONTROLLERS,
        message="the orphan loses its owner reference",
    )
    side.call("orphan", read, "orphan-dependent", ns)

    owner = _create_cm(core, ns, _cm("fg-owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "fg-owner",
        "uid": meta(owner).uid,
        "blockOwnerDeletion": True,
    }
    _create_cm(core, ns, _cm("fg-dependent", ownerReferences=[ref], finalizers=[HOLD]))
    side.call("foreground delete", core.delete_namespaced_config_map, "fg-owner", ns, propagation_policy="Foreground")
    eventually_sync(
        lambda: meta(read("fg-dependent", ns)).deletion_timestamp,
        timeout=CONTROLLERS,
        message="the collector deletes the foreground dependent",
    )
    side.call("owner while the dependent is held", read, "fg-owner", ns)
    side.call("dependent while held", read, "fg-dependent", ns)
    core.patch_namespaced_config_map("fg-dependent", ns, {"metadata": {"finalizers": None}})
    _until_gone(lambda: read("fg-owner", ns), "the foreground owner")
    side.call("dependent after: 404", read, "fg-dependent", ns)


# --- the comparison -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_kubesim_answers_as_the_real_api_server(name: str, sides: tuple[Side, Side], tmp_path: Path) -> None:
    kubesim, real = sides
    SCENARIOS[name](kubesim)
    SCENARIOS[name](real)
    # Both records, normalised, for reading a failure.
    for side in sides:
        (tmp_path / f"{side.name}.json").write_text(json.dumps(normalised(side.recorded), indent=1))
    assert list(kubesim.recorded) == list(real.recorded)
    unexplained: list[str] = []
    explained: set[Known] = set()
    for step in kubesim.recorded:
        for path, ours, theirs in differences(normalised(kubesim.recorded[step]), normalised(real.recorded[step])):
            where = path or "."
            known = [k for k in KNOWN if k.covers(name, step, where)]
            explained.update(known)
            if not known:
                unexplained.append(f"{step} @ {where}: kubesim {ours!r}, real {theirs!r}")
    stale = [k for k in KNOWN if k.scenario == name and k not in explained]
    assert not unexplained, "undocumented differences:\n" + "\n".join(unexplained)
    assert not stale, f"documented differences no longer seen (remove them from KNOWN and the docs): {stale}"


def test_every_known_difference_is_documented() -> None:
    text = DOC.read_text()
    assert DOC_SECTION in text
    section = text.split(DOC_SECTION, 1)[1].split("\n## ", 1)[0]
    missing = sorted({k.doc for k in KNOWN if f"- **{k.doc}**" not in section})
    assert not missing, f"not in docs/differences.md ({DOC_SECTION}): {missing}"
    assert {k.scenario for k in KNOWN} <= SCENARIOS.keys()
