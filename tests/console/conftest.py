"""The browser tier: one ``raybus up`` stack with a recorded history per module, and headless Chromium
(Debian's ``chromium`` and ``chromium-driver``) driven by Selenium, with screenshots kept as artifacts."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.console.stack import RaybusUp

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
"""Screenshots of the pages the tests looked at (kept after the run; not in git)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/console/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaybusUp]:
    """``raybus up`` in a fresh folder (the README's command (1) after the install)."""
    up = RaybusUp(tmp_path_factory.mktemp("stack"))
    try:
        up.start()
        yield up
    finally:
        up.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium with a fresh profile and nothing that reaches the network by itself."""
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "install Debian's chromium and chromium-driver (.ci/run does)"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        try:
            yield driver
        finally:
            driver.quit()
