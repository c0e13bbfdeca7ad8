"""Values the chart tests render with: each case of the matrix exercises what some values promise."""

from __future__ import annotations

from typing import Any

DEV: dict[str, Any] = {
    "watch": {"replicas": 1},
    "applier": {"replicas": 1},
    "prober": {"replicas": 1},
    "reconciler": {"replicas": 1, "autoscaling": {"enabled": False}},
    "status": {"replicas": 1},
    "nats": {
        "replicas": 1,
        "persistence": {"size": "1Gi"},
        "jetstream": {"maxFileStore": "900M", "maxMemoryStore": "128M"},
    },
}
"""The values of a development cluster: what ``deploy/overlays/dev`` renders."""

MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "dev": DEV,
    "single-namespace": {"singleNamespaceInstall": True},
    "watch-namespaces": {"watchNamespace": ["team-a", "team-b"]},
    "external-nats": {
        "nats": {
            "enabled": False,
            "external": {"url": "tls://nats-a.example:4443,tls://nats-b.example:4443"},
            "streamReplicas": 3,
            "auth": {"secretName": "shared-nats-users"},
        }
    },
    "external-nats-plain": {
        "nats": {
            "enabled": False,
            "external": {"url": "nats://nats.example"},
            "streamReplicas": 1,
            "tls": {"enabled": False},
        }
    },
    "replicas": {
        "watch": {"replicas": 3},
        "applier": {"replicas": 4},
        "prober": {"replicas": 1},
        "reconciler": {"replicas": 6, "autoscaling": {"enabled": False}},
        "status": {"replicas": 1},
        "nats": {"replicas": 5},
        "partitions": 32,
    },
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}},
    "cert-manager": {"nats": {"tls": {"certManager": {"enabled": True, "issuerRef": {"name": "raybus-ca"}}}}},
    "tls-off": {"nats": {"tls": {"enabled": False}}},
    "operator": {
        "image": {"repository": "registry.example/raybus", "tag": "0.2.0", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry-login"}],
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "status": {"nodeSelector": {"pool": "db-access"}},
        "featureGates": [
            {"name": "RayCronJob", "enabled": True},
            {"name": "RayClusterStatusConditions", "enabled": False},
        ],
        "logLevel": "DEBUG",
        "applier": {"qps": 0, "burst": 400, "resultBatches": True},
    },
}
