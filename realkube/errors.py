"""The one error the control plane raises."""

from __future__ import annotations


class RealKubeError(RuntimeError):
    """The control plane could not be built, started or asked something; the message says which part and
    why (with the tail of that program's log where there is one)."""
