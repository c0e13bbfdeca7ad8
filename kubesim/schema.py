"""Structural-schema semantics of CRDs: pruning, defaulting and validation of custom objects.

This follows apiextensions-apiserver's order (prune unknown fields, apply ``default``s, then
validate) over the OpenAPI v3 subset CRDs allow: types, ``nullable``, ``required``, ``enum``,
numeric bounds, ``pattern``, string/array/map sizes, ``properties`` / ``additionalProperties`` /
``items``, ``allOf``/``anyOf``/``oneOf``/``not`` as value validations, ``x-kubernetes-int-or-string``,
``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-embedded-resource`` and the
``x-kubernetes-list-type`` uniqueness rules. Error wording copies the real server's field errors.

CEL rules (``x-kubernetes-validations``) and ``format`` checks are deliberately not evaluated: a CEL
interpreter is out of scope for a test substrate, and raybus' own validation must not depend on them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from kubesim import codec
from kubesim.errors import Cause

Schema = dict[str, Any]

_ROOT_KEEP = ("apiVersion", "kind", "metadata")


def prune(schema: Schema | None, value: Any, *, root: bool = False) -> None:
    """Drop, in place, every field ``schema`` does not know (structural pruning)."""
    if schema is None:
        return
    if isinstance(value, dict):
        embedded = root or bool(schema.get("x-kubernetes-embedded-resource"))
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        props: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key in list(value):
            if embedded and key in _ROOT_KEEP:
                # apiVersion/kind/metadata of a resource are ObjectMeta's business, never the schema's.
                continue
            sub = props.get(key)
            if sub is not None:
                prune(sub, value[key])
            elif isinstance(additional, dict):
                prune(additional, value[key])
            elif additional is True or preserve:
                continue
            else:
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                prune(items, item)


def apply_defaults(schema: Schema | None, value: Any) -> None:
    """Fill, in place, missing (or null non-nullable) fields that have a ``default``."""
    if schema is None:
        return
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for key, sub in props.items():
            if "default" in sub and (key not in value or (value[key] is None and not sub.get("nullable"))):
                default = sub["default"]
                value[key] = codec.clone({"v": default})["v"] if isinstance(default, dict | list) else default
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub_schema = props.get(key)
            if sub_schema is not None:
                apply_defaults(sub_schema, item)
            elif isinstance(additional, dict):
                apply_defaults(additional, item)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(items, item)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return codec.encode(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "null"
    return codec.encode(value).decode()


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(expected: str, value: Any) -> bool:
    actual = _type_name(value)
    if expected == "number":
        return actual in ("integer", "number")
    return actual == expected


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def validate(schema: Schema | None, value: Any, path: str = "", *, root: bool = False) -> list[Cause]:
    """Every violation of ``schema`` by ``value``, as field causes (empty when valid)."""
    if schema is None:
        return []
    causes: list[Cause] = []
    _validate(schema, value, path, causes, root=root)
    return causes


def _validate(schema: Schema, value: Any, path: str, out: list[Cause], *, root: bool = False) -> None:
    where = path or "<root>"
    if value is None:
        if not schema.get("nullable") and (schema.get("type") or schema.get("x-kubernetes-int-or-string")):
            expected = schema.get("type") or "int-or-string"
            out.append(
                Cause(
                    "FieldValueTypeInvalid",
                    path,
                    f'Invalid value: "null": {where} in body must be of type {expected}: "null"',
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        actual = _type_name(value)
        if actual not in ("integer", "string"):
            out.append(
                Cause(
                    "FieldValueTypeInvalid",
                    path,
                    f'Invalid value: "{actual}": {where} in body must be of type int-or-string: "{actual}"',
                )
            )
            return
    else:
        expected = schema.get("type")
        if expected and not _type_ok(expected, value):
            actual = _type_name(value)
            out.append(
                Cause(
                    "FieldValueTypeInvalid",
                    path,
                    f'Invalid value: "{actual}": {where} in body must be of type {expected}: "{actual}"',
                )
            )
            return
    _validate_value(schema, value, path, where, out)
    for key in ("allOf", "anyOf", "oneOf", "not"):
        if key in schema:
            _validate_combinator(key, schema[key], value, path, where, out)
    if isinstance(value, dict):
        _validate_object(schema, value, path, out, root=root)
    elif isinstance(value, list):
        _validate_array(schema, value, path, out)


def _validate_combinator(key: str, subs: Any, value: Any, path: str, where: str, out: list[Cause]) -> None:
    if key == "not":
        if not validate(subs, value, path):
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_show(value)}: {where} in body must not validate the schema (not)",
                )
            )
        return
    results = [validate(sub, value, path) for sub in subs]
    if key == "allOf":
        for res in results:
            out.extend(res)
    elif key == "anyOf" and all(results):
        out.append(
            Cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {where} in body must validate at least one schema (anyOf)",
            )
        )
    elif key == "oneOf" and sum(1 for r in results if not r) != 1:
        out.append(
            Cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: {where} in body must validate one and only one schema (oneOf)",
            )
        )


def _validate_value(schema: Schema, value: Any, path: str, where: str, out: list[Cause]) -> None:
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(_show(v) for v in enum)
        out.append(
            Cause("FieldValueNotSupported", path, f"Unsupported value: {_show(value)}: supported values: {supported}")
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(schema, value, path, where, out)
    elif isinstance(value, str):
        max_length = schema.get("maxLength")
        if max_length is not None and len(value) > max_length:
            out.append(Cause("FieldValueTooLong", path, f"Too long: may not be more than {max_length} bytes"))
        min_length = schema.get("minLength")
        if min_length is not None and len(value) < min_length:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_show(value)}: {where} in body should be at least {min_length} chars long",
                )
            )
        pattern = schema.get("pattern")
        if pattern is not None and _regex(pattern).search(value) is None:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_show(value)}: {where} in body should match '{pattern}'",
                )
            )


def _validate_number(schema: Schema, value: float, path: str, where: str, out: list[Cause]) -> None:
    shown = _show(value)
    minimum = schema.get("minimum")
    if minimum is not None:
        if schema.get("exclusiveMinimum") is True and value <= minimum:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {shown}: {where} in body should be greater than {_show(minimum)}",
                )
            )
        elif value < minimum:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {shown}: {where} in body should be greater than or equal to {_show(minimum)}",
                )
            )
    maximum = schema.get("maximum")
    if maximum is not None:
        if schema.get("exclusiveMaximum") is True and value >= maximum:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {shown}: {where} in body should be less than {_show(maximum)}",
                )
            )
        elif value > maximum:
            out.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {shown}: {where} in body should be less than or equal to {_show(maximum)}",
                )
            )
    multiple = schema.get("multipleOf")
    if multiple and value % multiple:
        out.append(
            Cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {shown}: {where} in body should be a multiple of {_show(multiple)}",
            )
        )


def _validate_object(schema: Schema, value: dict[str, Any], path: str, out: list[Cause], *, root: bool) -> None:
    where = path or "<root>"
    for key in schema.get("required") or ():
        if key not in value:
            out.append(Cause("FieldValueRequired", _child(path, key), "Required value"))
    max_props = schema.get("maxProperties")
    if max_props is not None and len(value) > max_props:
        out.append(Cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {max_props} items"))
    min_props = schema.get("minProperties")
    if min_props is not None and len(value) < min_props:
        out.append(
            Cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {len(value)}: {where} in body should have at least {min_props} properties",
            )
        )
    props: dict[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if root and key in _ROOT_KEEP and key not in props:
            continue
        if root and key == "metadata":
            # ObjectMeta is validated by the generic metadata rules, not by the CRD schema.
            continue
        sub = props.get(key)
        if sub is not None:
            _validate(sub, item, _child(path, key), out)
        elif isinstance(additional, dict):
            _validate(additional, item, f"{path}[{key}]" if path else key, out)


def _validate_array(schema: Schema, value: list[Any], path: str, out: list[Cause]) -> None:
    where = path or "<root>"
    max_items = schema.get("maxItems")
    if max_items is not None and len(value) > max_items:
        out.append(Cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {max_items} items"))
    min_items = schema.get("minItems")
    if min_items is not None and len(value) < min_items:
        out.append(
            Cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {len(value)}: {where} in body should have at least {min_items} items",
            )
        )
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set" or schema.get("uniqueItems"):
        seen: set[bytes] = set()
        for i, item in enumerate(value):
            encoded = codec.encode(item)
            if encoded in seen:
                out.append(Cause("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {_show(item)}"))
            seen.add(encoded)
    elif list_type == "map":
        keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
        seen_keys: set[bytes] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            identity = codec.encode([item.get(k) for k in keys])
            if identity in seen_keys:
                shown = _show({k: item.get(k) for k in keys})
                out.append(Cause("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {shown}"))
            seen_keys.add(identity)
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, f"{path}[{i}]", out)
