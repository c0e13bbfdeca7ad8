"""Fixtures of the kubesim conformance suite (re-exported from tests.fixtures.kubesim)."""

from __future__ import annotations

from tests.fixtures.kubesim import kubesim_namespace, kubesim_server  # noqa: F401
