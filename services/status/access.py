"""Who may read the history API and the console: the caller's bearer token reviewed by the Kubernetes
API server, as kube-rbac-proxy does.

A request must carry ``Authorization: Bearer <token>``. The token goes to a TokenReview
(``authentication.k8s.io/v1``); the user it names then to a SubjectAccessReview (``authorization.k8s.io/v1``)
of verb ``get`` on the request's path as a non-resource URL, so a ClusterRole rule like
``nonResourceURLs: ["/v1/*"], verbs: [get]`` grants the history. No token: 401; a token the API server does
not accept: 401; a user the API server does not allow: 403; the API server unreachable or answering
nonsense: 503. Both answers are cached for ``cache_ttl`` seconds (the token by its SHA-256, never itself),
so a page of the console costs the API server nothing after its first request.

The two reviews are plain HTTPS calls with the status service's own ServiceAccount token (the only
Kubernetes permissions it has are creating these two reviews: ``deploy/base/status-rbac.yaml``). No token
(the caller's or the service's own) appears in a log, an error or an answer.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from kubeaccess.asynchttp import AsyncHttp, HttpError
from services.runtime.clock import Monotonic
from services.runtime.settings import StatusAuthSettings
from services.runtime.webserver import Request
from services.status.api import ApiError, Guard

log = logging.getLogger(__name__)

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
REQUIRED_RULES: Final = frozenset(
    {("authentication.k8s.io", "tokenreviews", "create"), ("authorization.k8s.io", "subjectaccessreviews", "create")}
)
"""The status service's whole Kubernetes RBAC: (apiGroup, resource, verb)."""
REVIEW_TIMEOUT: Final = 5.0
"""Seconds one review may take before the request is answered 503."""
CACHE_SIZE: Final = 4096
"""Reviews remembered at most (the oldest go first)."""
VERB: Final = "get"
"""The verb every path is checked with: the API only reads."""
_CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="raybus"'}


@dataclass(frozen=True)
class Caller:
    """Who a token authenticates as."""

    username: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


class _UserInfo(msgspec.Struct, frozen=True):
    username: str = ""
    uid: str = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}


class _TokenStatus(msgspec.Struct, frozen=True):
    authenticated: bool = False
    user: _UserInfo = _UserInfo()


class _AccessStatus(msgspec.Struct, frozen=True):
    allowed: bool = False


T = TypeVar("T", _TokenStatus, _AccessStatus)


def in_cluster_url(env: Mapping[str, str]) -> str:
    """The API server's URL from the variables Kubernetes sets in every pod ("" outside a cluster)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return ""
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class _Cache:
    """Answers by key for ``ttl`` seconds, at most :data:`CACHE_SIZE` of them."""

    def __init__(self, ttl: float, clock: Monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._items: OrderedDict[tuple[str, ...], tuple[float, Any]] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> Any:
        found = self._items.get(key)
        if found is None or found[0] <= self._clock():
            self._items.pop(key, None)
            return None
        return found[1]

    def put(self, key: tuple[str, ...], value: Any) -> None:
        self._items[key] = (self._clock() + self._ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > CACHE_SIZE:
            self._items.popitem(last=False)


class AccessReviewer:
    """Reviews callers' tokens with the API server; one per status service."""

    def __init__(self, settings: StatusAuthSettings, *, clock: Monotonic = time.monotonic) -> None:
        self._settings = settings
        self._url = (settings.api_url or in_cluster_url(os.environ)).rstrip("/")
        self._tokens = _Cache(settings.cache_ttl, clock)
        self._access = _Cache(settings.cache_ttl, clock)
        self._http: AsyncHttp | None = None
        self.reviews = 0
        """Reviews sent to the API server so far (both kinds)."""

    async def close(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def check(self, authorization: str | None, path: str) -> Caller:
        """The caller of a request with this ``Authorization`` header to ``path``, if it may read it.

        Raises:
            ApiError: 401 no or a rejected token, 403 not allowed, 503 the API server did not answer.
        """
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError(
                401, "unauthorized", "a bearer token is required (Authorization: Bearer <token>)", headers=_CHALLENGE
            )
        digest = hashlib.sha256(token.encode()).hexdigest()
        reviewed: tuple[Caller | None] | None = self._tokens.get((digest,))
        if reviewed is None:
            reviewed = (await self._review_token(token),)  # a rejection is remembered too
            self._tokens.put((digest,), reviewed)
        caller = reviewed[0]
        if caller is None:
            raise ApiError(
                401,
                "unauthorized",
                "the bearer token was not accepted by the Kubernetes API server",
                headers=_CHALLENGE,
            )
        key = (caller.username, caller.uid, ",".join(caller.groups), path)
        allowed: bool | None = self._access.get(key)
        if allowed is None:
            allowed = await self._review_access(caller, path)
            self._access.put(key, allowed)
        if not allowed:
            raise ApiError(403, "forbidden", f'user "{caller.username}" may not get path "{path}"')
        return caller

    async def _review_token(self, token: str) -> Caller | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = await self._post(TOKEN_REVIEWS, body, _TokenStatus)
        if not status.authenticated or not status.user.username:
            return None
        user = status.user
        return Caller(username=user.username, uid=user.uid, groups=tuple(user.groups), extra=dict(user.extra))

    async def _review_access(self, caller: Caller, path: str) -> bool:
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "nonResourceAttributes": {"path": path, "verb": VERB},
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = caller.extra
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return (await self._post(ACCESS_REVIEWS, body, _AccessStatus)).allowed

    async def _post(self, path: str, body: dict[str, Any], kind: type[T]) -> T:
        """``status`` of the review ``body`` posted to ``path``. The answer of a TokenReview repeats the
        token, so nothing of it is ever logged or quoted."""
        if not self._url:
            raise ApiError(503, "unavailable", "no Kubernetes API server to review tokens (not in a cluster)")
        self.reviews += 1
        try:
            own = Path(self._settings.token_file).read_text().strip()
            response = await self._client().request(
                "POST",
                self._url + path,
                body=msgspec.json.encode(body),
                headers={"Authorization": f"Bearer {own}", "Content-Type": "application/json"},
                timeout=REVIEW_TIMEOUT,
            )
            raw, code = response.body, response.status
        except (OSError, HttpError, TimeoutError) as exc:
            log.warning("status API: %s failed: %s", path.rpartition("/")[2], type(exc).__name__)
            raise ApiError(503, "unavailable", "the Kubernetes API server could not review the request") from None
        if code != 201 and code != 200:
            log.warning("status API: %s answered HTTP %d", path.rpartition("/")[2], code)
            raise ApiError(503, "unavailable", f"the Kubernetes API server refused the review (HTTP {code})")
        try:
            answer = msgspec.json.decode(raw)
            status = answer.get("status") if isinstance(answer, dict) else None
            if isinstance(status, dict):
                return msgspec.convert(status, kind)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        raise ApiError(503, "unavailable", "the Kubernetes API server's review did not parse")

    def _client(self) -> AsyncHttp:
        if self._http is None:
            context = None
            if self._url.startswith("https://"):
                context = ssl.create_default_context(cafile=self._settings.ca_file)
            # No idle keep-alive connection outlives a review: reviews are rare (cached), and a pooled socket
            # would otherwise linger until the pool is closed.
            self._http = AsyncHttp(context=context, keep_alive=False)
        return self._http


def access_guard(reviewer: AccessReviewer) -> Guard:
    """A :data:`services.status.api.Guard` letting through only the requests ``reviewer`` accepts."""

    async def guard(request: Request) -> None:
        await reviewer.check(request.headers.get("authorization"), request.path)

    return guard
