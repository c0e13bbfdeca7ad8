"""Where the Authorization header of an API server connection comes from, and when it is read again.

Each source answers :meth:`Credentials.header` with the header's value, or "" when it sends none:

- :class:`BearerToken`: a token written in the kubeconfig (``user.token``);
- :class:`TokenFile`: a token in a file read again every :data:`TOKEN_FILE_REREAD` seconds: a
  kubeconfig's ``user.tokenFile``, and the in-cluster ServiceAccount token, which the kubelet rotates;
- :class:`BasicAuth`: ``user.username`` and ``user.password``;
- :class:`ExecPlugin`: a kubeconfig's ``user.exec`` credential plugin (``client.authentication.k8s.io``
  ``v1`` and ``v1beta1``), run again :data:`EXEC_RENEW_BEFORE` seconds before the token it printed expires.
  It runs on the thread that asks, as the official clients run it: about once an hour for the usual
  cloud plugins.

Credentials never reach a log or an error: a failing source names its file or command, never the value.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from schema.times import parse_time

TOKEN_FILE_REREAD: Final = 60.0
"""Seconds a token read from a file is used before the file is read again (the kubelet rotates the
projected ServiceAccount token well before it expires; client-go re-reads it every minute too)."""
EXEC_RENEW_BEFORE: Final = 300.0
"""Seconds before its expiry that an exec plugin's token is asked for again."""
EXEC_TIMEOUT: Final = 60.0
"""Seconds an exec credential plugin may run."""
EXEC_API_VERSIONS: Final = frozenset({"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"})
EXEC_CLUSTER_EXTENSION: Final = "client.authentication.k8s.io/exec"
"""The cluster extension whose content an exec plugin gets as ``spec.cluster.config``."""

Clock = Callable[[], float]
"""Wall-clock seconds since the epoch (exec credentials expire at a wall-clock time)."""


class CredentialError(Exception):
    """A credential source that cannot give a header (its message names the source, never a secret)."""


class Credentials(Protocol):
    """A source of the Authorization header."""

    def header(self, now: float) -> str:
        """The Authorization header's value at ``now`` (wall-clock seconds), or "" for none.

        Raises:
            CredentialError: the source cannot give one.
        """
        ...


class NoCredentials:
    """An anonymous connection (or one authenticated by its client certificate only)."""

    def header(self, now: float) -> str:
        """Always ""."""
        return ""


@dataclass(frozen=True)
class BearerToken:
    """A fixed bearer token."""

    token: str = field(repr=False)

    def header(self, now: float) -> str:
        """``Bearer <token>``."""
        return f"Bearer {self.token}"


@dataclass
class TokenFile:
    """A bearer token kept in a file, read again every :data:`TOKEN_FILE_REREAD` seconds."""

    path: Path
    _token: str = field(default="", repr=False)
    _read_at: float | None = None

    def header(self, now: float) -> str:
        """``Bearer <the file's content>``; a file that cannot be read again keeps the last token.

        Raises:
            CredentialError: the file was never readable, or is empty.
        """
        if self._read_at is None or now - self._read_at >= TOKEN_FILE_REREAD:
            try:
                token = self.path.read_text().strip()
            except OSError as exc:
                if not self._token:
                    raise CredentialError(f"cannot read the token file {self.path}: {exc.strerror}") from None
                token = self._token
            if not token:
                raise CredentialError(f"the token file {self.path} is empty")
            self._token, self._read_at = token, now
        return f"Bearer {self._token}"


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic authentication."""

    username: str
    password: str = field(repr=False)

    def header(self, now: float) -> str:
        """``Basic <base64 of username:password>``."""
        pair = f"{self.username}:{self.password}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin printed: a token and/or a client certificate, and when they expire."""

    token: str = field(default="", repr=False)
    client_certificate_data: str = ""
    client_key_data: str = field(default="", repr=False)
    expires: float | None = None
    """Wall-clock seconds; None: never."""


@dataclass
class ExecPlugin:
    """A kubeconfig's ``user.exec`` credential plugin.

    Args:
        spec: the ``user.exec`` mapping (``apiVersion``, ``command``, ``args``, ``env``).
        base: the kubeconfig's folder: a relative command with a path separator is resolved there, as
            kubectl does.
        cluster: the cluster's entry, passed on to plugins that ask for it (``provideClusterInfo``).
    """

    spec: Mapping[str, Any]
    base: Path
    cluster: Mapping[str, Any] = field(default_factory=dict)
    _last: ExecCredential | None = field(default=None, repr=False)
    # The informers' threads and the event loop ask at once when a token expires: one of them runs it.
    _running: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def header(self, now: float) -> str:
        """``Bearer <token>`` from the plugin, run again when the last token is about to expire.

        Raises:
            CredentialError: the plugin failed or printed no token.
        """
        credential = self.credential(now)
        return f"Bearer {credential.token}" if credential.token else ""

    def credential(self, now: float) -> ExecCredential:
        """The plugin's current credential, run again when the last one is about to expire.

        Raises:
            CredentialError: the plugin failed or printed something that is not an ExecCredential.
        """
        with self._running:
            last = self._last
            if last is None or (last.expires is not None and now >= last.expires - EXEC_RENEW_BEFORE):
                last = self._last = self._run()
            return last

    def _run(self) -> ExecCredential:
        api_version = str(self.spec.get("apiVersion") or "")
        if api_version not in EXEC_API_VERSIONS:
            raise CredentialError(f"exec plugin apiVersion {api_version!r} is not one of {sorted(EXEC_API_VERSIONS)}")
        command = str(self.spec.get("command") or "")
        if not command:
            raise CredentialError("exec plugin without a command")
        if os.sep in command and not os.path.isabs(command):
            command = str(self.base / command)
        args: Sequence[Any] = self.spec.get("args") or ()
        info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        if self.spec.get("provideClusterInfo"):
            info["spec"]["cluster"] = _cluster_info(self.cluster)
        env = {**os.environ, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        for item in self.spec.get("env") or ():
            if isinstance(item, Mapping) and item.get("name"):
                env[str(item["name"])] = str(item.get("value") or "")
        try:
            ran = subprocess.run(
                [command, *(str(arg) for arg in args)],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXEC_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CredentialError(f"exec plugin {command} could not run: {type(exc).__name__}") from None
        if ran.returncode != 0:
            said = ran.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise CredentialError(f"exec plugin {command} exited with {ran.returncode}: {said[0][:200]}")
        return _parse_credential(command, ran.stdout)


def _cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key in ("certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name"):
        if cluster.get(key):
            info[key] = cluster[key]
    for extension in cluster.get("extensions") or ():
        if isinstance(extension, Mapping) and extension.get("name") == EXEC_CLUSTER_EXTENSION:
            info["config"] = extension.get("extension")
    return info


def _parse_credential(command: str, out: bytes) -> ExecCredential:
    try:
        document = json.loads(out)
    except ValueError:
        raise CredentialError(f"exec plugin {command} printed no JSON") from None
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(status, dict) or document.get("kind") != "ExecCredential":
        raise CredentialError(f"exec plugin {command} printed no ExecCredential status")
    token = str(status.get("token") or "")
    cert, key = str(status.get("clientCertificateData") or ""), str(status.get("clientKeyData") or "")
    if not token and not (cert and key):
        raise CredentialError(f"exec plugin {command} printed neither a token nor a client certificate and key")
    expires: float | None = None
    if status.get("expirationTimestamp"):
        moment = parse_time(status["expirationTimestamp"])
        if moment is None:
            raise CredentialError(f"exec plugin {command} printed an unreadable expirationTimestamp")
        expires = moment.timestamp()
    return ExecCredential(token=token, client_certificate_data=cert, client_key_data=key, expires=expires)
