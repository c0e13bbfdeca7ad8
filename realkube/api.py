"""Plain HTTPS requests to the control plane's endpoints (health, readiness, a few API calls during
start-up), so starting the plane needs no client library."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from realkube.errors import RealKubeError
from realkube.pki import KeyPair

REQUEST_TIMEOUT = 10.0


def tls_context(ca_file: Path, client: KeyPair | None = None) -> ssl.SSLContext:
    """A context trusting only ``ca_file``, presenting ``client`` when given."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def answers_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """Whether a GET of ``url`` answers 200; a refused connection or any other status is False."""
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT, context=context) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


class AdminApi:
    """JSON requests to the API server as a given client certificate."""

    def __init__(self, server: str, ca_file: Path, client: KeyPair) -> None:
        self.server = server
        self._context = tls_context(ca_file, client)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The decoded answer to ``method path``.

        Raises:
            RealKubeError: the server answered an error status (its message is included) or did not answer.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT, context=self._context) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RealKubeError(f"{method} {path}: HTTP {exc.code}: {_message(detail)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RealKubeError(f"{method} {path}: {exc}") from None

    def exists(self, path: str) -> bool:
        """Whether a GET of ``path`` answers 200."""
        return answers_ok(self.server + path, self._context)


def _message(detail: str) -> str:
    try:
        return str(json.loads(detail).get("message", detail))
    except (ValueError, AttributeError):
        return detail


def etcd_request(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to etcd's JSON gateway (``/v3/...``) and return its decoded answer."""
    request = urllib.request.Request(
        f"{etcd_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer
