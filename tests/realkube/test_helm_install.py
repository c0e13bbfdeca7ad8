"""The Helm chart installed into a real API server, for several values of ``tests/deploy/chart_values.py``.

Per values: the release namespace is created (labelled as ``deploy/base`` labels its namespace), and
``helm install --dry-run=server`` against the plane's kubeconfig succeeds (it runs first: a real object it
would create makes helm refuse to install over it). Then the CRDs, ServiceAccounts and RBAC objects are
created for real as cluster admin (so the real RBAC authorizer holds them) and every other object passes a
server-side dry run. Each ServiceAccount then authenticates with a token of its own, and
SelfSubjectAccessReviews show it holds exactly what its role needs — the watcher roles'
``services.edge.permissions`` tables and the status service's ``services.status.access`` rules, from
which the chart's RBAC is generated — where the values say it works, and nothing elsewhere.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from kubernetes import client, config, dynamic

from realkube import ControlPlane
from services.edge.apply.authorize import Rule
from services.edge.permissions import NAMESPACE_RULES_BY_ROLE, RULES_BY_ROLE, NamedRule
from services.edge.rbac_manifests import component_name
from services.runtime.settings import WATCHER_ROLES
from services.status.access import REQUIRED_RULES as STATUS_RULES
from tests.deploy.chart_values import MATRIX
from tests.deploy.render import CHART, RELEASE, find, helm_binary, render_chart
from tests.realkube.crds import ensure_crds
from tests.realkube.submit import submit

CASES: Final = ("defaults", "single-namespace", "watch-namespaces", "external-nats")

# Created for real, in this order; everything else is dry-run.
CREATED: Final = ("ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
CLUSTER_WIDE: Final = ""
"""The scope of a SelfSubjectAccessReview without a namespace: every namespace at once, or a cluster-scoped
resource."""
ELSEWHERE: Final = "rk-elsewhere"
"""A namespace the values never name (it need not exist for an access review)."""
STATUS_ACCOUNT: Final = "raybus-status"

# Permissions no table grants anyone, asked too so that a rule granting more than its table shows.
NOWHERE: Final[frozenset[Rule]] = frozenset(
    {
        ("", "secrets", "delete"),
        ("", "serviceaccounts/token", "create"),
        ("", "configmaps", "get"),
        ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
        ("coordination.k8s.io", "leases", "delete"),
    }
)


@dataclass(frozen=True)
class Install:
    """One values case installed: its release namespace, what was rendered, and what was refused."""

    case: str
    namespace: str
    values: Mapping[str, Any]
    objects: tuple[dict[str, Any], ...]
    refused: list[str]
    helm_dry_run: subprocess.CompletedProcess[str]


def _namespaces_of(values: Mapping[str, Any]) -> list[str]:
    """The namespaces the values name besides the release's (they must exist before an install)."""
    return list(values.get("watchNamespace", []))


def _helm_dry_run(
    plane: ControlPlane, namespace: str, values: Mapping[str, Any], home: Path
) -> subprocess.CompletedProcess[str]:
    """``helm install --dry-run=server`` of the chart with ``values`` as users run it; helm's own state
    (configuration, cache, data) stays under ``home``."""
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    args = [str(helm_binary()), "install", RELEASE, str(CHART), "--namespace", namespace]
    args += ["--kubeconfig", str(plane.kubeconfig), "--dry-run=server", "--values", "-"]
    return subprocess.run(args, input=json.dumps(dict(values)), capture_output=True, text=True, check=False, env=env)


def _create_namespace(core: client.CoreV1Api, name: str, labels: Mapping[str, str]) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=dict(labels))))


@pytest.fixture(scope="module", params=CASES)
def install(
    request: pytest.FixtureRequest,
    real_kube: ControlPlane,
    kube_admin: client.ApiClient,
    resources: dynamic.DynamicClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Install]:
    """The chart installed with one case's values into a fresh release namespace; afterwards its
    cluster-wide objects and its namespaces are deleted, so the next case installs over nothing."""
    case: str = request.param
    values = MATRIX[case]
    namespace = f"rb-{case}-{secrets.token_hex(3)}"
    objects = render_chart(values, namespace=namespace)
    core = client.CoreV1Api(kube_admin)
    labels = find("base", "Namespace", "raybus-system")["metadata"].get("labels", {})
    created_namespaces = [namespace, *_namespaces_of(values)]
    _create_namespace(core, namespace, labels)
    for other in _namespaces_of(values):
        _create_namespace(core, other, {})
    ensure_crds(kube_admin, [o for o in objects if o["kind"] == "CustomResourceDefinition"])
    helm_dry_run = _helm_dry_run(real_kube, namespace, values, tmp_path_factory.mktemp("helm"))
    real = [o for kind in CREATED for o in objects if o["kind"] == kind]
    rest = [o for o in objects if o["kind"] not in (*CREATED, "CustomResourceDefinition")]
    refused = submit(resources, real, dry_run=False)
    refused += submit(resources, rest, dry_run=True)
    try:
        yield Install(case, namespace, values, objects, refused, helm_dry_run)
    finally:
        rbac = client.RbacAuthorizationV1Api(kube_admin)
        for obj in objects:
            if obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
        for name in created_namespaces:
            core.delete_namespace(name)


def test_the_chart_is_accepted_by_the_api_server(install: Install) -> None:
    assert not install.refused, "\n".join(install.refused)
    kinds = {o["kind"] for o in install.objects}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} <= kinds


def test_helm_install_dry_run_server_succeeds(install: Install) -> None:
    result = install.helm_dry_run
    assert result.returncode == 0, result.stderr
    assert f"NAMESPACE: {install.namespace}" in result.stdout
    manifest = yaml.safe_load_all(result.stdout.partition("\nMANIFEST:\n")[2])
    would_install = sorted((o["kind"], o["metadata"]["name"]) for o in manifest if o)
    rendered = sorted(
        (o["kind"], o["metadata"]["name"]) for o in install.objects if o["kind"] != "CustomResourceDefinition"
    )
    assert would_install == rendered


# --- what each ServiceAccount may do --------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """Rules held in one scope: a namespace, or every namespace and the cluster (``CLUSTER_WIDE``)."""

    scope: str
    rules: frozenset[NamedRule]


def _named(rules: frozenset[Rule]) -> frozenset[NamedRule]:
    return frozenset((*rule, "") for rule in rules)


def _grants(install: Install) -> dict[str, list[Grant]]:
    """Per ServiceAccount of the release, what the permission tables say it holds with these values."""
    values = install.values
    if values.get("singleNamespaceInstall"):
        watched = [install.namespace]
    else:
        watched = list(values.get("watchNamespace", [])) or [CLUSTER_WIDE]
    grants: dict[str, list[Grant]] = {
        o["metadata"]["name"]: [] for o in install.objects if o["kind"] == "ServiceAccount"
    }
    for role in WATCHER_ROLES:
        account = component_name(role)
        grants[account] = [Grant(scope, _named(RULES_BY_ROLE[role])) for scope in watched]
        grants[account].append(Grant(install.namespace, NAMESPACE_RULES_BY_ROLE[role]))
    grants[STATUS_ACCOUNT] = [Grant(CLUSTER_WIDE, _named(STATUS_RULES))]
    return grants


def _expected(grants: list[Grant], rule: NamedRule, scope: str) -> bool:
    """Whether RBAC allows ``rule`` in ``scope``: a rule without a name only matches a grant of any name; a
    cluster-wide grant holds in every namespace too."""
    for grant in grants:
        if grant.scope not in (CLUSTER_WIDE, scope):
            continue
        if rule in grant.rules or (*rule[:3], "") in grant.rules:
            return True
    return False


def _sample(install: Install) -> tuple[list[NamedRule], list[str]]:
    """The permissions asked (every rule any table has, each named rule also under another name, and
    ``NOWHERE``) and the scopes asked in (the release namespace, each watched one, one never named, and
    cluster-wide)."""
    rules: set[NamedRule] = set(_named(frozenset().union(*RULES_BY_ROLE.values(), STATUS_RULES, NOWHERE)))
    for named in NAMESPACE_RULES_BY_ROLE.values():
        rules |= named
        rules |= {(*rule[:3], rule[3] + "-other") for rule in named if rule[3]}
    scopes = [install.namespace, *_namespaces_of(install.values), ELSEWHERE, CLUSTER_WIDE]
    return sorted(rules), scopes


def _allowed(api: client.AuthorizationV1Api, rule: NamedRule, scope: str) -> bool:
    group, resource, verb, name = rule
    base, _, subresource = resource.partition("/")
    attributes = client.V1ResourceAttributes(
        group=group,
        resource=base,
        subresource=subresource or None,
        verb=verb,
        namespace=scope or None,
        name=name or None,
    )
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes))
    status = api.create_self_subject_access_review(review).status
    assert status is not None
    return bool(status.allowed)


def test_each_service_account_holds_exactly_its_roles_permissions(install: Install, real_kube: ControlPlane) -> None:
    grants = _grants(install)
    rules, scopes = _sample(install)
    wrong = []
    for account, held in sorted(grants.items()):
        kubeconfig = real_kube.service_account_kubeconfig(install.namespace, account)
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        try:
            me = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview()).status
            assert me is not None and me.user_info is not None
            assert me.user_info.username == f"system:serviceaccount:{install.namespace}:{account}"
            authorization = client.AuthorizationV1Api(api)
            for scope in scopes:
                for rule in rules:
                    expected = _expected(held, rule, scope)
                    if _allowed(authorization, rule, scope) != expected:
                        where = scope or "cluster-wide"
                        wrong.append(f"{account} in {where}: {rule} {'denied' if expected else 'allowed'}")
        finally:
            api.close()
    assert not wrong, "\n".join(wrong)
    assert any(held for held in grants.values()), "no ServiceAccount holds anything"
