"""A Ray Serve application for the real-Ray tier: answers with its greeting, which ``user_config`` changes."""

from __future__ import annotations

from typing import Any

from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Greeter:
    """Answers every request with ``<greeting> from <cluster>``."""

    def __init__(self, cluster: str = "") -> None:
        self.greeting = "hello"
        self.cluster = cluster

    def reconfigure(self, config: dict[str, Any]) -> None:
        """An in-place Serve config update: a new ``user_config`` reaches the running replica."""
        self.greeting = str(config.get("greeting", self.greeting))

    async def __call__(self, request: Any) -> str:
        return f"{self.greeting} from {self.cluster}"


def app(args: dict[str, str]) -> Any:
    """The application builder (``import_path: greeter:app``, ``args: {cluster: ...}``)."""
    return Greeter.bind(args.get("cluster", ""))  # type: ignore[attr-defined]
