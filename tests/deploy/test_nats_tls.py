"""Client connections to the NATS of ``deploy/`` are TLS: the server's ``tls`` block (taken from the
rendered config, with a certificate made here) refuses plain clients, and the services' connection
verifies the server against the CA the manifests mount."""

from __future__ import annotations

import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from services.runtime.bus import connect
from services.runtime.settings import NatsSettings
from tests.deploy.render import find, render
from tests.fixtures.nats import NatsServer

MOUNTED_CA = "/etc/raybus/nats-tls/ca.crt"


def make_certificates(folder: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl), as the Secret would hold."""
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=raybus test CA",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=raybus-nats", "-keyout", "tls.key", "-out", "tls.csr")
    (folder / "san.ext").write_text("subjectAltName=DNS:raybus-nats,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-extfile", "san.ext", "-out", "tls.crt")  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, Path]]:
    folder = tmp_path_factory.mktemp("nats-tls")
    certs = make_certificates(folder / "certs")
    config = find("base", "ConfigMap", "raybus-nats-config")["data"]["nats.conf"]
    [block] = re.findall(r"^tls \{.*?^\}", config, flags=re.DOTALL | re.MULTILINE)
    (folder / "server.conf").write_text(block.replace("/etc/nats-tls/", f"{certs}/"))
    server = NatsServer(folder / "store", config=folder / "server.conf")
    server.start()
    try:
        yield server, certs
    finally:
        server.stop()


async def test_the_services_connect_over_tls_with_the_mounted_ca(tls_server: tuple[NatsServer, Path]) -> None:
    server, certs = tls_server
    url = f"tls://127.0.0.1:{server.port}"
    nc = await connect(NatsSettings(url=url, tls_ca_file=str(certs / "ca.crt")), name="tls-test")
    try:
        assert nc.is_connected
        await nc.flush()
    finally:
        await nc.close()


async def test_a_client_that_does_not_verify_or_does_not_speak_tls_is_refused(
    tls_server: tuple[NatsServer, Path],
) -> None:
    server, _ = tls_server
    errors: list[Exception] = []

    async def record(exc: Exception) -> None:
        errors.append(exc)

    for url, context in [(f"tls://127.0.0.1:{server.port}", ssl.create_default_context()), (server.url, None)]:
        seen = len(errors)
        with pytest.raises(Exception):  # noqa: B017 - nats-py raises several types for a refused connection
            await nats.connect(url, tls=context, allow_reconnect=False, connect_timeout=2, error_cb=record)
        assert len(errors) > seen, url


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["template"]["spec"]["containers"])


@pytest.mark.parametrize("tree", ["base", "overlays/dev", "overlays/single-namespace"])
def test_every_service_uses_tls_and_mounts_only_the_ca(tree: str) -> None:
    clients = [o for o in render(tree) if o["kind"] in {"Deployment", "Job"}]
    assert {o["metadata"]["name"] for o in clients} >= {
        "raybus-watch",
        "raybus-applier",
        "raybus-prober",
        "raybus-reconciler",
        "raybus-status",
    }
    for obj in clients:
        [container] = _containers(obj)
        assert "--nats-url=tls://raybus-nats:4222" in container["args"]
        assert {"name": "RAYBUS_NATS_TLS_CA", "value": MOUNTED_CA} in container["env"]
        volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
        [mount] = [m for m in container["volumeMounts"] if MOUNTED_CA.startswith(m["mountPath"] + "/")]
        assert volumes[mount["name"]]["secret"] == {
            "secretName": "raybus-nats-tls",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
        }
    nats_config = find(tree, "ConfigMap", "raybus-nats-config")["data"]["nats.conf"]
    assert "cert_file: /etc/nats-tls/tls.crt" in nats_config
