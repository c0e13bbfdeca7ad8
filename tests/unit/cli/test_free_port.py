"""Free loopback ports: from this process's share of the range, never the same one twice in a row."""

from __future__ import annotations

import os

from services.cli.up import FREE_PORTS, PORT_SHARES, free_port


def test_ports_come_from_this_process_s_share_and_are_not_handed_out_again() -> None:
    size = len(FREE_PORTS) // PORT_SHARES
    start = FREE_PORTS.start + os.getpid() % PORT_SHARES * size
    chosen = [free_port() for _ in range(200)]
    assert len(set(chosen)) == len(chosen)  # none bound yet, and still none chosen twice
    assert all(start <= port < start + size for port in chosen)
