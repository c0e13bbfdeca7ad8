"""The informer's own life cycle on kubesim: how it ends when the process stops while it lists."""

from __future__ import annotations

from services.edge.kubeapi import KubeApi
from services.edge.resources import by_kind
from services.edge.watch.informer import Informer, Scope
from tests.component.watcher.conftest import in_thread


async def test_an_informer_whose_listing_is_not_taken_ends_without_a_failure(
    kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """A stopping process takes no more batches (its deliverer refuses them): the informer whose listing was
    refused ends quietly, with no failure recorded: a watch needs the listing's resourceVersion."""
    pods = by_kind("Pod")
    assert pods is not None
    scope = Scope(pods, kubesim_namespace)
    informer = Informer(kube_api, scope, resource_version=None, deliver=lambda batch: False)
    informer.start()
    await in_thread(informer.join, 30)
    assert informer.relists == 1
    assert informer.failure is None
    assert not informer.synced
