"""raybus on the real API server, each process with only its deploy/ ServiceAccount's rights.

One stack for the module (``raybus up --kube real``). The tests run in order and the last one reads the
API server's audit log of the whole module: no raybus request was refused (a permission deploy/ lacks
fails it), and the permissions deploy/ grants that no request used are written to a report.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client, config, dynamic, watch

from services.cli.realcluster import NAMESPACE, ROLE_ACCOUNTS, heads_unreachable
from services.edge.watch.informer import REFUSED_REASON
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import load_yaml_docs
from tests.e2e.rayservices import active, is_ready, pending, sample_service
from tests.e2e.test_raycluster_samples import CONFORMANCE, expected_workers
from tests.e2e.test_rayservice import with_env
from tests.helpers import samples_dir
from tests.kubeobjects import meta
from tests.realkube import audit, workloads
from tests.realkube.raybus_stack import GROUP, PLURAL, VERSION, RaybusStack, running_stack, wait
from tests.security.test_hostile_objects import deep_cluster

# What a RayCluster's children can be (every kind raybus creates for one), as (apiVersion, kind).
CHILD_KINDS = (
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
    ("v1", "PersistentVolumeClaim"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("networking.k8s.io/v1", "Ingress"),
    ("batch/v1", "Job"),
)
BURST = 20
WORKERS = 2
KILLED = ("watch", "applier", "reconciler")
REPORT = "raybus-rbac-report.txt"
# The first test starts the control plane and two stacks and brings 30 sample clusters up, on a shared machine.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaybusStack]:
    with running_stack(tmp_path_factory.mktemp("raybus-real"), "real") as stack:
        yield stack


def test_each_process_holds_its_own_service_account(real: RaybusStack) -> None:
    """The kubeconfig on each raybus process's command line authenticates as its deploy/ ServiceAccount."""
    identities = {}
    for role, account in ROLE_ACCOUNTS.items():
        if role == "status":
            continue  # the history API of ``raybus up`` reviews no tokens: no kubeconfig on its command line
        argv = real.child(role).argv
        kubeconfig = argv[argv.index("--kubeconfig") + 1]
        with config.new_client_from_config(config_file=kubeconfig) as api:  # type: ignore[no-untyped-call]
            review = client.AuthenticationV1Api(api).create_self_subject_review(
                client.V1SelfSubjectReview(metadata=client.V1ObjectMeta())
            )
        assert review.status is not None and review.status.user_info is not None
        identities[role] = (review.status.user_info.username, account)
    assert identities == {
        role: (audit.SERVICE_ACCOUNT_USER.format(namespace=NAMESPACE, name=account), account)
        for role, account in ROLE_ACCOUNTS.items()
        if role != "status"
    }
    assert "--kubeconfig" not in real.child("reconciler").argv


def apply_sample(api: client.ApiClient, sample: str, namespace: str) -> dict[str, Any]:
    """Apply a sample's documents into a new ``namespace``; return its RayCluster document."""
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    dyn = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
    cluster: dict[str, Any] = {}
    for doc in load_yaml_docs(samples_dir() / sample):
        doc.setdefault("metadata", {})["namespace"] = namespace
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(body=doc, namespace=namespace)
        if doc["kind"] == "RayCluster":
            cluster = doc
    return cluster


def cluster_status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
    )
    return dict(obj.get("status") or {})


def ready(api: client.ApiClient, namespace: str, cluster: dict[str, Any]) -> bool:
    status = cluster_status(api, namespace, cluster["metadata"]["name"])
    return status.get("state") == "ready" and status.get("readyWorkerReplicas", 0) == expected_workers(cluster)


def children(api: client.ApiClient, namespace: str, name: str) -> set[tuple[str, str]]:
    """(kind, name) of every object the RayCluster owns; a Pod's name counts without its random suffix."""
    cluster = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
    )
    uid = cluster["metadata"]["uid"]
    dyn = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
    found = set()
    for api_version, kind in CHILD_KINDS:
        for item in dyn.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).items:
            meta = item.metadata
            if any(ref.uid == uid for ref in meta.ownerReferences or []):
                found.add((kind, f"{meta.name.rpartition('-')[0]}-*" if kind == "Pod" else meta.name))
    return found


def sample_children(stack: RaybusStack) -> dict[str, set[tuple[str, str]]]:
    """Apply every conformance sample, wait until each is ready, and return each one's children."""
    with stack.api() as api:
        clusters = {s: (f"sample-{i}", apply_sample(api, s, f"sample-{i}")) for i, s in enumerate(CONFORMANCE)}
        for sample, (namespace, cluster) in clusters.items():
            wait(stack, lambda n=namespace, c=cluster: ready(api, n, c), f"{sample} ready")
        return {s: children(api, n, c["metadata"]["name"]) for s, (n, c) in clusters.items()}


def test_samples_become_ready_with_the_children_kubesim_gets(real: RaybusStack, tmp_path: Path) -> None:
    with running_stack(tmp_path / "sim", "sim") as sim:
        on_kubesim = sample_children(sim)
    on_real = sample_children(real)
    differences = {
        sample: {"only on kubesim": sorted(on_kubesim[sample] - got), "only on real": sorted(got - on_kubesim[sample])}
        for sample, got in on_real.items()
        if got != on_kubesim[sample]
    }
    assert differences == {}


def test_a_deleted_cluster_is_collected_by_the_garbage_collector(real: RaybusStack) -> None:
    namespace = "collected"
    with real.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        custom = client.CustomObjectsApi(api)
        cluster = small_cluster("doomed", workers=WORKERS)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, cluster)
        wait(real, lambda: ready(api, namespace, cluster), "the cluster ready")
        owned = children(api, namespace, "doomed")
        assert ("Pod", "doomed-head-*") in owned, owned
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")

        def gone() -> bool:
            listed = cast(dict[str, Any], custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))
            left = listed["items"]
            pods = core.list_namespaced_pod(namespace).items
            services = core.list_namespaced_service(namespace).items
            return not left and not pods and not services

        # Whatever finalizer raybus put on the cluster is removed, then the collector deletes the children
        # (the attached kubelet finishes each Pod's graceful deletion).
        wait(real, gone, "the cluster and its Pods and Services gone")


def test_an_object_too_deep_to_decode_gets_the_watch_roles_warning_event(real: RaybusStack) -> None:
    """The watch role says on an object why it does not project it, with its own ServiceAccount's rights."""
    namespace = "refused"
    with real.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        headers = {"Content-Type": "application/json"}
        token = api.configuration.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        # Sent as bytes: the client's serializer is recursive, and the object is deeper than it goes.
        response = api.rest_client.pool_manager.request(
            "POST",
            f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
            body=deep_cluster("too-deep").encode(),
            headers=headers,
        )
        assert response.status == 201, response.data[:500]
        uid = json.loads(response.data)["metadata"]["uid"]

        def warned() -> bool:
            events = core.list_namespaced_event(namespace).items
            return any(e.involved_object.uid == uid and e.reason == REFUSED_REASON for e in events)

        wait(real, warned, "the watch role's Warning Event on the refused RayCluster")


JOB_SAMPLES = {
    "k8s-job": ("ray-job.shutdown.yaml", "K8sJobMode"),
    "http": ("ray-job.sample.yaml", "HTTPMode"),
    "sidecar": ("ray-job.sidecar-mode.yaml", "SidecarMode"),
    "interactive": ("ray-job.interactive-mode.yaml", "InteractiveMode"),
}
"""Per submission mode: the KubeRay sample run in it (KubeRay ships none for HTTPMode: its basic sample,
with the mode set) and the mode."""
INTERACTIVE_JOB_ID = "interactive-sample"
CRONJOB_SAMPLE = "ray-cronjob.sample.yaml"


def require_reachable_heads(real: RaybusStack) -> None:
    """RayJobs and RayServices need the simulated heads where the API server's proxies reach them: fail
    (never skip) where the machine lacks the Pod network route."""
    problem = heads_unreachable()
    assert problem is None, f"the API server cannot proxy to the simulated Ray heads: {problem}"
    assert "--heads-on-pod-ips" in real.child("kubesim").argv


def rayjob_ended(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    status = workloads.status_of(api, "rayjobs", namespace, name)
    return status if status.get("jobDeploymentStatus") in ("Complete", "Failed") else None


def submit_interactive_job(real: RaybusStack, api: client.ApiClient, namespace: str, name: str) -> None:
    """What a user of InteractiveMode does: wait for the cluster, set ``spec.jobId``, submit that job to
    the head's dashboard (here through the API server's service proxy)."""

    def waiting() -> dict[str, Any] | None:
        status = workloads.status_of(api, "rayjobs", namespace, name)
        return status if status.get("jobDeploymentStatus") == "Waiting" else None

    cluster = wait(real, waiting, "the interactive RayJob waiting for its job")["rayClusterName"]
    workloads.patch(api, "rayjobs", namespace, name, {"spec": {"jobId": INTERACTIVE_JOB_ID}})
    wait(
        real,
        lambda: workloads.status_of(api, "rayjobs", namespace, name).get("jobId") == INTERACTIVE_JOB_ID,
        "the interactive RayJob took its job id",
    )
    request = {"entrypoint": "python -c 'import ray; ray.init()'", "submission_id": INTERACTIVE_JOB_ID}
    workloads.service_proxy_post(api, namespace, f"{cluster}-head-svc:dashboard", "/api/jobs/", request)


def test_rayjobs_reach_their_end_in_every_submission_mode(real: RaybusStack) -> None:
    """Each submission mode's RayJob ends Complete + SUCCEEDED: the prober follows the job through the API
    server's service proxy to the head's dashboard; HTTPMode's submit and InteractiveMode's user go the same
    way. K8sJobMode's submitter Job is run by the controller manager's Job controller and the attached
    kubelet, and its shutdownAfterJobFinishes deletes the cluster, whose Pods the garbage collector removes."""
    require_reachable_heads(real)
    with real.api() as api:
        started: dict[str, tuple[str, str]] = {}
        for mode, (sample, submission_mode) in JOB_SAMPLES.items():
            docs = workloads.sample_docs(sample)
            rayjob = next(d for d in docs if d["kind"] == "RayJob")
            rayjob["spec"]["submissionMode"] = submission_mode
            namespace = f"rayjob-{mode}"
            workloads.apply_docs(api, docs, namespace)
            started[mode] = (namespace, rayjob["metadata"]["name"])
        submit_interactive_job(real, api, *started["interactive"])
        ended = {
            mode: wait(real, lambda n=namespace, j=name: rayjob_ended(api, n, j), f"the {mode} RayJob ended")
            for mode, (namespace, name) in started.items()
        }
        assert {mode: (s["jobDeploymentStatus"], s.get("jobStatus")) for mode, s in ended.items()} == {
            mode: ("Complete", "SUCCEEDED") for mode in JOB_SAMPLES
        }
        submitters = {mode: workloads.jobs(api, namespace) for mode, (namespace, _) in started.items()}
        assert {mode: len(found) for mode, found in submitters.items()} == {
            "k8s-job": 1,
            "http": 0,
            "sidecar": 0,
            "interactive": 0,
        }
        (submitter,) = submitters["k8s-job"]
        assert workloads.job_complete(submitter), submitter.status
        assert [r.kind for r in meta(submitter).owner_references or []] == ["RayJob"]
        sidecar_head = workloads.head_pod(api, started["sidecar"][0], ended["sidecar"]["rayClusterName"])
        assert sidecar_head.spec is not None
        assert [c.name for c in sidecar_head.spec.containers] == ["ray-head", "ray-job-submitter"]
        for mode in ("http", "sidecar", "interactive"):
            namespace, _ = started[mode]
            assert workloads.names(api, "rayclusters", namespace) == {ended[mode]["rayClusterName"]}, mode

        namespace, _ = started["k8s-job"]
        shut_down = ended["k8s-job"]["rayClusterName"]
        wait(
            real,
            lambda: not workloads.names(api, "rayclusters", namespace)
            and not workloads.cluster_pods(api, namespace, shut_down),
            "the K8sJobMode RayJob's cluster and its Pods gone after ttlSecondsAfterFinished",
        )


def test_a_raycronjob_runs_its_rayjob_at_a_tick(real: RaybusStack) -> None:
    """The sample's every-minute schedule: at a tick the RayCronJob creates a RayJob that runs to its end
    (K8sJobMode, the cluster shut down after it), and records the tick; suspended, it creates no more."""
    require_reachable_heads(real)
    namespace = "raycronjob"
    with real.api() as api:
        docs = workloads.sample_docs(CRONJOB_SAMPLE)
        name = next(d for d in docs if d["kind"] == "RayCronJob")["metadata"]["name"]
        workloads.apply_docs(api, docs, namespace)
        first = wait(
            real, lambda: sorted(workloads.names(api, "rayjobs", namespace)), "a RayJob at the first tick", timeout=300
        )[0]
        ended = wait(real, lambda: rayjob_ended(api, namespace, first), "the tick's RayJob ended")
        assert (ended["jobDeploymentStatus"], ended.get("jobStatus")) == ("Complete", "SUCCEEDED")
        assert workloads.status_of(api, "raycronjobs", namespace, name).get("lastScheduleTime")
        workloads.patch(api, "raycronjobs", namespace, name, {"spec": {"suspend": True}})


def test_a_rayservice_runs_and_a_blue_green_upgrade_replaces_its_cluster(real: RaybusStack) -> None:
    """KubeRay's RayService sample reaches Running with its Serve applications (read through the service
    proxy) and a healthy head Serve proxy (through the pod proxy); a change of its cluster spec brings up
    a new cluster, moves the serve Service to it, and the old cluster is deleted after the deletion delay
    (2 s instead of KubeRay's 60 s), its Pods removed by the garbage collector."""
    namespace = "rayservice"
    body = sample_service("ray-service.sample.yaml")
    body["spec"]["rayClusterDeletionDelaySeconds"] = 2
    name = body["metadata"]["name"]
    serve_service = f"{name}-serve-svc"
    require_reachable_heads(real)
    with real.api() as api:
        workloads.apply_docs(api, [body], namespace)

        def running(cluster_other_than: str = "") -> dict[str, Any] | None:
            status = workloads.status_of(api, "rayservices", namespace, name)
            serving = is_ready(status) and not pending(status) and active(status) not in ("", cluster_other_than)
            return status if serving else None

        def served_by(cluster: str) -> bool:
            pods = workloads.ready_endpoint_pods(api, namespace, serve_service)
            return bool(pods) and all(pod.startswith(f"{cluster}-") for pod in pods)

        status = wait(real, running, "the RayService Running")
        old = active(status)
        applications = {app["name"] for app in yaml.safe_load(body["spec"]["serveConfigV2"])["applications"]}
        assert set(status["activeServiceStatus"]["applicationStatuses"]) == applications
        wait(real, lambda: served_by(old), "the serve Service's endpoints on the first cluster")

        upgraded = with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1")
        workloads.patch(api, "rayservices", namespace, name, {"spec": {"rayClusterConfig": upgraded}})
        new = active(wait(real, lambda: running(old), "the RayService Running on a new cluster"))
        wait(real, lambda: served_by(new), "the serve Service's endpoints on the new cluster")
        wait(
            real,
            lambda: workloads.names(api, "rayclusters", namespace) == {new}
            and not workloads.cluster_pods(api, namespace, old),
            "the old cluster and its Pods gone",
        )


class PodCreates:
    """Every Pod ADDED in a namespace, counted by name, from a watch started before the first create."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._core = client.CoreV1Api(api)
        self._namespace = namespace
        self.added: Counter[str] = Counter()
        self.cycles = 0
        self._stop = threading.Event()
        listed = self._core.list_namespaced_pod(namespace)
        assert listed.metadata is not None
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, name="pod-creates", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self._core.list_namespaced_pod, self._namespace, resource_version=self._rv, timeout_seconds=2
            )
            try:
                for event in stream:
                    if event["type"] == "ADDED":
                        self.added[event["object"].metadata.name] += 1
                    self._rv = event["object"].metadata.resource_version
            except client.ApiException:
                continue  # resumes from the last version seen
            self.cycles += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def converged(api: client.ApiClient, namespace: str, expected: dict[str, int]) -> bool:
    """Every expected cluster ready with its Pods; no other cluster, no Pod of another cluster."""
    custom = client.CustomObjectsApi(api)
    states = {
        c["metadata"]["name"]: (c.get("status") or {}).get("state")
        for c in cast(dict[str, Any], custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))["items"]
    }
    pods = Counter(
        (meta(p).labels or {}).get("ray.io/cluster", "")
        for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items
    )
    if any(states.get(name) != "ready" or pods.get(name, 0) != n for name, n in expected.items()):
        return False
    return set(states) == set(expected) and set(pods) <= set(expected)


def test_kill_9_of_each_process_during_a_burst(real: RaybusStack) -> None:
    namespace = "burst"
    with real.api() as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        custom = client.CustomObjectsApi(api)
        creates = PodCreates(api, namespace)
        try:
            names = [f"burst-{i:02d}" for i in range(BURST)]
            expected: dict[str, int] = {}
            for i, victim in enumerate(KILLED):
                for name in names[i :: len(KILLED)]:
                    custom.create_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, small_cluster(name, workers=WORKERS)
                    )
                    expected[name] = 1 + WORKERS
                real.kill_and_restart(victim)
            wait(real, lambda: converged(api, namespace, expected), "every cluster ready after the kills")
            deleted = names[-5:]
            for name in deleted:
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                del expected[name]
            wait(real, lambda: converged(api, namespace, expected), "the deleted clusters' Pods gone")
            cycles = creates.cycles
            wait(real, lambda: creates.cycles >= cycles + 2, "the Pod watch caught up")
        finally:
            creates.close()
    twice = {name: n for name, n in creates.added.items() if n > 1}
    assert twice == {}
    # Every cluster was ready before any was deleted: its head and workers, each created once.
    assert sum(creates.added.values()) == BURST * (1 + WORKERS)


def test_the_audit_report_names_a_missing_permission(real: RaybusStack) -> None:
    """The check below is only as good as its reading of the log: an account of raybus's namespace without
    a rule for it asks for something, and the report must list that request as forbidden."""
    account = "rbac-check"
    with real.api() as admin:
        core = client.CoreV1Api(admin)
        core.create_namespaced_service_account(
            NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account))
        )
        requested = core.create_namespaced_service_account_token(
            account, NAMESPACE, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
        )
        assert requested.status is not None
        token = requested.status.token
        settings = client.Configuration()
        settings.host = admin.configuration.host
        settings.ssl_ca_cert = admin.configuration.ssl_ca_cert
        settings.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(settings) as api, pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api).list_namespaced_pod("default")
    assert refused.value.status == 403

    def reported() -> list[audit.Request]:
        return audit.report(real.cluster.audit_log, NAMESPACE, [account]).forbidden

    forbidden = wait(real, reported, "the refused request in the audit log")
    assert [(r.use.verb, r.use.resource) for r in forbidden] == [("list", "pods")]


def test_no_raybus_request_was_refused(real: RaybusStack, request: pytest.FixtureRequest) -> None:
    """Runs last: the audit log then holds the module's whole run."""
    found = audit.report(real.cluster.audit_log, NAMESPACE, ROLE_ACCOUNTS.values())
    target = Path(request.config.rootpath) / ".pytest_cache" / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(found.text() + "\n")
    print(f"\n{found.text()}\n(written to {target})")
    assert found.used, "the audit log holds no raybus request"
    assert found.forbidden == []
    assert found.refused == []
    denied = [
        line
        for line in real.metrics("applier").splitlines()
        if line.startswith("raybus_applier_calls_total") and 'outcome="denied"' in line
    ]
    assert all(line.rstrip().endswith(" 0") or line.rstrip().endswith(" 0.0") for line in denied), denied
    refused = {name: log.lower().count("forbidden") for name, log in real.logs().items()}
    assert {name: n for name, n in refused.items() if n} == {}
