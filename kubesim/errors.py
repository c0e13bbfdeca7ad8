"""API errors as the real API server reports them: an exception carrying a ``Status`` body.

Every failure the HTTP layer returns is an :class:`ApiError`; the constructors below reproduce the
reasons, codes and message wording of kube-apiserver so clients (and people reading test output)
see what a real cluster would say. The store raises these too, so in-process callers get the same
semantics as HTTP callers.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Cause(NamedTuple):
    """One field error of a 422 Invalid response."""

    reason: str
    field: str
    message: str


class ApiError(Exception):
    """A failed API call, convertible to a ``Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` body of this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(name: str, group: str, plural: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _resource(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 for a missing object."""
    return ApiError(
        404,
        "NotFound",
        f'{_resource(group, plural)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 for a create whose name is taken."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{_resource(group, plural)} "{name}" already exists',
        details=_details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str | None = None) -> ApiError:
    """409 for a stale resourceVersion or failed precondition."""
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_resource(group, plural)} "{name}": {why}',
        details=_details(name, group, plural),
    )


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """422 with field causes, message formatted like kube-apiserver's ``NewInvalid``."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {
        **({"name": name} if name else {}),
        "kind": kind,
        "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details=details)


def unprocessable(message: str) -> ApiError:
    """422 without field causes (e.g. a JSON patch whose ``test`` failed)."""
    return ApiError(422, "Invalid", message)


def bad_request(message: str) -> ApiError:
    """400 for a malformed request."""
    return ApiError(400, "BadRequest", message)


def forbidden(group: str, plural: str, name: str, why: str) -> ApiError:
    """403, used for writes into a terminating namespace."""
    return ApiError(
        403,
        "Forbidden",
        f'{_resource(group, plural)} "{name}" is forbidden: {why}',
        details=_details(name, group, plural),
    )


def method_not_allowed(method: str) -> ApiError:
    """405 for a verb the resource does not support."""
    return ApiError(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
    )


def unsupported_media_type(content_type: str) -> ApiError:
    """415 for an unknown or disallowed patch type."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml ({content_type})",
    )


def too_large() -> ApiError:
    """413 for request bodies over the limit."""
    return ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")


def gone(message: str) -> ApiError:
    """410 for an expired resourceVersion."""
    return ApiError(410, "Expired", message)


def service_unavailable(message: str) -> ApiError:
    """503 from the proxy when nothing listens behind a Service or Pod."""
    return ApiError(503, "ServiceUnavailable", message)


def page_not_found() -> ApiError:
    """404 for a path that names no resource (the real server's mux answer)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")
