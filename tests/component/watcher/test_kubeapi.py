"""The watcher's API adapter against kubesim: bodies, errors and the limits of a streaming watch."""

from __future__ import annotations

import time

import msgspec
import pytest

from services.watcher.calls import ApiError
from services.watcher.kubeapi import KubeApi


def test_a_body_goes_out_as_json_and_an_error_comes_back_with_its_status(kube_api: KubeApi) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeapi-body"}, "data": {"k": "v"}}
    created = kube_api.request("POST", "/api/v1/namespaces/default/configmaps", body=body)
    assert created.status == 201
    assert msgspec.json.decode(created.data)["data"] == {"k": "v"}
    with pytest.raises(ApiError) as refused:
        kube_api.request("POST", "/api/v1/namespaces/default/configmaps", body=body)
    assert refused.value.status == 409 and refused.value.reason == "AlreadyExists"
    kube_api.request("DELETE", "/api/v1/namespaces/default/configmaps/kubeapi-body")


def test_a_quiet_watch_outlives_its_connect_timeout(kube_api: KubeApi) -> None:
    """The connect timeout bounds the connection only; the read timeout bounds each wait for a line. A
    watch with no events stays open until the server ends it (``timeoutSeconds``)."""
    started = time.monotonic()
    response = kube_api.open_stream(
        "/api/v1/namespaces/kubeapi-quiet/configmaps",
        query=[("watch", "true"), ("timeoutSeconds", "2")],
        connect_timeout=0.5,
        read_timeout=10.0,
    )
    try:
        assert list(response.stream()) == []  # ends cleanly when the server closes it
    finally:
        response.release_conn()
    assert time.monotonic() - started >= 1.5
