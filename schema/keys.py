"""Reconcile keys and the encoding of Kubernetes names into NATS subject / KV tokens.

A reconcile key is the top-level custom resource an event belongs to (docs/architecture.md#keys). Kubernetes names may
contain dots, which NATS uses as the token separator; DNS-1123 names never contain ``_``, so a dot is
written as ``_`` and the encoding is reversible. Kinds and namespaces never contain dots.
"""

from __future__ import annotations

import re
from typing import Final, Literal, get_args

import msgspec

KeyKind = Literal["RayCluster", "RayJob", "RayService", "RayCronJob"]
KEY_KINDS: Final[tuple[KeyKind, ...]] = get_args(KeyKind)


_DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns1123_label(value: str) -> bool:
    """A DNS-1123 label (namespaces, Service names): lowercase alphanumerics and '-', at most 63."""
    return len(value) <= 63 and _DNS1123_LABEL.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """A DNS-1123 subdomain (most object names): dot-separated labels, at most 253 characters."""
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


def encode_token(name: str) -> str:
    """Encode a Kubernetes name (or namespace) as one NATS token."""
    return name.replace(".", "_")


def decode_token(token: str) -> str:
    """Invert :func:`encode_token`."""
    return token.replace("_", ".")


class ReconcileKey(msgspec.Struct, frozen=True, kw_only=True):
    """``(kind, namespace, name)`` of a RayCluster, RayJob, RayService or RayCronJob."""

    kind: KeyKind
    namespace: str
    name: str

    def token(self) -> str:
        """The key as three subject tokens: ``<kind>.<ns>.<name>``."""
        return f"{self.kind}.{encode_token(self.namespace)}.{encode_token(self.name)}"

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def from_token(cls, token: str) -> ReconcileKey:
        """Parse ``<kind>.<ns>.<name>`` (the inverse of :meth:`token`).

        Raises:
            ValueError: the token is not a valid key.
        """
        parts = token.split(".")
        if len(parts) != 3 or parts[0] not in KEY_KINDS or not parts[1] or not parts[2]:
            raise ValueError(f"not a reconcile key: {token!r}")
        kind: KeyKind = parts[0]  # type: ignore[assignment]  # checked against KEY_KINDS above
        return cls(kind=kind, namespace=decode_token(parts[1]), name=decode_token(parts[2]))
