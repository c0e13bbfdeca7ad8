"""The check every attack on the running stack ends with: the applier denied each forged command."""

from __future__ import annotations

from schema.messages import CommandResult


def assert_denied(results: list[CommandResult], why: str) -> None:
    """Every result is ``denied`` with an error that says ``why``."""
    assert [(r.outcome, why in r.error) for r in results] == [("denied", True)] * len(results), results
