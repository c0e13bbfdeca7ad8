"""Following custom objects' status with a watch while a bench waits for them.

Listing every object every few seconds costs kubesim an encode of them all each time: at 10,000
RayClusters that load delayed the watch side's Lease renewals past their deadline. A watch sends each
change once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

WATCH_SECONDS = 60
"""How long one watch request lasts before it is renewed from the last resourceVersion."""


class Follow:
    """The summary of every object of a ray.io plural in ``default``, kept current by a watch thread."""

    def __init__(self, api: client.ApiClient, plural: str, summary: Callable[[dict[str, Any]], str]) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._plural = plural
        self._summary = summary
        self._by_name: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Follow:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(0.5)  # a daemon thread: a watch waiting for its next event need not be waited for

    def counts(self) -> Counter[str]:
        """How many objects have each summary."""
        return Counter(dict(self._by_name).values())

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in stream.stream(  # type: ignore[no-untyped-call]
                    self._custom.list_namespaced_custom_object,
                    "ray.io",
                    "v1",
                    "default",
                    self._plural,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    item = event["object"]
                    version = item["metadata"]["resourceVersion"]
                    self._by_name[item["metadata"]["name"]] = self._summary(item)
                    if self._stop.is_set():
                        break
            except ApiException as error:
                if error.status == 410:  # too old: list again
                    version = None
                else:
                    time.sleep(1)
            except Exception:
                time.sleep(1)
            finally:
                with contextlib.suppress(Exception):
                    stream.stop()  # type: ignore[no-untyped-call]
