"""``raybus up --nats-nodes N``: a JetStream cluster of N nats-servers on loopback instead of one.

Each node gets its own client and route ports, a configuration naming it and routing to every node (as
deploy/'s StatefulSet does), and its JetStream store under ``STATE/nats/<node>``. The stack then runs
``raybus topology --stream-replicas N`` once the cluster answers, and the services with
``--no-ensure-topology`` (a service would otherwise set its own replica count on the streams). It is for
the stack on kubesim: with ``--kubeconfig`` or ``--kube real`` the stack's bus stays one nats-server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from services.runtime.private import write_private

CLUSTER_NAME = "raybus-up"


@dataclass(frozen=True)
class NatsNode:
    """One node to start: its name, client port and command line."""

    name: str
    port: int
    argv: list[str]


def cluster_nodes(binary: str, store: Path, ports: list[int], route_ports: list[int]) -> list[NatsNode]:
    """The nodes of a cluster on ``ports`` (clients) and ``route_ports`` (routes), their configurations
    written under ``store``."""
    routes = ", ".join(json.dumps(f"nats-route://127.0.0.1:{port}") for port in route_ports)
    nodes = []
    for index, (port, route_port) in enumerate(zip(ports, route_ports, strict=True)):
        name = f"n{index + 1}"
        config = store / f"{name}.conf"
        text = (
            f"server_name: {name}\n"
            f"cluster {{ name: {CLUSTER_NAME}, listen: 127.0.0.1:{route_port}, routes: [{routes}] }}\n"
        )
        write_private(config, text.encode())
        argv = [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store / name), "-c", str(config)]
        nodes.append(NatsNode(name, port, argv))
    return nodes
