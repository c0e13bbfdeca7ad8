"""Where ``raybus up``'s stack runs: ``<state dir>/endpoints.json``, written by ``raybus up``, read by the tools.

The state dir is ``--state-dir``, else ``RAYBUS_STATE_DIR``, else ``.raybus``. A tool's own flag or
variable (``--nats-url``/``RAYBUS_NATS_URL``, ``--status-url``/``RAYBUS_STATUS_URL``, ...) wins over the
file, and the file over the built-in defaults, so the README's commands reach the stack ``raybus up``
started and never a server that merely listens on a default port.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from services.runtime.private import write_private

DEFAULT_STATE_DIR: Final = ".raybus"
STATE_DIR_ENV: Final = "RAYBUS_STATE_DIR"
ENDPOINTS_FILE: Final = "endpoints.json"

NATS_URL: Final = "nats_url"
KUBECONFIG: Final = "kubeconfig"
STATUS_URL: Final = "status_url"
DB_URL: Final = "db_url"


def state_dir(flag: str | None, env: Mapping[str, str] | None = None) -> Path:
    """The state dir: the flag, else ``RAYBUS_STATE_DIR``, else ``.raybus``."""
    env = os.environ if env is None else env
    return Path(flag or env.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def write_endpoints(state: Path, endpoints: Mapping[str, str]) -> Path:
    """Record the stack's endpoints for the tools; returns the file."""
    path = state / ENDPOINTS_FILE
    write_private(path, json.dumps(dict(endpoints), indent=2).encode())  # the NATS URL may hold a password
    return path


def read_endpoints(state: Path) -> dict[str, str]:
    """The recorded endpoints, empty when no stack was started there (or the file is unreadable)."""
    try:
        data = json.loads((state / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str) and v}


def stack_endpoint(
    name: str, *, flag: str | None, env_var: str, state_dir_flag: str | None, env: Mapping[str, str] | None = None
) -> str | None:
    """One endpoint: the flag, else the variable ``env_var``, else the stack's file; None if none names it."""
    env = os.environ if env is None else env
    if flag:
        return flag
    if env.get(env_var):
        return env[env_var]
    return read_endpoints(state_dir(state_dir_flag, env)).get(name)
