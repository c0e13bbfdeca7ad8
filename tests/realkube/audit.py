"""What raybus's ServiceAccounts did on the real API server (its audit log) against what deploy/ grants them.

Each audit line names the user, the verb, the resource (group, resource, subresource) and the authorizer's
decision. A request the authorizer forbade is a permission raybus needed and deploy/ lacks (a 403 for
another reason, such as a proxy to a refused destination, was allowed by RBAC and is not one); a granted
(group, resource, verb) that no request used is a permission deploy/ grants beyond what the run exercised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.deploy.render import render

SERVICE_ACCOUNT_USER = "system:serviceaccount:{namespace}:{name}"
DECISION = "authorization.k8s.io/decision"
"""The audit annotation carrying the authorizer's verdict: ``allow`` or ``forbid``."""


@dataclass(frozen=True, order=True)
class Use:
    """One kind of request: who, which verb, on what."""

    account: str
    verb: str
    group: str
    resource: str
    """``resource`` or ``resource/subresource``."""


@dataclass(frozen=True)
class Request:
    """One audited request of a raybus ServiceAccount."""

    use: Use
    name: str
    code: int
    decision: str


def requests(log: Path, namespace: str, accounts: Iterable[str]) -> Iterator[Request]:
    """The resource requests (not discovery's non-resource URLs) of ``accounts`` in ``log``."""
    users = {SERVICE_ACCOUNT_USER.format(namespace=namespace, name=a): a for a in accounts}
    with log.open() as lines:
        for line in lines:
            entry: dict[str, Any] = json.loads(line)
            account = users.get(entry["user"]["username"])
            ref = entry.get("objectRef")
            if account is None or not ref or "resource" not in ref:
                continue
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            yield Request(
                use=Use(account, entry["verb"], ref.get("apiGroup", ""), resource),
                name=ref.get("name", ""),
                code=int(entry.get("responseStatus", {}).get("code", 0)),
                decision=entry.get("annotations", {}).get(DECISION, ""),
            )


def granted(namespace: str, accounts: Iterable[str]) -> set[Use]:
    """Every (account, verb, group, resource) deploy/base's Roles and ClusterRoles give ``accounts``."""
    objects = render("base")
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    wanted = set(accounts)
    uses: set[Use] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding.get("subjects", []):
            if subject["kind"] != "ServiceAccount" or subject.get("namespace") != namespace:
                continue
            if subject["name"] not in wanted:
                continue
            for rule in role.get("rules", []):
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            uses.add(Use(subject["name"], verb, group, resource))
    return uses


@dataclass(frozen=True)
class Report:
    """Requests the authorizer forbade, and permissions no request used."""

    forbidden: list[Request]
    refused: list[Request]
    """Every request answered 403, forbidden by the authorizer or not."""
    unused: list[Use]
    used: list[Use]

    def text(self) -> str:
        """The report as lines for a person."""
        rows = [f"raybus's ServiceAccounts on the real API server: {len(self.used)} kinds of request allowed"]
        rows.append(f"forbidden by the authorizer: {len(self.forbidden)}")
        rows += [
            f"  {r.use.account} {r.use.verb} {r.use.group or 'core'}/{r.use.resource} {r.name}" for r in self.forbidden
        ]
        rows.append(f"answered 403 although allowed: {len(self.refused) - len(self.forbidden)}")
        rows += [
            f"  {r.use.account} {r.use.verb} {r.use.group or 'core'}/{r.use.resource} {r.name}"
            for r in self.refused
            if r.decision != "forbid"
        ]
        rows.append(f"granted by deploy/ and not used in this run: {len(self.unused)}")
        rows += [f"  {u.account} {u.verb} {u.group or 'core'}/{u.resource}" for u in self.unused]
        rows.append("used:")
        rows += [f"  {u.account} {u.verb} {u.group or 'core'}/{u.resource}" for u in self.used]
        return "\n".join(rows)


def report(log: Path, namespace: str, accounts: Iterable[str]) -> Report:
    """Compare what ``accounts`` did (``log``) with what deploy/ grants them."""
    accounts = list(accounts)
    seen = list(requests(log, namespace, accounts))
    used = {r.use for r in seen if r.decision == "allow"}
    return Report(
        forbidden=[r for r in seen if r.decision == "forbid"],
        refused=[r for r in seen if r.code == 403],
        unused=sorted(granted(namespace, accounts) - used),
        used=sorted(used),
    )
