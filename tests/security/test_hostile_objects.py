"""A custom resource nobody can decode safely (the CRDs keep arbitrary JSON in pod templates): the
watcher skips it with a Warning Event on it and goes on, when watching and when listing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import urllib3

from schema import subjects
from services.edge.watch.informer import REFUSED_REASON
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_invariants import all_ready, create
from tests.e2e.test_pipeline import GROUP, PLURAL, VERSION
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]

NESTING = 900
"""Levels of ``{"nested": ...}``: 10 KB of JSON, as deep as the API server accepts."""


def deep_cluster(name: str) -> str:
    """A RayCluster whose head pod template carries 10 KB of nested JSON, serialized by hand (the
    client's serializer is recursive too)."""
    marker = '"__deep__"'
    body = small_cluster(name)
    body["spec"]["headGroupSpec"]["template"]["metadata"] = {"annotations": {}}
    body["spec"]["headGroupSpec"]["template"]["spec"]["extra"] = "__deep__"
    return json.dumps(body).replace(marker, '{"nested":' * NESTING + "1" + "}" * NESTING)


def post_raw(p: Pipeline, body: str) -> dict[str, Any]:
    url = f"{p.kube.url}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    response = urllib3.request("POST", url, body=body.encode(), headers={"Content-Type": "application/json"})
    assert response.status == 201, response.data[:500]
    return dict(json.loads(response.data)["metadata"])


async def warned(p: Pipeline, uid: str) -> None:
    async def event_on_it() -> bool:
        p.check()
        events = await asyncio.to_thread(p.core().list_namespaced_event, "default")
        return any(e.involved_object.uid == uid and e.reason == REFUSED_REASON for e in events.items)

    await eventually(event_on_it, timeout=60, message="no Warning Event on the refused RayCluster")


async def test_a_watched_object_too_deep_to_decode_is_skipped_with_a_warning_event(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        metadata = await asyncio.to_thread(post_raw, p, deep_cluster("too-deep"))
        await warned(p, metadata["uid"])
        await asyncio.to_thread(create, p, small_cluster("after-too-deep"))
        await all_ready(p, {"after-too-deep"})
        p.check()


async def test_a_listed_object_too_deep_to_decode_is_skipped_and_the_rest_is_projected(
    tmp_path: Path, db_url: str
) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        await asyncio.to_thread(create, p, small_cluster("listed-beside"))
        await all_ready(p, {"listed-beside"})
        await p.components["watcher"].stop()
        metadata = await asyncio.to_thread(post_raw, p, deep_cluster("listed-too-deep"))
        nc = await p.nc()
        try:  # no resume points: the restarted watcher lists everything
            for key in await (await nc.jetstream().key_value(subjects.WATCHER_BUCKET)).keys():
                await (await nc.jetstream().key_value(subjects.WATCHER_BUCKET)).purge(key)
        finally:
            await nc.close()
        p.components["watcher"].start()
        await p.components["watcher"].ready()
        await warned(p, metadata["uid"])
        await asyncio.to_thread(create, p, small_cluster("after-listing"))
        await all_ready(p, {"after-listing", "listed-beside"})
        p.check()
