"""ObjectMeta validation shared by every kind: names, generateName, labels and annotations.

Only the rules that catch real client bugs are checked (name syntax per kind, label syntax and
length, total annotation size); messages copy ``k8s.io/apimachinery/pkg/util/validation``.
Kind-specific spec validation of built-in kinds is out of scope: kubesim stores their specs as given.
"""

from __future__ import annotations

import re
from typing import Any

from kubesim import codec
from kubesim.errors import Cause
from kubesim.resources import ResourceInfo

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_QUALIFIED = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    f"validation is '{_SUBDOMAIN}')"
)
_LABEL_1123_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    f"validation is '{_LABEL_1123}')"
)
_LABEL_1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    f"regex used for validation is '{_LABEL_1035}')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    f"'12345', regex used for validation is '{_LABEL_VALUE}')"
)
_QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    f"is '{_QUALIFIED}')"
)

# Kinds whose names must be DNS labels rather than subdomains.
_DNS1123_LABEL_KINDS = frozenset({("", "namespaces")})
_DNS1035_LABEL_KINDS = frozenset({("", "services")})
_MAX_ANNOTATIONS_BYTES = 256 * 1024


def _name_rule(info: ResourceInfo) -> tuple[re.Pattern[str], str, int]:
    if info.storage_key in _DNS1035_LABEL_KINDS:
        return re.compile(_LABEL_1035), _LABEL_1035_MSG, 63
    if info.storage_key in _DNS1123_LABEL_KINDS:
        return re.compile(_LABEL_1123), _LABEL_1123_MSG, 63
    return re.compile(_SUBDOMAIN), _SUBDOMAIN_MSG, 253


def validate_name(info: ResourceInfo, name: str, field: str = "metadata.name") -> list[Cause]:
    """Causes for a name the kind does not accept."""
    if info.group == "rbac.authorization.k8s.io":
        # RBAC names are only path segments (system:controller:... names contain ':').
        if "/" in name or "%" in name or name in (".", ".."):
            return [Cause("FieldValueInvalid", field, f"Invalid value: \"{name}\": may not contain '/' or '%'")]
        return []
    pattern, message, limit = _name_rule(info)
    causes: list[Cause] = []
    if len(name) > limit:
        causes.append(
            Cause("FieldValueInvalid", field, f'Invalid value: "{name}": must be no more than {limit} characters')
        )
    if pattern.fullmatch(name) is None:
        causes.append(Cause("FieldValueInvalid", field, f'Invalid value: "{name}": {message}'))
    return causes


def _validate_label_key(key: str, field: str) -> list[Cause]:
    prefix, slash, name = key.rpartition("/")
    causes: list[Cause] = []
    if slash and (not prefix or len(prefix) > 253 or re.fullmatch(_SUBDOMAIN, prefix) is None):
        causes.append(Cause("FieldValueInvalid", field, f'Invalid value: "{key}": prefix part {_SUBDOMAIN_MSG}'))
    if not name or len(name) > 63 or re.fullmatch(_QUALIFIED, name) is None:
        causes.append(Cause("FieldValueInvalid", field, f'Invalid value: "{key}": {_QUALIFIED_MSG}'))
    return causes


def validate_metadata(info: ResourceInfo, meta: dict[str, Any]) -> list[Cause]:
    """Causes for invalid ObjectMeta (name already decided: generateName has been expanded)."""
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        causes.append(Cause("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    elif not isinstance(name, str):
        causes.append(Cause("FieldValueInvalid", "metadata.name", "Invalid value: name must be a string"))
    else:
        causes.extend(validate_name(info, name))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [*causes, Cause("FieldValueInvalid", "metadata.labels", "Invalid value: labels must be a map")]
    for key, value in labels.items():
        causes.extend(_validate_label_key(key, "metadata.labels"))
        if not isinstance(value, str) or len(value) > 63 or re.fullmatch(_LABEL_VALUE, value) is None:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    f"Invalid value: {codec.encode(value).decode()}: {_LABEL_VALUE_MSG}",
                )
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*causes, Cause("FieldValueInvalid", "metadata.annotations", "Invalid value: annotations must be a map")]
    for key, value in annotations.items():
        causes.extend(_validate_label_key(key.lower(), "metadata.annotations"))
        if not isinstance(value, str):
            causes.append(
                Cause("FieldValueInvalid", "metadata.annotations", f"Invalid value: annotation {key} must be a string")
            )
    size = sum(len(k) + len(v) for k, v in annotations.items() if isinstance(v, str))
    if size > _MAX_ANNOTATIONS_BYTES:
        causes.append(
            Cause(
                "FieldValueTooLong",
                "metadata.annotations",
                f"Too long: may not be more than {_MAX_ANNOTATIONS_BYTES} bytes",
            )
        )
    return causes
