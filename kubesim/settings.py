"""kubesim's tunables: one frozen dataclass with documented defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesim.reviews import AccessTable


@dataclass(frozen=True, kw_only=True)
class KubeSimSettings:
    """How the emulated API server behaves where the real one is configurable."""

    host: str = "127.0.0.1"
    """Interface to bind; loopback only, kubesim has no authentication."""
    port: int = 0
    """TCP port; 0 picks a free one (read it back from ``KubeSim.url``)."""
    event_window: int = 5000
    """Events retained per resource for watches that resume from a resourceVersion; older → 410 Gone."""
    bookmark_interval: float = 60.0
    """Seconds between BOOKMARK events on watches that allow them (the real server uses about a minute)."""
    watch_timeout: float = 1800.0
    """Default lifetime of a watch without ``timeoutSeconds`` (the real server picks 30 to 60 min)."""
    max_body_bytes: int = 3 * 1024 * 1024
    """Largest accepted request body; larger → 413, like the real server's 3 MiB limit."""
    access: AccessTable = field(default_factory=AccessTable)
    """Tokens and grants answering TokenReviews and SubjectAccessReviews (kubesim itself checks nobody)."""
