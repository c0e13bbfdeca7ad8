"""The real-Ray tier: raybus's whole pipeline against real Ray heads (``ray start --head``) run by kubesim.

The tier runs serially (``scripts/check`` starts it after the parallel tiers) because every head is a real
Ray node of about 700 MB. Ray is the ``realray`` extra; without it the tier fails instead of skipping.
"""

from __future__ import annotations

import pytest

from kubesim.sims.realray import ray_executable


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realray/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            # A head takes 10-20 s to start on a busy machine; a test waits for several.
            item.add_marker(pytest.mark.timeout(600))


@pytest.fixture(scope="session", autouse=True)
def _ray_installed() -> None:
    """Fail (never skip) when Ray is missing: the tier is part of the suite."""
    ray_executable()
