"""Leader election of the watch side: one active watcher replica, chosen by a Kubernetes Lease.

Role: client-go's ``leaderelection`` with a ``LeaseLock`` (what controller-runtime, and so KubeRay's
operator, runs), over the watcher's API adapter. A candidate :meth:`LeaseElection.acquire`\\ s the Lease,
then :meth:`LeaseElection.run` renews it until told to stop or until leadership is lost, and a clean stop
:meth:`LeaseElection.release`\\ s it.

Rules (client-go's ``tryAcquireOrRenew``), one attempt = GET, then a write:
- a missing Lease is created with this candidate as holder (AlreadyExists: another one was first);
- a Lease held by another candidate is taken only once its record stayed unchanged for its
  ``leaseDurationSeconds``, counted on this process's monotonic clock from when this candidate first saw
  that record, never from the times written in it (two nodes' clocks may disagree);
- an empty holder (a released Lease) or this candidate's own identity is taken at once, so a process
  restarting with the same identity takes its Lease back; only a change of holder counts a transition
  and sets ``acquireTime``;
- every write is a PUT of the object read, with its ``metadata.resourceVersion``: a 409 Conflict means
  another candidate wrote in between, and the attempt failed;
- the leader renews every retry period, from a thread with its own event loop and API connection, so a
  busy watch process still renews in time; leadership is lost (``lost`` is set) when the Lease names another
  holder, or when no renewal succeeded within the renew deadline of the last one (counted from when that
  request was sent, so it ends before the others may take the Lease), and the caller stops the watch
  work at once;
- a clean stop releases (client-go's ``ReleaseOnCancel``): the holder cleared and ``leaseDurationSeconds``
  1, so a standby takes over at its next try instead of after the lease duration.

``acquireTime`` and ``renewTime`` are MicroTime (``schema.times.format_time_exact``), stamped by the
injected clock. No jitter on the retry period (see ``services.runtime.backoff``: few candidates).
Errors are logged when they change (one line per outage, not per try); they carry the request path,
never credentials.

Not here: what runs while leading and which namespace and identity (the watcher service).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from schema.times import format_time_exact
from services.edge.calls import ApiError, object_path
from services.edge.kubeapi import KubeApi
from services.edge.resources import LEASE
from services.runtime.backoff import interruptible
from services.runtime.clock import Clock, utc_now
from services.runtime.ownloop import OwnLoop

log = logging.getLogger(__name__)

LEASE_NAME: Final = "raybus-watcher"
"""The Lease the watcher replicas elect their leader with (in the watcher's own namespace)."""

_RELEASED_DURATION: Final = 1
"""``leaseDurationSeconds`` of a released Lease (client-go writes 1)."""

_decoder: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionTimings:
    """Seconds of the election; the defaults are controller-runtime's (and so KubeRay's).

    Attributes:
        lease_duration: how long a standby waits, after it last saw the Lease change, before taking it.
        renew_deadline: how long the leader keeps retrying a renewal before it gives leadership up.
        retry_period: the pause between two tries, to acquire or to renew.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(f"need lease_duration > renew_deadline > retry_period > 0, got {self}")

    @property
    def lease_duration_seconds(self) -> int:
        """The duration as the Lease stores it (whole seconds, rounded up)."""
        return math.ceil(self.lease_duration)


KUBERAY_TIMINGS: Final = ElectionTimings()
"""controller-runtime's defaults: a 15 s lease, renewed within 10 s, tried every 2 s."""


class LeaseElection:
    """One candidate for a Lease.

    ``lost`` is set when leadership is lost while running (cleared by the next :meth:`acquire`).
    One task drives acquire, run and release in turn; while it runs, only the renewal thread writes the
    candidate's state (the caller's loop reads it for readiness).
    """

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str = LEASE_NAME,
        identity: str,
        timings: ElectionTimings = KUBERAY_TIMINGS,
        clock: Clock = utc_now,
    ) -> None:
        if not identity:
            raise ValueError("a candidate needs an identity")
        self._api = api
        self._namespace = namespace
        self._name = name
        self._path = object_path(LEASE, namespace, name)
        self._identity = identity
        self._timings = timings
        self._clock = clock
        self._object: dict[str, Any] | None = None
        """The Lease as last read or written."""
        self._observed_at = 0.0
        """Monotonic time when the Lease's spec was first seen as it is in ``_object``."""
        self._renewed_at = 0.0
        """Monotonic time the last successful write was sent."""
        self._leading = False
        self._last_error = ""
        self.lost = asyncio.Event()

    @property
    def identity(self) -> str:
        """This candidate's holder identity."""
        return self._identity

    @property
    def is_leader(self) -> bool:
        """This candidate holds the Lease (as of its last successful write)."""
        return self._leading

    @property
    def holder(self) -> str | None:
        """The holder the Lease named when last read or written (None: unknown or nobody)."""
        return str(self._spec().get("holderIdentity") or "") or None

    def readiness(self) -> str | None:
        """None while leading, else why this candidate is not active (for the watcher's readiness)."""
        if self._leading:
            return None
        where = f"the Lease {self._namespace}/{self._name}"
        holder = self.holder
        if self.lost.is_set():
            return f"lost {where} (held by {holder or 'nobody'})"
        if holder is not None and holder != self._identity:
            return f"waiting for {where} held by {holder}"
        if self._last_error:
            return f"waiting for {where}: {self._last_error}"
        return f"waiting for {where}"

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Try every retry period until this candidate holds the Lease (True) or ``stop`` is set (False).

        Creates the Lease when it is absent. API errors are retried (logged when they change).
        """
        sleep = interruptible(stop)
        while not stop.is_set():
            if await self._try(self._timings.renew_deadline):
                self.lost.clear()
                log.info("acquired the Lease %s/%s as %s", self._namespace, self._name, self._identity)
                return True
            await sleep(self._timings.retry_period)
        return False

    async def run(self, stop: asyncio.Event) -> bool:
        """Renew the Lease every retry period until ``stop`` is set (True) or leadership is lost (False).

        The renewals run on a thread of their own, with their own event loop and API connection
        (``services.runtime.ownloop``): a watch process busy for seconds (listing and projecting 10,000
        objects after a restart) must not let its Lease lapse for want of a turn on its own loop.
        On loss ``lost`` is set and :attr:`is_leader` is False: the caller must stop the watch work at once.
        It does not release the Lease on a stop: the caller stops its work first, then calls :meth:`release`.

        Raises:
            RuntimeError: this candidate does not hold the Lease (:meth:`acquire` first).
        """
        if not self._leading:
            raise RuntimeError("run() needs the Lease: acquire() it first")
        renewing = OwnLoop(self._renew_until, name="watch-lease")
        stopped = asyncio.ensure_future(stop.wait())
        ended = asyncio.ensure_future(renewing.result())
        try:
            await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            ended.cancel()
            raise
        finally:
            stopped.cancel()
            await renewing.close()  # asks the thread to stop before it awaits, also when cancelled
        held = await ended
        if not held:
            self.lost.set()
        return held

    async def _renew_until(self, stop: asyncio.Event) -> bool:
        """The renewal thread's body: True once ``stop`` is set, False when leadership is lost."""
        api = KubeApi(self._api.configuration, concurrency=1, watches=0)
        sleep = interruptible(stop)
        try:
            while True:
                await sleep(self._timings.retry_period)
                if stop.is_set():
                    return True
                remaining = self._renewed_at + self._timings.renew_deadline - time.monotonic()
                if remaining > 0 and await self._try(remaining, api):
                    continue
                holder = self.holder
                if holder is not None and holder != self._identity:
                    return self._lose(f"it is held by {holder}")
                if time.monotonic() >= self._renewed_at + self._timings.renew_deadline:
                    return self._lose(f"no renewal within {self._timings.renew_deadline:g}s: {self._last_error}")
        finally:
            await api.close()

    async def release(self) -> bool:
        """Give the Lease up: the holder cleared, so a standby takes it at its next try (client-go's
        ``ReleaseOnCancel``). True when released; a candidate that does not lead has nothing to release,
        and a Lease written by someone else since this candidate's last write is left alone (409).
        """
        if not self._leading or self._object is None:
            return False
        self._leading = False
        now = format_time_exact(self._clock())
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": _RELEASED_DURATION,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": self._transitions(),
        }
        timeout = self._timings.renew_deadline
        try:
            async with asyncio.timeout(timeout):  # a stop has a budget: bounded like a renewal
                self._object = await self._put(self._api, spec, timeout)
        except (ApiError, TimeoutError) as exc:
            log.warning("could not release the Lease %s/%s: %s", self._namespace, self._name, str(exc) or "no answer")
            return False
        self._observed_at = time.monotonic()
        log.info("released the Lease %s/%s", self._namespace, self._name)
        return True

    # --- one attempt ------------------------------------------------------------------------------------

    async def _try(self, timeout: float, api: KubeApi | None = None) -> bool:
        """One acquire-or-renew attempt (through ``api``, by default the candidate's own); True when this
        candidate holds the Lease after it."""
        api = api or self._api
        sent = time.monotonic()
        now = format_time_exact(self._clock())
        try:
            # The whole attempt is bounded: a request's timeout is per socket operation, and a
            # leader must learn that it could not renew before the others may take the Lease.
            async with asyncio.timeout(timeout):
                current = await self._get(api, timeout)
                if current is None:
                    self._object = await self._create(api, now, timeout)
                    return self._won(sent)
                self._observe(current)
                holder = self.holder
                if holder is not None and holder != self._identity and not self._expired():
                    self._leading = False
                    self._last_error = ""
                    return False
                self._object = await self._put(api, self._next_spec(holder, now), timeout)
                return self._won(sent)
        except ApiError as exc:  # a 409: another candidate created or wrote it in between (read next time)
            self._note_error(exc)
            return False
        except TimeoutError:
            self._note_error(f"no answer within {timeout:.3g}s")
            return False

    def _won(self, sent: float) -> bool:
        self._observed_at = self._renewed_at = sent
        self._leading = True
        self._last_error = ""
        return True

    def _lose(self, why: str) -> bool:
        self._leading = False
        log.warning("lost the Lease %s/%s: %s", self._namespace, self._name, why)
        return False

    def _note_error(self, error: ApiError | str) -> None:
        text = str(error)
        if text != self._last_error:
            log.warning("Lease %s/%s: %s", self._namespace, self._name, text)
        self._last_error = text

    def _spec(self) -> dict[str, Any]:
        spec = (self._object or {}).get("spec")
        return spec if isinstance(spec, dict) else {}

    def _observe(self, current: dict[str, Any]) -> None:
        """Remember the Lease read; a changed record restarts the wait for it to expire."""
        spec = current.get("spec")
        if not isinstance(spec, dict) or spec != self._spec():
            self._observed_at = time.monotonic()
        self._object = current

    def _expired(self) -> bool:
        duration = self._spec().get("leaseDurationSeconds")
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            duration = self._timings.lease_duration
        return time.monotonic() >= self._observed_at + duration

    def _transitions(self) -> int:
        count = self._spec().get("leaseTransitions")
        return count if isinstance(count, int) and not isinstance(count, bool) else 0

    def _next_spec(self, holder: str | None, now: str) -> dict[str, Any]:
        """The record this candidate writes: a renewal keeps acquireTime and the transition count."""
        spec: dict[str, Any] = {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": self._timings.lease_duration_seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": self._transitions(),
        }
        if holder == self._identity:
            spec["acquireTime"] = self._spec().get("acquireTime") or now
        else:
            spec["leaseTransitions"] += 1
        return spec

    # --- requests ---------------------------------------------------------------------------------------

    async def _get(self, api: KubeApi, timeout: float) -> dict[str, Any] | None:
        try:
            response = await api.arequest("GET", self._path, timeout=timeout)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return _decoder.decode(response.data)

    async def _create(self, api: KubeApi, now: str, timeout: float) -> dict[str, Any]:
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": {
                "holderIdentity": self._identity,
                "leaseDurationSeconds": self._timings.lease_duration_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        response = await api.arequest("POST", LEASE.collection_path(self._namespace), body=body, timeout=timeout)
        return _decoder.decode(response.data)

    async def _put(self, api: KubeApi, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Replace the Lease last read or written (its resourceVersion is the precondition)."""
        assert self._object is not None
        body = {**self._object, "spec": spec}
        response = await api.arequest("PUT", self._path, body=body, timeout=timeout)
        return _decoder.decode(response.data)
