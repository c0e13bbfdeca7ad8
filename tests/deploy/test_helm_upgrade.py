"""``helm upgrade`` from the previous release of the chart breaks nothing in a running install.

``deploy/helm/raybus/UPGRADE_FROM`` names the commit of the previous chart release, or ``none`` while the
chart has had no earlier release (version 0.1.0). The chart at that commit and the chart of this checkout
are rendered with the same values and compared by ``tests/deploy/upgrade.py``. With ``none`` the previous
rendering is this chart's own, so the comparison then shows only that it runs; the tests of the checker
below show that it sees each kind of breaking change.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart_values import MATRIX
from tests.deploy.render import CHART, ROOT, find_in, render_chart
from tests.deploy.upgrade import breaking_changes, chart_at

UPGRADE_FROM = CHART / "UPGRADE_FROM"
FIRST_VERSION = "0.1.0"
UPGRADE_CASES = ("defaults", "single-namespace", "watch-namespaces", "external-nats", "replicas", "tls-off")


def _version(text: str) -> tuple[int, ...]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text)
    assert match, f"chart version {text!r} is not MAJOR.MINOR.PATCH"
    return tuple(int(part) for part in match.groups())


def _chart_version(chart: Path) -> str:
    version: str = yaml.safe_load((chart / "Chart.yaml").read_text())["version"]
    return version


def _previous() -> str:
    return UPGRADE_FROM.read_text().strip()


@pytest.fixture(scope="module")
def previous_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's chart, or this one while there is none."""
    commit = _previous()
    if commit == "none":
        return CHART
    return chart_at(ROOT, commit, tmp_path_factory.mktemp("previous-chart"))


def test_upgrade_from_names_the_previous_release() -> None:
    commit = _previous()
    current = _chart_version(CHART)
    if commit == "none":
        assert current == FIRST_VERSION, "a later chart version must name its previous release in UPGRADE_FROM"
        return
    assert re.fullmatch(r"[0-9a-f]{40}", commit), "UPGRADE_FROM holds a full commit id or 'none'"
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:deploy/helm/raybus/Chart.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, f"UPGRADE_FROM {commit}: {shown.stderr.strip()} (a full clone is needed)"
    assert _version(yaml.safe_load(shown.stdout)["version"]) < _version(current)


@pytest.mark.parametrize("case", UPGRADE_CASES)
def test_upgrade_from_the_previous_release_breaks_nothing(case: str, previous_chart: Path) -> None:
    old = render_chart(MATRIX[case], chart=previous_chart)
    assert breaking_changes(old, render_chart(MATRIX[case])) == []


# The checker itself: each kind of breaking change is seen.


def _changed(change: Any) -> tuple[dict[str, Any], ...]:
    objects = copy.deepcopy(render_chart({}))
    change(objects)
    return tuple(objects)


def _selector(objects: tuple[dict[str, Any], ...]) -> None:
    find_in(objects, "Deployment", "raybus-applier")["spec"]["selector"]["matchLabels"]["helm.sh/chart"] = (
        "raybus-0.2.0"
    )


def _claim(objects: tuple[dict[str, Any], ...]) -> None:
    claim = find_in(objects, "StatefulSet", "raybus-nats")["spec"]["volumeClaimTemplates"][0]
    claim["spec"]["resources"]["requests"]["storage"] = "20Gi"


def _service_name(objects: tuple[dict[str, Any], ...]) -> None:
    find_in(objects, "StatefulSet", "raybus-nats")["spec"]["serviceName"] = "raybus-nats-routes"


def _rename(objects: tuple[dict[str, Any], ...]) -> None:
    find_in(objects, "StatefulSet", "raybus-nats")["metadata"]["name"] = "raybus-jetstream"


def _role_ref(objects: tuple[dict[str, Any], ...]) -> None:
    find_in(objects, "ClusterRoleBinding", "raybus-prober")["roleRef"]["name"] = "raybus-prober-v2"


def _crd_version(objects: tuple[dict[str, Any], ...]) -> None:
    crd = find_in(objects, "CustomResourceDefinition", "rayjobs.ray.io")
    crd["spec"]["versions"][0]["name"] = "v2"


BREAKING = {
    "selector": (_selector, "immutable field changed: ('Deployment', 'raybus-system', 'raybus-applier') spec.selector"),
    "claim": (
        _claim,
        "immutable field changed: ('StatefulSet', 'raybus-system', 'raybus-nats') spec.volumeClaimTemplates",
    ),
    "serviceName": (
        _service_name,
        "immutable field changed: ('StatefulSet', 'raybus-system', 'raybus-nats') spec.serviceName",
    ),
    "rename": (_rename, "removed or renamed: ('StatefulSet', 'raybus-system', 'raybus-nats')"),
    "roleRef": (_role_ref, "immutable field changed: ('ClusterRoleBinding', '', 'raybus-prober') roleRef"),
    "CRD version": (
        _crd_version,
        "CRD version no longer served: ('CustomResourceDefinition', '', 'rayjobs.ray.io') v1",
    ),
}


@pytest.mark.parametrize("case", BREAKING)
def test_the_checker_sees_a_breaking_change(case: str) -> None:
    change, expected = BREAKING[case]
    assert breaking_changes(render_chart({}), _changed(change)) == [expected]


def test_the_checker_lets_values_change_what_may_change() -> None:
    """Replicas, images, resources and a replaced topology Job are ordinary upgrades."""
    new = render_chart(
        {"applier": {"replicas": 5}, "image": {"tag": "0.2.0"}, "watch": {"resources": {"limits": {"cpu": "4"}}}}
    )
    assert breaking_changes(render_chart({}), new) == []


def test_the_checker_sees_a_changed_nats_volume_from_values() -> None:
    """nats.persistence is fixed at install: docs/helm.md says how to change it."""
    changed = breaking_changes(render_chart({}), render_chart({"nats": {"persistence": {"size": "20Gi"}}}))
    assert changed == [
        "immutable field changed: ('StatefulSet', 'raybus-system', 'raybus-nats') spec.volumeClaimTemplates"
    ]


def test_a_commits_chart_renders_from_git(tmp_path: Path) -> None:
    """The path a named previous release takes: the chart extracted from git at a commit renders."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    chart = chart_at(ROOT, head.stdout.strip(), tmp_path)
    assert _chart_version(chart) == _chart_version(CHART)
    assert find_in(render_chart({}, chart=chart), "StatefulSet", "raybus-nats")
