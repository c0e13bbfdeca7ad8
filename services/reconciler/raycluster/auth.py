"""The operator-generated auth token Secret (``authOptions.mode: token``, docs/behaviour.md#4.1).

Role: build the Secret CheckName(``<c>``) that holds ``auth_token``, which every Ray container reads
through ``RAY_AUTH_TOKEN`` (``pod_bodies``).

Design: KubeRay fills ``stringData.auth_token`` with base64 of 32 random bytes. ``reconcile`` may not
draw randomness (it must replay exactly), and deriving a token from anything the snapshot carries would make it
guessable. So the body carries no token at all; it is annotated ``raybus.io/generate: auth_token`` and
the **applier** fills ``stringData.auth_token`` with fresh random bytes at create time (AlreadyExists
means a token was generated before: done). Rejected: hashing the cluster UID (public), a secret seed in
``OperatorConfig`` (the reconciler would then hold key material and replay logs would leak tokens).

Not here: user-provided Secrets (``secretName``) and K8s token auth, which need no Secret.
"""

from __future__ import annotations

from typing import Any

from schema.messages import GENERATE_ANNOTATION
from schema.ray import conventions
from services.reconciler.raycluster import model, names, pod_bodies
from services.reconciler.raycluster.model import ClusterView


def needs_auth_secret(view: ClusterView) -> bool:
    """Token auth with an operator-managed Secret (no ``secretName``, K8s token auth off)."""
    spec = view.spec
    options = spec.auth_options
    return (
        model.token_auth_enabled(spec)
        and not (options is not None and options.secret_name)
        and not model.k8s_token_auth_enabled(spec)
    )


def auth_secret(view: ClusterView) -> dict[str, Any]:
    """The Secret body, with the generation request for the applier."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.auth_secret_name(view.name),
            "namespace": view.namespace,
            "labels": {conventions.LABEL_CLUSTER: view.name},
            "annotations": {GENERATE_ANNOTATION: conventions.AUTH_TOKEN_SECRET_KEY},
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
    }
