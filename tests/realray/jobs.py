"""RayJob bodies for the real-Ray tier: tiny clusters whose heads are real Ray, and real entrypoints."""

from __future__ import annotations

from typing import Any

from tests.e2e.rayjobs import small_rayjob

RAY_IMAGE = "rayproject/ray:2.60.0"


def real_rayjob(name: str, entrypoint: str, *, mode: str, **spec: Any) -> dict[str, Any]:
    """A RayJob on a head-only cluster that is deleted once the job ends (heads cost memory)."""
    body = small_rayjob(name, entrypoint=entrypoint, submissionMode=mode, shutdownAfterJobFinishes=True, **spec)
    cluster = body["spec"]["rayClusterSpec"]
    cluster["rayVersion"] = "2.60.0"
    cluster["workerGroupSpecs"] = []
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["image"] = RAY_IMAGE
    head["resources"] = {"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "2", "memory": "2Gi"}}
    return body
