"""The OpenAPI 3.1 document of the status API, built from the route table the server itself registers
and from the response Structs (``msgspec.json.schema_components``), so it cannot drift from the code:
every served route is documented, with the schema its handler really encodes. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from services.runtime.webserver import Handler
from services.status.responses import ErrorOut

SCHEMA_REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Param:
    """One path or query parameter."""

    name: str
    location: Literal["path", "query"]
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Route:
    """One GET endpoint: the server routes it and the document describes it."""

    path: str
    handler: Handler
    operation_id: str
    summary: str
    response: type[msgspec.Struct] | None
    """Body of a 200 answer; None for the document itself."""
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = (400,)


_ERROR_TEXT = {400: "invalid parameter", 404: "not found", 503: "database unavailable"}


def build_document(routes: Sequence[Route], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI document describing ``routes``."""
    types: list[type[msgspec.Struct]] = [ErrorOut, *(r.response for r in routes if r.response is not None)]
    (_, components) = msgspec.json.schema_components(list(dict.fromkeys(types)), ref_template=SCHEMA_REF)
    paths: dict[str, Any] = {}
    for route in routes:
        responses: dict[str, Any] = {}
        if route.response is None:
            responses["200"] = {"description": "this document", "content": {"application/json": {"schema": {}}}}
        else:
            ref = SCHEMA_REF.format(name=route.response.__name__)
            responses["200"] = {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}
        for status in (*route.errors, 503):
            ref = SCHEMA_REF.format(name=ErrorOut.__name__)
            responses[str(status)] = {
                "description": _ERROR_TEXT.get(status, "error"),
                "content": {"application/json": {"schema": {"$ref": ref}}},
            }
        paths[route.path] = {
            "get": {
                "operationId": route.operation_id,
                "summary": route.summary,
                "parameters": [
                    {
                        "name": p.name,
                        "in": p.location,
                        "required": p.required or p.location == "path",
                        "description": p.description,
                        "schema": p.schema,
                    }
                    for p in route.params
                ],
                "responses": responses,
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
    }
