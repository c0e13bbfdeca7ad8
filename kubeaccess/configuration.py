"""What a connection to an API server needs: its URL, its credentials and its TLS settings, loaded from a
kubeconfig or from the Pod's ServiceAccount.

raybus reads these itself instead of through the official client, whose package imports every model and
API class it has (about 28 MB in each process that loads it). What is read:

- in a Pod: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the ServiceAccount's token (read again every minute:
  the kubelet rotates it) and its CA certificate;
- a kubeconfig (a named file, else the files of ``KUBECONFIG``, merged as kubectl merges them, else
  ``~/.kube/config``): the current context's cluster (``server``, ``certificate-authority[-data]``,
  ``insecure-skip-tls-verify``, ``tls-server-name``) and user (``token``, ``tokenFile``,
  ``client-certificate[-data]`` and ``client-key[-data]``, ``username``/``password``, an ``exec``
  credential plugin). A relative path is relative to the file that names it. The legacy ``auth-provider``
  plugins are refused with a message naming them (kubectl dropped them too; their exec plugins replace
  them). ``proxy-url`` is not followed.

Credentials stay in the returned headers and context: nothing here logs them or puts them in an error.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from kubeaccess.credentials import (
    BasicAuth,
    BearerToken,
    CredentialError,
    Credentials,
    ExecPlugin,
    NoCredentials,
    TokenFile,
)

SERVICE_ACCOUNT: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a Pod's ServiceAccount token and CA certificate are mounted."""
SERVICE_HOST_ENV: Final = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV: Final = "KUBERNETES_SERVICE_PORT"
KUBECONFIG_ENV: Final = "KUBECONFIG"
DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")


class ConfigError(Exception):
    """No usable configuration (the message says what is missing or wrong, never a secret)."""


LOAD_ERRORS: Final = (ConfigError, CredentialError, OSError)
"""What :func:`load` raises when there is no usable configuration."""


@dataclass
class Configuration:
    """One API server connection's settings."""

    host: str
    """The base URL, without a trailing slash."""
    credentials: Credentials = field(default_factory=NoCredentials)
    ca_pem: str | None = None
    """The CA certificates to trust (PEM); None: the system's."""
    client_pem: tuple[str, str] | None = field(default=None, repr=False)
    """The client certificate and its key (PEM)."""
    verify: bool = True
    tls_server_name: str | None = None
    """The name to expect in the server's certificate, when it is not the URL's host."""

    def client_certificate(self) -> tuple[str, str] | None:
        """The client certificate and key to present: the configured pair, else an exec plugin's."""
        if self.client_pem is not None:
            return self.client_pem
        if isinstance(self.credentials, ExecPlugin):
            credential = self.credentials.credential(time.time())
            if credential.client_certificate_data and credential.client_key_data:
                return credential.client_certificate_data, credential.client_key_data
        return None


def load(kubeconfig: str | None) -> Configuration:
    """The configuration: ``kubeconfig`` if given (one file, or several separated as in ``KUBECONFIG``), else
    in-cluster, else ``KUBECONFIG`` or ``~/.kube/config``.

    Raises:
        ConfigError, CredentialError, OSError: no usable configuration (:data:`LOAD_ERRORS`).
    """
    if kubeconfig:
        return from_kubeconfig(_paths(kubeconfig))
    if os.environ.get(SERVICE_HOST_ENV) and os.environ.get(SERVICE_PORT_ENV):
        return in_cluster()
    return from_kubeconfig(_paths(os.environ.get(KUBECONFIG_ENV, "")) or [DEFAULT_KUBECONFIG.expanduser()])


def _paths(files: str) -> list[Path]:
    """The files of a ``KUBECONFIG``-style list (separated as ``PATH`` is)."""
    return [Path(name).expanduser() for name in files.split(os.pathsep) if name]


def in_cluster(mount: Path = SERVICE_ACCOUNT) -> Configuration:
    """The Pod's own ServiceAccount connection to the API server of its cluster.

    Raises:
        ConfigError: not in a Pod (no service environment), or no token mounted.
    """
    host, port = os.environ.get(SERVICE_HOST_ENV, ""), os.environ.get(SERVICE_PORT_ENV, "")
    if not host or not port:
        raise ConfigError(f"not in a cluster: {SERVICE_HOST_ENV} and {SERVICE_PORT_ENV} are not set")
    token = mount / "token"
    if not token.is_file():
        raise ConfigError(f"no ServiceAccount token at {token}")
    server_host = f"[{host}]" if ":" in host else host
    ca = mount / "ca.crt"
    return Configuration(
        host=f"https://{server_host}:{port}",
        credentials=TokenFile(token),
        ca_pem=ca.read_text() if ca.is_file() else None,
    )


@dataclass(frozen=True)
class _Named:
    """A named entry of a kubeconfig, with the folder of the file it came from."""

    body: Mapping[str, Any]
    base: Path


def from_kubeconfig(paths: Iterable[Path]) -> Configuration:
    """The current context's connection of the kubeconfig files ``paths``, merged: the first file that
    names a cluster, user or context, or sets ``current-context``, wins (kubectl's rule).

    Raises:
        ConfigError, CredentialError, OSError: a file is missing or unreadable, or the context is incomplete.
    """
    named: dict[str, dict[str, _Named]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = ""
    read = []
    for path in paths:
        document = _read(path)
        read.append(str(path))
        current = current or str(document.get("current-context") or "")
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in document.get(section) or ():
                if isinstance(item, Mapping) and item.get("name") and isinstance(item.get(inner) or {}, Mapping):
                    named[section].setdefault(str(item["name"]), _Named(item.get(inner) or {}, path.parent))
    where = ", ".join(read)
    if not current:
        raise ConfigError(f"no current-context in {where}")
    context = named["contexts"].get(current)
    if context is None:
        raise ConfigError(f"context {current!r} is not in {where}")
    cluster = named["clusters"].get(str(context.body.get("cluster") or ""))
    if cluster is None or not cluster.body.get("server"):
        raise ConfigError(f"context {current!r} names no cluster with a server in {where}")
    user = named["users"].get(str(context.body.get("user") or ""), _Named({}, cluster.base))
    return Configuration(
        host=str(cluster.body["server"]).rstrip("/"),
        credentials=_credentials(current, user, cluster.body),
        ca_pem=_pem(cluster, "certificate-authority"),
        client_pem=_client_pem(current, user),
        verify=not cluster.body.get("insecure-skip-tls-verify"),
        tls_server_name=str(cluster.body.get("tls-server-name") or "") or None,
    )


def _read(path: Path) -> Mapping[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not YAML: {type(exc).__name__}") from None
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path} is not a kubeconfig (no mapping at its top)")
    return document


def _pem(entry: _Named, key: str) -> str | None:
    """The PEM text of ``<key>-data`` (base64) or of the file ``<key>`` names, or None."""
    data = entry.body.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{key}-data is not base64 of PEM text") from None
    if entry.body.get(key):
        return _path(entry.base, entry.body[key]).read_text()
    return None


def _path(base: Path, value: object) -> Path:
    """A path a kubeconfig names: relative to its file's folder (after ``~`` is expanded)."""
    return base / Path(str(value)).expanduser()


def _client_pem(context: str, user: _Named) -> tuple[str, str] | None:
    cert, key = _pem(user, "client-certificate"), _pem(user, "client-key")
    if (cert is None) != (key is None):
        raise ConfigError(f"the user of context {context!r} has a client certificate or key without the other")
    return None if cert is None or key is None else (cert, key)


def _credentials(context: str, user: _Named, cluster: Mapping[str, Any]) -> Credentials:
    body = user.body
    if body.get("auth-provider"):
        provider = (body.get("auth-provider") or {}).get("name", "")
        raise ConfigError(
            f"the user of context {context!r} uses the auth-provider plugin {provider!r}, which raybus does not "
            "run: configure its exec credential plugin instead"
        )
    if body.get("token"):
        return BearerToken(str(body["token"]))
    if body.get("tokenFile"):
        return TokenFile(_path(user.base, body["tokenFile"]))
    if body.get("username") and body.get("password"):
        return BasicAuth(str(body["username"]), str(body["password"]))
    if isinstance(body.get("exec"), Mapping):
        return ExecPlugin(body["exec"], user.base, cluster)
    return NoCredentials()


def base_url(configuration: Configuration) -> str:
    """The API server's base URL, without a trailing slash."""
    return configuration.host.rstrip("/")


def auth_headers(configuration: Configuration) -> dict[str, str]:
    """The Authorization header to send now (none for a connection without credentials).

    Raises:
        CredentialError: the credential source failed (a token file gone, an exec plugin failing).
    """
    value = configuration.credentials.header(time.time())
    return {"Authorization": value} if value else {}


def ssl_context(configuration: Configuration) -> ssl.SSLContext | None:
    """The connection's TLS settings (None: plain HTTP)."""
    if not base_url(configuration).startswith("https"):
        return None
    context = ssl.create_default_context(cadata=configuration.ca_pem or None)
    pair = configuration.client_certificate()
    if pair is not None:
        _load_chain(context, *pair)
    if not configuration.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_chain(context: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """Load a client certificate and key given as text: ``ssl`` reads them only from files, so they are
    written to a private folder for the moment of loading and removed at once."""
    with tempfile.TemporaryDirectory(prefix="raybus-tls-") as folder:
        cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        for path, text in ((cert, cert_pem), (key, key_pem)):
            path.touch(mode=0o600)
            path.write_text(text)
        context.load_cert_chain(str(cert), str(key))
