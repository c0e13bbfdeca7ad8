"""The web console in a real browser, and the CLI as the README has a user run it, against one
``raybus up`` stack that ran a RayJob to completion, a RayService through a blue/green upgrade and a
deleted RayCluster (``stack.record_history``)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.console.conftest import ARTIFACTS
from tests.console.stack import JUNK_KEY, TRACE_URL_TEMPLATE, RaybusUp, record_history

pytestmark = pytest.mark.timeout(600)  # the first test also starts raybus up and records the history
PAGE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def names(stack: RaybusUp) -> dict[str, str]:
    """The recorded history's names (the samples' and the clusters raybus created)."""
    return record_history(stack)


@pytest.fixture
def page(browser: WebDriver, stack: RaybusUp, names: dict[str, str]) -> WebDriver:
    return browser


def open_page(browser: WebDriver, stack: RaybusUp, fragment: str) -> None:
    """Load ``/console/#fragment`` and wait until the page says it rendered that route."""
    browser.get(f"{stack.status_url}/console/#{fragment}")
    WebDriverWait(browser, PAGE_TIMEOUT).until(
        lambda b: b.execute_script("return document.body.dataset.ready") == f"#{fragment}"
    )
    errors = browser.find_elements(By.ID, "page-error")
    assert not errors, errors[0].text


def screenshot(browser: WebDriver, name: str) -> None:
    """Keep a full-height screenshot of the page as a test artifact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = int(browser.execute_script("return document.body.scrollHeight"))
    browser.set_window_size(1400, min(max(height + 40, 800), 4000))
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    browser.set_window_size(1400, 1000)


def rows(browser: WebDriver, table: str) -> list[WebElement]:
    return browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")


def lane_values(browser: WebDriver, field: str) -> list[str]:
    """The values of a swimlane's segments, left to right."""
    segments = browser.find_elements(By.CSS_SELECTOR, f'#swimlanes g.lane[data-field="{field}"] g.segment')
    return [s.get_attribute("data-value") or "" for s in segments]


def test_overview_lists_every_resource_deleted_ones_included_and_filters(page: WebDriver, stack: RaybusUp) -> None:
    open_page(page, stack, "/")
    by_name = {r.get_attribute("data-name"): r for r in rows(page, "resources")}
    assert {"rayjob-sample", "rayservice-sample", "raycluster-kuberay"} <= set(by_name)
    assert "Complete" in by_name["rayjob-sample"].text
    assert "Running" in by_name["rayservice-sample"].text
    deleted = by_name["raycluster-kuberay"]
    assert "deleted" in (deleted.get_attribute("class") or "")
    assert "lifecycle → deleted" in deleted.text
    screenshot(page, "overview")

    page.find_element(By.ID, "f-deleted").click()
    shown = {r.get_attribute("data-name") for r in rows(page, "resources")}
    assert "raycluster-kuberay" not in shown and "rayjob-sample" in shown
    Select(page.find_element(By.ID, "f-kind")).select_by_value("RayJob")
    assert {r.get_attribute("data-kind") for r in rows(page, "resources")} == {"RayJob"}
    page.find_element(By.ID, "f-deleted").click()
    Select(page.find_element(By.ID, "f-kind")).select_by_value("")
    page.find_element(By.ID, "f-text").send_keys("kuberay")
    assert [r.get_attribute("data-name") for r in rows(page, "resources")] == ["raycluster-kuberay"]


def test_a_rayjobs_life_its_cluster_audit_and_events(page: WebDriver, stack: RaybusUp, names: dict[str, str]) -> None:
    open_page(page, stack, "/object/RayJob/default/rayjob-sample")
    screenshot(page, "rayjob")
    assert lane_values(page, "jobDeploymentStatus") == ["Initializing", "Running", "Complete"]
    assert lane_values(page, "jobStatus")[-1] == "SUCCEEDED"
    marks = page.find_elements(By.CSS_SELECTOR, '#swimlanes g.lane[data-field="jobDeploymentStatus"] circle.mark')
    assert len(marks) == 3
    related = [r.text for r in rows(page, "related")]
    assert any(names["job_cluster"] in text for text in related), (names, related)
    audit = [r.text for r in rows(page, "audit")]
    assert any(
        "create_object" in t and f"RayCluster default/{names['job_cluster']}" in t and "applied" in t for t in audit
    )
    events = [r.text for r in rows(page, "events")]
    assert any("CreatedRayCluster" in t and "applied" in t for t in events)
    trace = page.find_element(By.CSS_SELECTOR, "#audit a.trace")
    assert (trace.get_attribute("href") or "").startswith(TRACE_URL_TEMPLATE.split("{")[0])


def test_a_rayservice_blue_green_upgrade_as_a_picture(page: WebDriver, stack: RaybusUp, names: dict[str, str]) -> None:
    old, new = names["old_cluster"], names["new_cluster"]
    open_page(page, stack, "/object/RayService/default/rayservice-sample")
    screenshot(page, "rayservice-upgrade")
    assert lane_values(page, "serviceStatus")[-1] == "Running"
    assert lane_values(page, "activeCluster") == [old, new]
    assert lane_values(page, "pendingCluster") == [old, new]
    spikes = page.find_elements(By.CSS_SELECTOR, '#swimlanes g.lane[data-field="pendingTraffic"] .spike')
    assert len(spikes) == 2  # each promotion moves all traffic to the cluster that was pending
    steps = page.find_elements(By.CSS_SELECTOR, '#swimlanes g.lane[data-field="steps"] .moment')
    assert "clusterDeleted" in {s.get_attribute("data-field") for s in steps}
    related = {r.find_element(By.TAG_NAME, "a").text: r.text for r in rows(page, "related")}
    assert "deleted" in related[old] and "ready" in related[new]
    assert "1, the last took" in page.find_element(By.ID, "facts").text


def test_a_deleted_raycluster_keeps_its_history(page: WebDriver, stack: RaybusUp) -> None:
    open_page(page, stack, "/object/RayCluster/default/raycluster-kuberay")
    screenshot(page, "raycluster-deleted")
    assert lane_values(page, "state") == ["ready"]
    assert page.find_elements(By.CSS_SELECTOR, "#swimlanes line.end")
    facts = dict(zip(
        [e.text for e in page.find_elements(By.CSS_SELECTOR, "#facts dt")],
        [e.text for e in page.find_elements(By.CSS_SELECTOR, "#facts dd")],
        strict=True,
    ))  # fmt: skip
    assert facts["deleted"].startswith("20")


def test_replay_steps_through_the_recorded_decisions(page: WebDriver, stack: RaybusUp) -> None:
    open_page(page, stack, "/replay/RayJob/default/rayjob-sample?step=3")
    screenshot(page, "replay")
    summary = page.find_element(By.ID, "replay-summary").text
    assert "0 diverged" in summary
    verdicts = [r.get_attribute("data-verdict") for r in rows(page, "steps")]
    assert len(verdicts) >= 5 and set(verdicts) == {"match"}
    detail = page.find_element(By.ID, "step-detail").text
    assert detail.startswith("step 3 of") and "snapshot" in detail and "rules" in detail
    selected = page.find_element(By.CSS_SELECTOR, "#steps tr.selected")
    assert selected.find_element(By.TAG_NAME, "a").text == "3"
    assert "5.2/create-cluster" in selected.text
    page.find_element(By.ID, "next-step").click()
    WebDriverWait(page, PAGE_TIMEOUT).until(
        lambda b: (b.execute_script("return document.body.dataset.ready") or "").endswith("step=4")
    )
    assert page.find_element(By.ID, "step-detail").text.startswith("step 4 of")


def test_the_bus_partitions_owners_lag_and_dead_letters(page: WebDriver, stack: RaybusUp) -> None:
    open_page(page, stack, "/bus")
    screenshot(page, "bus")
    partitions = rows(page, "partitions")
    assert len(partitions) == 16
    assert any("unowned" not in r.text for r in partitions)
    assert len(page.find_elements(By.CSS_SELECTOR, "#lag-chart g.bar")) == 16
    assert page.find_elements(By.CSS_SELECTOR, ".worker")
    letters = [r.text for r in rows(page, "dead-letters")]
    assert any(JUNK_KEY.name in text and "RAYBUS_EVENTS" in text for text in letters), letters
    reason = page.find_element(By.CSS_SELECTOR, "#dead-letters td.reason").text
    assert reason


def test_replay_and_get_as_the_readme_shows(stack: RaybusUp, names: dict[str, str]) -> None:
    replay = stack.run("replay", "rayjob", "default/rayjob-sample")
    assert replay.returncode == 0, replay.stderr
    assert "0 diverged" in replay.stdout
    history = stack.run("history", "rayjob", "default/rayjob-sample")
    assert history.returncode == 0, history.stderr
    get = stack.run("get", "rayjobs")
    assert get.returncode == 0, get.stderr
    assert "rayjob-sample" in get.stdout and "Complete" in get.stdout and names["job_cluster"] in get.stdout
    unknown = stack.run("replay", "rayjob", "default/no-such-job")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "no recorded decision" in unknown.stderr
