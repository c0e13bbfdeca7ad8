"""Start-up: the watcher waits for the ray.io CRDs (applied together with it) instead of crashing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client

from services.edge.service import Watcher
from services.runtime.settings import KubeSettings, NatsSettings, RaybusSettings
from tests.component.watcher.conftest import in_thread
from tests.fixtures.kubesim import default_crd_paths, running_kubesim
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually


def _crds() -> list[dict[str, Any]]:
    (folder,) = default_crd_paths()
    return [yaml.safe_load(path.read_text()) for path in sorted(Path(folder).glob("ray.io_*.yaml"))]


async def test_the_watcher_waits_for_the_crds(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_kubesim(workdir=tmp_path) as kube:
        settings = RaybusSettings(
            nats=NatsSettings(url=nats_server.url), kube=KubeSettings(kubeconfig=str(kube.kubeconfig))
        )
        watcher = Watcher(settings, prober=False)
        starting = asyncio.create_task(watcher.start())
        try:
            await eventually(
                lambda: "rayclusters.ray.io" in (watcher.readiness() or ""), message="waiting for the CRDs"
            )
            api = client.ApiextensionsV1Api(kube.api_client)
            for crd in _crds():
                await in_thread(api.create_custom_resource_definition, cast(Any, crd))
            await starting
            await eventually(lambda: watcher.readiness() is None, timeout=20, message="ready once CRDs exist")
        finally:
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
            await watcher.stop()
