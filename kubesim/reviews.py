"""TokenReview (``authentication.k8s.io/v1``) and SubjectAccessReview (``authorization.k8s.io/v1``).

Create-only, as on the real server: the answer is the posted review with its ``status`` filled in from an
:class:`AccessTable` (tokens → users, and rules granting verbs on non-resource URLs or on resources, like
RBAC rules bound to a user or a group). kubesim itself still authenticates and authorizes nobody: the
table only answers the reviews a delegating server (kube-rbac-proxy style) sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubesim.errors import bad_request, unprocessable

Obj = dict[str, Any]

TOKEN_REVIEW_PATH: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEW_PATH: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, kw_only=True)
class TokenUser:
    """Who a bearer token authenticates as."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AccessRule:
    """Verbs granted to ``subject`` (a user name, or ``group:<name>``), on non-resource URLs (exact paths
    or prefixes ending in ``*``, as RBAC writes them) and/or on resources (``<group>/<plural>``, ``""``
    group for the core API) in ``namespace`` ("" = every namespace)."""

    subject: str
    verbs: tuple[str, ...]
    non_resource_urls: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    namespace: str = ""


@dataclass(frozen=True, kw_only=True)
class AccessTable:
    """The tokens kubesim's TokenReview knows and the rules its SubjectAccessReview grants (none: every
    token is rejected and every review denied)."""

    tokens: Mapping[str, TokenUser] = field(default_factory=dict)
    rules: tuple[AccessRule, ...] = ()


def token_review(table: AccessTable, body: Obj) -> Obj:
    """The TokenReview ``body`` answered.

    Raises:
        ApiError: not a TokenReview, or no ``spec.token``.
    """
    spec = _spec(body, "TokenReview")
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise unprocessable('TokenReview.authentication.k8s.io "" is invalid: spec.token: Required value')
    user = table.tokens.get(token)
    status: Obj = {"authenticated": False, "error": "invalid bearer token"}
    if user is not None:
        info: Obj = {"username": user.username, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        status = {"authenticated": True, "user": info}
    return {**body, "metadata": {"creationTimestamp": None}, "status": status}


def access_review(table: AccessTable, body: Obj) -> Obj:
    """The SubjectAccessReview ``body`` answered.

    Raises:
        ApiError: not a SubjectAccessReview, no user or group, or not exactly one kind of attributes.
    """
    spec = _spec(body, "SubjectAccessReview")
    user = spec.get("user") or ""
    groups = spec.get("groups") or []
    if not isinstance(user, str) or not isinstance(groups, list) or not (user or groups):
        raise unprocessable(
            'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": '
            "at least one of user or group must be specified"
        )
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None) or not isinstance(resource or non_resource, dict):
        raise unprocessable(
            'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
            '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified'
        )
    subjects = {user} | {f"group:{g}" for g in groups if isinstance(g, str)}
    rules = [rule for rule in table.rules if rule.subject in subjects]
    allowed = any(_grants(rule, resource, non_resource) for rule in rules)
    status: Obj = {"allowed": allowed}
    if allowed:
        status["reason"] = "allowed by the kubesim access table"
    return {**body, "metadata": {"creationTimestamp": None}, "status": status}


def _spec(body: Obj, kind: str) -> Obj:
    if body.get("kind", kind) != kind:
        raise bad_request(f"expected a {kind}, got {body.get('kind')!r}")
    spec = body.get("spec")
    if not isinstance(spec, dict):
        raise unprocessable(f'{kind} "" is invalid: spec: Required value')
    return spec


def _grants(rule: AccessRule, resource: Obj | None, non_resource: Obj | None) -> bool:
    if non_resource is not None:
        verb, path = non_resource.get("verb", ""), non_resource.get("path", "")
        return verb in rule.verbs and any(
            pattern == path or (pattern.endswith("*") and path.startswith(pattern[:-1]))
            for pattern in rule.non_resource_urls
        )
    assert resource is not None
    named = f"{resource.get('group', '')}/{resource.get('resource', '')}"
    in_namespace = not rule.namespace or rule.namespace == resource.get("namespace", "")
    return resource.get("verb", "") in rule.verbs and named in rule.resources and in_namespace


def is_review(path: str) -> bool:
    """Whether ``path`` is the TokenReview or the SubjectAccessReview collection."""
    return path in _ANSWERS


def answer(table: AccessTable, path: str, body: Obj) -> Obj:
    """The posted review at ``path`` (see :func:`is_review`) answered.

    Raises:
        ApiError: a malformed review.
    """
    return _ANSWERS[path](table, body)


_ANSWERS: Final = {TOKEN_REVIEW_PATH: token_review, ACCESS_REVIEW_PATH: access_review}
