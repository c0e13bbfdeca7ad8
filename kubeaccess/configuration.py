"""What a connection to an API server needs from the official client: the loaded configuration, the auth
headers it would send and its TLS settings for aiohttp.

Credentials stay in the returned headers and context: nothing here logs them or puts them in an error.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from typing import Any, Final, cast

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

LOAD_ERRORS: Final = (k8s_config.ConfigException, OSError)
"""What :func:`load` raises when there is no usable configuration."""
AUTH_REUSE: Final = 1.0
"""Seconds the auth headers are reused. Asking the official client for them runs its refresh hook, which
re-applies the whole loaded configuration (an environment scan for proxies included): a twentieth of the
applier's CPU when it ran for every request. Its loaders renew a token minutes before it expires (a
kubeconfig's exec credentials five minutes early, an in-cluster token file every minute), so a header
reused for a second is never an expired one."""

# The config loaders are untyped in the official client.
_load_kube_config = cast(Callable[..., None], k8s_config.load_kube_config)
_load_incluster_config = cast(Callable[..., None], k8s_config.load_incluster_config)


def load(kubeconfig: str | None) -> k8s_client.Configuration:
    """The client configuration: ``kubeconfig`` if given, else in-cluster, else ``~/.kube/config``.

    Raises:
        kubernetes.config.ConfigException, OSError: no usable configuration (:data:`LOAD_ERRORS`).
    """
    configuration = k8s_client.Configuration()
    if kubeconfig:
        _load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return configuration
    try:
        _load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
        _load_kube_config(client_configuration=configuration)
    return configuration


def base_url(configuration: k8s_client.Configuration) -> str:
    """The API server's base URL, without a trailing slash."""
    return str(configuration.host).rstrip("/")


class AuthHeaders:
    """The Authorization header the client would send (a refreshed token included), asked for at most
    every :data:`AUTH_REUSE` seconds."""

    def __init__(self, configuration: k8s_client.Configuration, clock: Callable[[], float] = time.monotonic) -> None:
        self._configuration = configuration
        self._clock = clock
        self._last: tuple[float, dict[str, str]] | None = None
        """When the headers were last asked for, and what they were."""

    def __call__(self) -> dict[str, str]:
        """A fresh copy of the current headers."""
        now = self._clock()
        if self._last is None or now - self._last[0] >= AUTH_REUSE:
            headers: dict[str, str] = {}
            settings: dict[str, dict[str, Any]] = dict(self._configuration.auth_settings())  # type: ignore[arg-type]
            for setting in settings.values():
                if setting.get("in") == "header" and setting.get("value"):
                    headers[str(setting["key"]).title()] = str(setting["value"])
            self._last = (now, headers)
        return dict(self._last[1])


def ssl_context(configuration: k8s_client.Configuration) -> ssl.SSLContext | None:
    """The connection's TLS settings for aiohttp (None: plain HTTP)."""
    if not base_url(configuration).startswith("https"):
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
