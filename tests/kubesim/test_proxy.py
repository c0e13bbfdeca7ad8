"""Service and pod proxy subresources, forwarding to what a ProxyResolver names."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.kubeobjects import unread


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with what it received, as JSON."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        payload = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        """Silence the default stderr logging."""


class _Resolver:
    def __init__(self, base: str) -> None:
        self.base = base

    def resolve_service(self, namespace: str, service: str, port: str) -> str | None:
        return self.base if (service, port) in (("dash", "8265"), ("dash", "dashboard")) else None

    def resolve_pod(self, namespace: str, pod: str, port: str) -> str | None:
        return self.base if pod == "head" else None


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    echo = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=echo.serve_forever, daemon=True)
    thread.start()
    resolver = _Resolver(f"http://127.0.0.1:{echo.server_address[1]}")
    handle = start_kubesim(workdir=tmp_path_factory.mktemp("kubesim-proxy"), proxy_resolvers=[resolver])
    core = client.CoreV1Api(handle.api_client)
    for name in ("dash", "dark"):
        ports = [{"name": "dashboard", "port": 8265}]
        core.create_namespaced_service("default", {"metadata": {"name": name}, "spec": {"ports": ports}})  # type: ignore[arg-type]
    pod = {"metadata": {"name": "head"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    core.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
    try:
        yield handle
    finally:
        handle.close()
        echo.shutdown()
        echo.server_close()


def test_service_proxy_forwards_path_query_and_headers(proxied: KubeSimHandle) -> None:
    core = client.CoreV1Api(proxied.api_client)
    resp = unread(
        core.connect_get_namespaced_service_proxy_with_path(
            "dash:8265", "default", "api/jobs/", _headers={"x-ray-authorization": "Bearer t"}, _preload_content=False
        )
    )
    seen = json.loads(resp.data)
    assert seen["method"] == "GET"
    assert seen["path"] == "/api/jobs/"
    assert seen["headers"]["x-ray-authorization"] == "Bearer t"


def test_service_proxy_forwards_post_body(proxied: KubeSimHandle) -> None:
    pool = proxied.api_client.rest_client.pool_manager
    url = f"{proxied.url}/api/v1/namespaces/default/services/http:dash:dashboard/proxy/api/jobs/?x=1"
    resp = pool.request("POST", url, body=b'{"entrypoint":"python x.py"}', headers={"Content-Type": "application/json"})
    seen = json.loads(resp.data)
    assert resp.status == 200
    assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/api/jobs/?x=1", '{"entrypoint":"python x.py"}')


def test_service_without_port_uses_its_first_port(proxied: KubeSimHandle) -> None:
    pool = proxied.api_client.rest_client.pool_manager
    resp = pool.request("GET", f"{proxied.url}/api/v1/namespaces/default/services/dash/proxy/")
    assert resp.status == 200
    assert json.loads(resp.data)["path"] == "/"


def test_service_without_backend_is_503(proxied: KubeSimHandle) -> None:
    core = client.CoreV1Api(proxied.api_client)
    with pytest.raises(client.ApiException) as err:
        core.connect_get_namespaced_service_proxy_with_path("dark:8265", "default", "api/version")
    assert err.value.body is not None
    body = json.loads(err.value.body)
    assert err.value.status == 503
    assert (body["reason"], body["message"]) == ("ServiceUnavailable", 'no endpoints available for service "dark"')


def test_proxy_to_missing_service_is_404(proxied: KubeSimHandle) -> None:
    core = client.CoreV1Api(proxied.api_client)
    with pytest.raises(client.ApiException) as err:
        core.connect_get_namespaced_service_proxy_with_path("ghost:8265", "default", "x")
    assert err.value.status == 404


def test_pod_proxy(proxied: KubeSimHandle) -> None:
    core = client.CoreV1Api(proxied.api_client)
    resp = unread(
        core.connect_get_namespaced_pod_proxy_with_path(
            "head:8265", "default", "api/gcs_healthz", _preload_content=False
        )
    )
    seen = json.loads(resp.data)
    assert seen["path"] == "/api/gcs_healthz"
