"""Name rules every kind's metadata validation shares (KubeRay's ``utils/validation.go`` uses
Kubernetes' ``validation.IsDNS1035Label`` for RayCluster, RayJob and RayService names)."""

from __future__ import annotations

import re
from typing import Final

DNS1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_MESSAGE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def dns1035_errors(name: str) -> list[str]:
    """Go's ``validation.IsDNS1035Label`` error list (empty when ``name`` is valid)."""
    errors: list[str] = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not DNS1035.match(name):
        errors.append(DNS1035_MESSAGE)
    return errors
