"""``raybus get rayclusters|rayjobs|rayservices|raycronjobs [-n NS | -A] [-o wide|json]``.

Lists the custom resources from the Kubernetes API, as the KubeRay kubectl plugin does (the CLI is
user-side: it reads with the user's own kubeconfig, never with the watcher's credentials). The kubeconfig
is ``--kubeconfig``, else ``KUBECONFIG``, else the one of ``raybus up``'s stack (``--state-dir``), else
``~/.kube/config``. Without ``-n``/``-A`` the kubeconfig context's namespace (``default`` if none).
``-o json`` prints a kubectl-style ``List``. Exit codes: 0 listed (also when none exist), 2 usage error or
an unreachable or refusing API server, each one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from schema.crd import KINDS
from schema.ray.conventions import GROUP, VERSION
from services.cli.columns import render_table
from services.runtime import endpoints
from services.runtime.errors import PermanentError, RetryableError

KUBECONFIG_ENV = "KUBECONFIG"
_ALIASES = {
    alias: kind.kind
    for kind in KINDS
    for alias in (
        kind.plural,
        kind.kind.lower(),
        kind.kind.lower().removeprefix("ray"),
        kind.plural.removeprefix("ray"),
    )
}
"""``rayclusters``, ``raycluster``, ``cluster``, ``clusters`` (the plugin's ``kubectl ray get cluster``) ..."""
_PLURALS = {kind.kind: kind.plural for kind in KINDS}


def parser() -> argparse.ArgumentParser:
    """Flags of ``raybus get``."""
    p = argparse.ArgumentParser(prog="raybus get", description="List ray.io custom resources with KubeRay's columns.")
    p.add_argument("kind", help="rayclusters, rayjobs, rayservices or raycronjobs (singular or short: cluster)")
    p.add_argument("name", nargs="?", help="only this object")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", choices=("wide", "json"), help="wide: more columns; json: a kubectl List")
    p.add_argument("--kubeconfig", help="kubeconfig [KUBECONFIG, else the stack of `raybus up`, else ~/.kube/config]")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--state-dir", help="where `raybus up` keeps endpoints.json [RAYBUS_STATE_DIR, .raybus]")
    return p


def parse_kind(text: str) -> str:
    """The kind ``text`` names.

    Raises:
        PermanentError: not a ray.io kind.
    """
    kind = _ALIASES.get(text.lower())
    if kind is None:
        raise PermanentError(
            f'the server doesn\'t have a resource type "{text}" (one of {", ".join(_PLURALS.values())})'
        )
    return kind


def kubeconfig_path(flag: str | None, state_dir: str | None, env: Mapping[str, str]) -> str | None:
    """The kubeconfig file (None: the client's own default, ``KUBECONFIG`` or ``~/.kube/config``)."""
    if flag:
        return flag
    if env.get(KUBECONFIG_ENV):
        return None
    return endpoints.read_endpoints(endpoints.state_dir(state_dir, env)).get(endpoints.KUBECONFIG)


def _api(path: str | None, context: str | None) -> tuple[client.CustomObjectsApi, str]:
    try:
        api_client = config.new_client_from_config(config_file=path, context=context)  # type: ignore[no-untyped-call]
        contexts, current = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as exc:
        raise PermanentError(f"no usable kubeconfig ({path or 'KUBECONFIG or ~/.kube/config'}): {exc}") from exc
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    namespace = str((chosen or {}).get("context", {}).get("namespace") or "default")
    return client.CustomObjectsApi(api_client), namespace


def list_objects(
    api: client.CustomObjectsApi, kind: str, *, namespace: str | None, name: str | None
) -> list[dict[str, Any]]:
    """The objects of ``kind`` in ``namespace`` (every namespace when None), sorted by namespace and name.

    Raises:
        PermanentError: the API server refused (unknown resource, forbidden).
        RetryableError: the API server did not answer.
    """
    plural = _PLURALS[kind]
    selector = f"metadata.name={name}" if name else ""
    try:
        if namespace is None:
            answer = api.list_cluster_custom_object(GROUP, VERSION, plural, field_selector=selector)
        else:
            answer = api.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, field_selector=selector)
    except ApiException as exc:
        reason = exc.reason or ""
        if exc.status == 404:
            raise PermanentError(f'the server doesn\'t have a resource type "{plural}"') from exc
        raise PermanentError(f"the API server answered {exc.status} {reason} listing {plural}") from exc
    except Exception as exc:  # urllib3's connection errors have no common base with the client's
        host = api.api_client.configuration.host
        raise RetryableError(f"cannot reach the Kubernetes API at {host}: {type(exc).__name__}") from exc
    items: list[dict[str, Any]] = list(answer["items"] if isinstance(answer, dict) else [])
    return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))


def run(args: argparse.Namespace, *, env: Mapping[str, str], out: TextIO, err: TextIO, now: datetime) -> int:
    """``raybus get`` with parsed arguments; returns the exit code."""
    try:
        kind = parse_kind(args.kind)
        api, context_namespace = _api(kubeconfig_path(args.kubeconfig, args.state_dir, env), args.context)
        try:
            namespace = None if args.all_namespaces else (args.namespace or context_namespace)
            objects = list_objects(api, kind, namespace=namespace, name=args.name)
        finally:
            api.api_client.close()
    except (PermanentError, RetryableError) as exc:
        err.write(f"raybus get: {exc}\n")
        return 2
    if args.output == "json":
        document = {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}}
        out.write(json.dumps(document, indent=4) + "\n")
        return 0
    if not objects:
        where = "any namespace" if namespace is None else f"{namespace} namespace"
        err.write(f"No resources found in {where}.\n")
        return 0
    out.write(render_table(kind, objects, now=now, wide=args.output == "wide") + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``raybus get ...`` (the CLI dispatches here with the arguments after ``get``)."""
    # The client's connection retries end in one clear error; urllib3's warnings would only repeat it.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    args = parser().parse_args(argv)
    return run(args, env=os.environ, out=sys.stdout, err=sys.stderr, now=datetime.now(UTC))
