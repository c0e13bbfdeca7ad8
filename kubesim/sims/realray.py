"""A real Ray head for a head Pod: ``ray start --head --block`` with its own temp dir and ports.

kubesim runs in one network namespace, so the ports a Pod would own (GCS 6379, dashboard 8265, agent
52365, Serve 8000, metrics 8080, ...) are replaced by free loopback ports chosen per head, and
:meth:`RealRayHead.url_for` maps a container port to where the process really listens. The Serve HTTP port
cannot be set on the command line (Ray Serve's default is a constant 8000): :meth:`RealRayHead.adapt_body`
writes it into the ``http_options`` of every Serve config PUT the kubesim proxy forwards, so two heads
(a RayService upgrade) each serve on a port of their own.

The head runs the ``ray`` of kubesim's own Python environment (``pip install 'raybus[realray]'``); job
entrypoints run on it as real commands. It is stopped through its own process group and process tree
(:mod:`kubesim.sims.processes`), never with ``ray stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kubesim.sims.processes import stop_tree
from schema.ray import conventions

logger = logging.getLogger(__name__)

WORKER_PORTS = 40
"""Ports handed to the head's worker processes (one each: drivers, Serve controller, proxy, replicas)."""
HEALTH_TIMEOUT = 180.0
"""Longest wait for a new head to answer its health checks (about 10 s on an idle machine)."""
HEALTH_POLL = 0.2
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""A small object store: the heads of the tests move no data, and memory is shared by several heads."""
DEFAULT_NUM_CPUS = 2
"""Logical CPUs of a head whose ``ray start`` command names none."""
_CLUSTER_ONLY_ENV = frozenset({"RAY_ADDRESS", "RAY_IP", "RAY_PORT", "RAY_REDIS_ADDRESS", "RAY_USE_TLS"})
"""Container env that points at in-cluster addresses (the head's own ports differ here)."""
_CHECK_TIMEOUT = aiohttp.ClientTimeout(total=5)


class RealRayUnavailableError(RuntimeError):
    """Ray is not installed in kubesim's Python environment, or a head did not come up."""


def ray_executable() -> str:
    """The ``ray`` command beside kubesim's Python interpreter.

    Raises:
        RealRayUnavailableError: Ray is not installed there.
    """
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if found is None:
        raise RealRayUnavailableError("real Ray heads need Ray: pip install 'raybus[realray]'")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True, kw_only=True)
class HeadPorts:
    """Where one real head listens (all on 127.0.0.1)."""

    gcs: int
    dashboard: int
    dashboard_grpc: int
    agent_http: int
    agent_grpc: int
    client: int
    node_manager: int
    object_manager: int
    metrics: int
    runtime_env_agent: int
    serve: int
    workers: tuple[int, ...]

    @classmethod
    def allocate(cls) -> HeadPorts:
        """A fresh set of free ports."""
        ports = free_ports(11 + WORKER_PORTS)
        return cls(
            gcs=ports[0],
            dashboard=ports[1],
            dashboard_grpc=ports[2],
            agent_http=ports[3],
            agent_grpc=ports[4],
            client=ports[5],
            node_manager=ports[6],
            object_manager=ports[7],
            metrics=ports[8],
            runtime_env_agent=ports[9],
            serve=ports[10],
            workers=tuple(ports[11:]),
        )

    def for_container_port(self, port: int) -> int | None:
        """The real port behind a head container port (HTTP ports only)."""
        return {
            conventions.DEFAULT_DASHBOARD_PORT: self.dashboard,
            conventions.DEFAULT_DASHBOARD_AGENT_PORT: self.agent_http,
            conventions.DEFAULT_SERVE_PORT: self.serve,
            conventions.DEFAULT_METRICS_PORT: self.metrics,
        }.get(port)


def num_cpus_of(container: Mapping[str, Any]) -> int:
    """The ``--num-cpus`` of a head container's ``ray start`` command (KubeRay writes rayStartParams there)."""
    words = " ".join(str(p) for p in (container.get("command") or []) + (container.get("args") or [])).split()
    for index, word in enumerate(words):
        value = None
        if word.startswith("--num-cpus="):
            value = word.partition("=")[2]
        elif word == "--num-cpus" and index + 1 < len(words):
            value = words[index + 1]
        if value is not None:
            with contextlib.suppress(ValueError):
                return max(0, round(float(value.strip("'\""))))
    return DEFAULT_NUM_CPUS


def head_command(ray: str, ports: HeadPorts, temp_dir: Path, *, num_cpus: int) -> list[str]:
    """The ``ray start --head --block`` command line of a head."""
    return [
        ray,
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--port={ports.gcs}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={ports.dashboard}",
        f"--dashboard-agent-listen-port={ports.agent_http}",
        f"--dashboard-agent-grpc-port={ports.agent_grpc}",
        f"--ray-client-server-port={ports.client}",
        f"--node-manager-port={ports.node_manager}",
        f"--object-manager-port={ports.object_manager}",
        f"--metrics-export-port={ports.metrics}",
        f"--runtime-env-agent-port={ports.runtime_env_agent}",
        f"--worker-port-list={','.join(str(p) for p in ports.workers)}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        f"--temp-dir={temp_dir}",
    ]


def head_environment(container_env: Mapping[str, str]) -> dict[str, str]:
    """The head process's environment: kubesim's own, then the container's (token auth, ``PYTHONPATH``, Ray
    settings), except what names in-cluster addresses or certificates that do not exist here."""
    env = dict(os.environ)
    env.update({k: v for k, v in container_env.items() if k not in _CLUSTER_ONLY_ENV and not k.startswith("RAY_TLS_")})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # The test heads run no drivers of their own: do not prestart idle workers (memory).
    env["RAY_prestart_worker_first_driver"] = "0"
    for key in _CLUSTER_ONLY_ENV:
        env.pop(key, None)
    return env


class RealRayHead:
    """One real Ray head process."""

    def __init__(self, *, container: Mapping[str, Any], env: Mapping[str, str], token: str | None) -> None:
        self.ports = HeadPorts.allocate()
        self._num_cpus = num_cpus_of(container)
        self._env = head_environment(env)
        self._token = token
        # Short: Ray's Unix sockets live under it and their paths are limited to about 100 characters.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="krh-", dir="/tmp"))
        self._process: asyncio.subprocess.Process | None = None
        self.healthy = False
        self.started_at: float | None = None
        self.healthy_after: float | None = None
        """Seconds from ``ray start`` to the first passing health checks."""

    @property
    def running(self) -> bool:
        """True while the process runs."""
        return self._process is not None and self._process.returncode is None

    @property
    def pid(self) -> int | None:
        """The ``ray start`` process id (the group id of the head's processes)."""
        return self._process.pid if self._process is not None else None

    @property
    def url(self) -> str:
        """The dashboard's base URL."""
        return f"http://127.0.0.1:{self.ports.dashboard}"

    def url_for(self, container_port: int) -> str | None:
        """Base URL of a head container port, or None for a port that is not HTTP."""
        real = self.ports.for_container_port(container_port)
        return None if real is None else f"http://127.0.0.1:{real}"

    async def start(self) -> None:
        """Start the head and wait until its dashboard and raylet answer their health checks.

        Raises:
            RealRayUnavailableError: Ray is missing, or the head exited or never became healthy.
        """
        command = head_command(ray_executable(), self.ports, self.temp_dir, num_cpus=self._num_cpus)
        log = (self.temp_dir / "ray-start.log").open("ab")
        try:
            self.started_at = time.monotonic()
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        finally:
            log.close()
        logger.info("kubesim: real Ray head pid %s, dashboard %s", self._process.pid, self.url)
        await self._wait_healthy()

    async def _wait_healthy(self) -> None:
        headers = {"x-ray-authorization": f"Bearer {self._token}"} if self._token else {}
        checks = (f"{self.url}/api/gcs_healthz", f"http://127.0.0.1:{self.ports.agent_http}/api/local_raylet_healthz")
        deadline = time.monotonic() + HEALTH_TIMEOUT
        async with aiohttp.ClientSession(headers=headers, timeout=_CHECK_TIMEOUT) as session:
            while time.monotonic() < deadline:
                if not self.running:
                    raise RealRayUnavailableError(f"the Ray head exited; see {self.temp_dir / 'ray-start.log'}")
                if all([await _answers(session, url) for url in checks]):
                    self.healthy = True
                    self.healthy_after = time.monotonic() - (self.started_at or 0.0)
                    logger.info("kubesim: real Ray head %s healthy after %.1fs", self.url, self.healthy_after)
                    return
                await asyncio.sleep(HEALTH_POLL)
        raise RealRayUnavailableError(f"the Ray head at {self.url} was not healthy after {HEALTH_TIMEOUT:g}s")

    async def stop(self) -> None:
        """Stop the head's whole process tree and remove its temp dir (idempotent). A cancelled caller still
        waits for the end: a head is never left half-stopped (running, unreaped, or with its temp dir)."""
        process, self._process = self._process, None
        self.healthy = False
        finishing = asyncio.ensure_future(self._finish(process))
        try:
            await asyncio.shield(finishing)
        except asyncio.CancelledError:
            await finishing
            raise

    async def _finish(self, process: asyncio.subprocess.Process | None) -> None:
        if process is not None:
            code = await stop_tree(process)
            logger.info("kubesim: real Ray head %s stopped (exit %s)", self.url, code)
        await asyncio.to_thread(shutil.rmtree, self.temp_dir, True)

    def adapt_body(self, method: str, path: str, body: bytes) -> bytes:
        """Put this head's Serve port into a Serve config PUT (other requests pass unchanged)."""
        if method != "PUT" or path.rstrip("/") != "/api/serve/applications" or not body:
            return body
        try:
            config = json.loads(body)
        except ValueError:
            return body
        if not isinstance(config, dict):
            return body
        options = config.get("http_options")
        options = dict(options) if isinstance(options, dict) else {}
        options["port"] = self.ports.serve
        options.setdefault("host", "127.0.0.1")
        config["http_options"] = options
        return json.dumps(config).encode()


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            return response.status == 200 and "success" in await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return False
