"""The simulated node's Pod network: the address range Pod IPs come from, and whether this machine holds it.

Pods get IPs of :data:`POD_NETWORK`. Normally nothing listens there: kubesim's proxies lead to the heads'
loopback ports. When the range is local to this machine (a ``local`` route sends the whole range to the
loopback device: ``ip route add local 10.244.0.0/16 dev lo``, which ``scripts/provision`` adds), every
address of it can be bound and dialled here without being a loopback address, so a simulated head can
listen on its Pod's IP and the real ports (``SimOptions.heads_on_pod_ips``). A real kube-apiserver proxies
to such an address; it refuses loopback and link-local ones. Several simulators of one machine then share
the range: each holds the IPs it gives out (:func:`claim`), so no two Pods get the same one.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

from schema.ray import conventions

POD_NETWORK: Final = ipaddress.IPv4Network("10.244.0.0/16")
"""Where simulated Pod IPs come from (the range kubeadm-installed flannel uses)."""
_PROBE_ADDRESS: Final = str(POD_NETWORK.network_address + 1)
"""An address of the range no Pod gets (:func:`pod_ip` starts at ``.2``), bound once to test the range."""
_HOSTS_PER_BLOCK: Final = 250
CLAIM_PORT: Final = conventions.DEFAULT_GCS_PORT
"""The port a claimed Pod IP is held on: a real head's GCS port, which no simulated head serves (GCS does
not speak HTTP)."""


def pod_ip(n: int) -> str:
    """The ``n``-th Pod IP (n ≥ 1), 250 per /24 from ``.2``."""
    base = POD_NETWORK.network_address + 256 * (n // _HOSTS_PER_BLOCK) + n % _HOSTS_PER_BLOCK + 2
    if base not in POD_NETWORK:
        raise ValueError(f"the Pod network {POD_NETWORK} has no address left for Pod {n}")
    return str(base)


def local_route_command() -> str:
    """The command (as root) that makes :data:`POD_NETWORK` local to this machine."""
    return f"ip route add local {POD_NETWORK} dev lo"


def pod_network_problem() -> str | None:
    """Why simulated heads cannot listen on Pod IPs here (the range is not local), or None when they can."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((_PROBE_ADDRESS, 0))
    except OSError as error:
        return (
            f"the Pod network {POD_NETWORK} is not local to this machine ({_PROBE_ADDRESS} cannot be bound: "
            f"{error.strerror}); as root: {local_route_command()} (scripts/provision adds it)"
        )
    return None


def claim(ip: str) -> socket.socket | None:
    """Hold a Pod IP for this process: a socket listening on its :data:`CLAIM_PORT` (closing it lets go).
    None when another process holds it already, or the address is not local. Simulators of one machine
    allocate from the same range; a claim makes each pass by the addresses another one gave out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((ip, CLAIM_PORT))
        sock.listen(1)
    except OSError:
        sock.close()
        return None
    return sock
