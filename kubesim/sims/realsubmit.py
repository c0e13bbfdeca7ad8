"""Running a Ray job submitter container for real: its own command line, with the real ``ray`` CLI.

With real Ray heads (``SimOptions.real_ray``) a submitter container (KubeRay's K8sJobMode script, the
SidecarMode ``ray-job-submitter``, a hand-written ``ray job submit``) runs its command as a child process.
The addresses it names (``http://<svc>.<ns>.svc.cluster.local:8265``, ``http://127.0.0.1:8265`` in the head
pod) only exist inside a cluster, so each ``http://host:port`` of the command line and of
``RAY_DASHBOARD_ADDRESS`` / ``RAY_ADDRESS`` is rewritten to the loopback port it resolves to; the rest
(shell, ``python3`` health check, ``ray job status/submit/logs``, exit code) is the real thing. The ``ray``
and ``python3`` found first on ``PATH`` are those of kubesim's own environment.

The program waits until every address resolves (the head may still be starting), runs the command in a
session of its own and, when the pod goes away, stops its whole process tree.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kubesim.sims.processes import stop_tree

logger = logging.getLogger(__name__)

AddressResolver = Callable[[str, int], str | None]
"""(host, port) as seen from the pod → the loopback base URL it reaches now, or None."""

_URL = re.compile(r"http://([A-Za-z0-9.\-]+):(\d+)")
_ADDRESS_ENV = ("RAY_DASHBOARD_ADDRESS", "RAY_ADDRESS")
OUTPUT_TAIL = 4000
"""Characters of the submitter's output kept for the kubesim log when it exits."""


def rewrite_addresses(text: str, resolve: AddressResolver) -> str | None:
    """``text`` with each ``http://host:port`` replaced by where it resolves; None if one does not resolve."""
    unresolved = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unresolved
        url = resolve(match.group(1), int(match.group(2)))
        if url is None:
            unresolved = True
            return match.group(0)
        return url.rstrip("/")

    rewritten = _URL.sub(replace, text)
    return None if unresolved else rewritten


def _rewrite_env(env: Mapping[str, str], resolve: AddressResolver) -> dict[str, str] | None:
    out = dict(env)
    for key in _ADDRESS_ENV:
        value = out.get(key)
        if not value:
            continue
        scheme = "" if value.startswith("http://") else "http://"
        rewritten = rewrite_addresses(scheme + value, resolve)
        if rewritten is None:
            return None
        out[key] = rewritten if scheme == "" else rewritten.removeprefix("http://")
    return out


def submitter_environment(container_env: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: the container's, with kubesim's ``ray``/``python3`` first on ``PATH``."""
    env = {key: value for key, value in os.environ.items() if key in ("HOME", "LANG", "LC_ALL", "TMPDIR")}
    env.update(container_env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


async def run_real_submitter(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    resolve: AddressResolver,
    poll_interval: float,
) -> int:
    """Run a submitter container's command line for real; return its exit code.

    Args:
        argv: the container's ``command`` followed by its ``args``.
        env: its resolved environment.
        resolve: where an address seen from the pod leads now.
        poll_interval: pause between two resolution attempts while the head is not there yet.
    """
    while True:
        rewritten = [rewrite_addresses(part, resolve) for part in argv]
        child_env = _rewrite_env(env, resolve)
        if child_env is not None and all(part is not None for part in rewritten):
            break
        await asyncio.sleep(poll_interval)
    process = await asyncio.create_subprocess_exec(
        *[part for part in rewritten if part is not None],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=submitter_environment(child_env),
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        output = await process.stdout.read()
        code = await process.wait()
    except asyncio.CancelledError:
        # Shielded: the pod's deletion must not leave the submitter running or unreaped.
        stopping = asyncio.ensure_future(stop_tree(process))
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            await stopping
        raise
    tail = output.decode("utf-8", "replace")[-OUTPUT_TAIL:]
    logger.info("kubesim: submitter exited %s; output ends:\n%s", code, tail)
    return code
