"""Strategic merge patch for built-in kinds, with the merge keys of the fields controllers touch.

Real SMP reads patch strategies from the Go types; kubesim uses one table keyed by field name
(containers/env/volumes/... merge by name, volumeMounts by mountPath, conditions by type, container
ports by containerPort, Service ports by port, finalizers as a set). Lists not in the table are
replaced, as atomic lists are. Directives supported: ``$patch: replace|delete`` on maps and list
elements, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` and ``$setElementOrder/<f>`` (the ones
``kubectl apply`` sends). Custom resources never get here: SMP on them is a 415, as on a real server.
"""

from __future__ import annotations

from typing import Any

_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "readinessGates": "conditionType",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
_SET_LISTS = frozenset({"finalizers"})

_DELETE = object()


def _merge_key(field: str, patch_items: list[Any], original: list[Any]) -> str | None:
    if field == "ports":
        sample = [i for i in (*patch_items, *original) if isinstance(i, dict)]
        return "containerPort" if any("containerPort" in i for i in sample) else "port"
    return _MERGE_KEYS.get(field)


def _clean(value: Any) -> Any:
    """A patch value stripped of directives, for values that have no original to merge into."""
    if isinstance(value, dict):
        merged = _merge_map({}, value)
        return {} if merged is _DELETE else merged
    if isinstance(value, list):
        return [_clean(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def _merge_list(original: list[Any], patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_clean(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    result = list(original)
    for item in patch:
        if not isinstance(item, dict):
            if item not in result:
                result.append(item)
            continue
        identity = item.get(key)
        position = next(
            (n for n, existing in enumerate(result) if isinstance(existing, dict) and existing.get(key) == identity),
            None,
        )
        if item.get("$patch") == "delete":
            result = [e for e in result if not (isinstance(e, dict) and e.get(key) == identity)]
        elif position is None:
            result.append(_clean(item))
        else:
            merged = _merge_map(result[position], item)
            if merged is _DELETE:
                del result[position]
            else:
                result[position] = merged
    return result


def _order(values: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def identity(value: Any) -> Any:
        return value.get(key) if key is not None and isinstance(value, dict) else value

    wanted = [identity(o) for o in order]
    rank = {repr(v): n for n, v in enumerate(wanted)}
    return sorted(values, key=lambda v: rank.get(repr(identity(v)), len(rank)))


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: _clean(v) for k, v in patch.items() if k != "$patch"}
    result = dict(original)
    orders: dict[str, list[Any]] = {}
    for field, value in patch.items():
        if field in ("$patch", "$retainKeys"):
            continue
        if field.startswith("$setElementOrder/"):
            orders[field.partition("/")[2]] = value if isinstance(value, list) else []
            continue
        if field.startswith("$deleteFromPrimitiveList/"):
            target = field.partition("/")[2]
            drop = value if isinstance(value, list) else []
            result[target] = [v for v in result.get(target) or () if v not in drop]
            continue
        if value is None:
            result.pop(field, None)
            continue
        current = result.get(field)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value)
            if merged is _DELETE:
                result.pop(field, None)
            else:
                result[field] = merged
        elif isinstance(value, list) and field in _SET_LISTS:
            existing = current if isinstance(current, list) else []
            result[field] = existing + [v for v in value if v not in existing]
        elif isinstance(value, list):
            existing = current if isinstance(current, list) else []
            key = _merge_key(field, value, existing)
            result[field] = _merge_list(existing, value, key) if key is not None else _clean(value)
        else:
            result[field] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            key = _merge_key(field, order, result[field])
            result[field] = _order(result[field], order, key)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def strategic_merge_patch(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a strategic merge patch to a built-in object; returns a new dict (shares unchanged parts)."""
    merged = _merge_map(original, patch)
    return {} if merged is _DELETE else dict(merged)
