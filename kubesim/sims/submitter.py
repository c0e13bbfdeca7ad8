"""Recognising a Ray job submitter in a container's command line (pure parsing, no I/O).

Shapes understood (docs/behaviour.md#5.3):

- KubeRay's K8sJobMode script: ``until <gcs_healthz check> ; do ... ; done ; if ! ray job status --address
  http://A ID >/dev/null 2>&1 ; then ray job submit --address http://A --no-wait [--runtime-env-json J]
  [--metadata-json J] --submission-id ID [--entrypoint-num-cpus F] [--entrypoint-num-gpus F]
  [--entrypoint-resources J] -- ENTRYPOINT ; fi ; ray job logs --address http://A --follow ID``;
- SidecarMode (container ``ray-job-submitter`` in the head pod): the same with a blocking ``ray job submit``
  and no status check / ``--no-wait`` / ``logs --follow``;
- any hand-written ``ray job submit ...`` command (``--opt=value`` forms, ``$VAR``/``$(VAR)`` expanded from
  the container env, e.g. ``sh -c "ray job submit --address=http://$RAY_DASHBOARD_ADDRESS ..."``);
- KubeRay's light-weight submitter image (command ``/submitter``, address and id from env
  ``RAY_DASHBOARD_ADDRESS`` / ``RAY_JOB_SUBMISSION_ID``, entrypoint after ``--`` in args).

The entrypoint is everything after ``--``, up to ``; fi`` when the script checks the status first.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from kubesim.sims.envresolve import expand
from schema.ray import conventions

ExitRule = Literal["logs", "submit", "status"]
"""What the real command's exit code says about the job it followed: ``logs`` (``ray job logs --follow``,
KubeRay's K8sJobMode script) exits 0 whatever the end; ``submit`` (a blocking ``ray job submit``, SidecarMode)
exits 1 only for FAILED; ``status`` (the light-weight ``/submitter``) exits 0 only for SUCCEEDED."""


@dataclass(frozen=True, kw_only=True)
class SubmitterCommand:
    """What a submitter container will do."""

    address: str
    """Dashboard address as written (``http://host:port``)."""
    submission_id: str | None
    entrypoint: str
    runtime_env: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    entrypoint_resources: dict[str, Any] | None = None
    check_status_first: bool = False
    """``if ! ray job status ...``: an existing job is followed, not resubmitted."""
    follow: bool = True
    """Wait for the job to end (blocking submit or ``logs --follow``) and exit by its status."""
    exit_rule: ExitRule = "status"
    """How the command's exit code follows the job's end (see :data:`ExitRule`)."""

    @property
    def host(self) -> str:
        """Host part of the address."""
        return urlsplit(self._url()).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        """Port part of the address (Ray's default dashboard port when it names none)."""
        return urlsplit(self._url()).port or conventions.DEFAULT_DASHBOARD_PORT

    def submit_body(self) -> dict[str, Any]:
        """The ``POST /api/jobs/`` JSON the Ray CLI sends."""
        body: dict[str, Any] = {"entrypoint": self.entrypoint}
        optional: dict[str, Any] = {
            "submission_id": self.submission_id,
            "runtime_env": self.runtime_env,
            "metadata": self.metadata,
            "entrypoint_num_cpus": self.entrypoint_num_cpus,
            "entrypoint_num_gpus": self.entrypoint_num_gpus,
            "entrypoint_memory": self.entrypoint_memory,
            "entrypoint_resources": self.entrypoint_resources,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return body

    def _url(self) -> str:
        return self.address if "://" in self.address else f"http://{self.address}"


_SHELL_ADDRESS = re.compile(r"dashboard_address='([^']*)'")

_VALUE_FLAGS = {
    "--address",
    "--submission-id",
    "--job-id",
    "--runtime-env-json",
    "--metadata-json",
    "--entrypoint-num-cpus",
    "--entrypoint-num-gpus",
    "--entrypoint-memory",
    "--entrypoint-resources",
    "--working-dir",
    "--runtime-env",
    "--headers",
    "--log-style",
    "--log-color",
}


def _json(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    for candidate in (value, _unquote_go(value)):
        try:
            parsed = json.loads(candidate)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


def _unquote_go(value: str) -> str:
    # KubeRay writes the JSON with Go's %q; when shlex left the quoting alone, decode it as a JSON string.
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return value
    return decoded if isinstance(decoded, str) else value


def _number(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _options(tokens: Sequence[str]) -> tuple[dict[str, str], set[str]]:
    values: dict[str, str] = {}
    flags: set[str] = set()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.startswith("--") and "=" in token:
            key, _, value = token.partition("=")
            values[key] = value
        elif token in _VALUE_FLAGS and index + 1 < len(tokens):
            values[token] = tokens[index + 1]
            index += 1
        elif token.startswith("--"):
            flags.add(token)
        index += 1
    return values, flags


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _build(
    values: Mapping[str, str], *, address: str, entrypoint: str, check: bool, follow: bool, exit_rule: ExitRule
) -> SubmitterCommand:
    memory = _number(values.get("--entrypoint-memory"))
    return SubmitterCommand(
        address=values.get("--address", address),
        submission_id=values.get("--submission-id") or values.get("--job-id"),
        entrypoint=entrypoint,
        runtime_env=_json(values.get("--runtime-env-json")),
        metadata=_json(values.get("--metadata-json")),
        entrypoint_num_cpus=_number(values.get("--entrypoint-num-cpus")),
        entrypoint_num_gpus=_number(values.get("--entrypoint-num-gpus")),
        entrypoint_memory=None if memory is None else int(memory),
        entrypoint_resources=_json(values.get("--entrypoint-resources")),
        check_status_first=check,
        follow=follow,
        exit_rule=exit_rule,
    )


def parse_submitter(command: Sequence[str], args: Sequence[str], *, env: Mapping[str, str]) -> SubmitterCommand | None:
    """Recognise a submitter container.

    Args:
        command: the container's ``command``.
        args: the container's ``args``.
        env: its resolved environment (for ``$VAR`` expansion and the light-weight submitter).

    Returns:
        The parsed submitter, or None when the container does not submit a Ray job.
    """
    default_address = (
        env.get("RAY_DASHBOARD_ADDRESS")
        or env.get("RAY_ADDRESS")
        or f"http://127.0.0.1:{conventions.DEFAULT_DASHBOARD_PORT}"
    )
    if command and command[0].rsplit("/", 1)[-1] == "submitter":
        argv = [expand(a, env) for a in args]
        cut = argv.index("--") if "--" in argv else len(argv)
        values, _ = _options(argv[:cut])
        values.setdefault("--submission-id", env.get("RAY_JOB_SUBMISSION_ID", ""))
        return _build(
            values,
            address=default_address,
            entrypoint=" ".join(argv[cut + 1 :]),
            check=True,
            follow=True,
            exit_rule="status",
        )
    script = expand(" ".join([*command, *args]), env)
    at = script.find("ray job submit")
    if at < 0:
        return None
    check = "ray job status" in script[:at]
    segment = script[at + len("ray job submit") :]
    separator = segment.find(" -- ")
    if separator < 0:
        return None
    options_text, rest = segment[:separator], segment[separator + 4 :]
    if check and "; fi" in rest:
        rest = rest[: rest.rfind("; fi")]
    entrypoint = rest.strip().rstrip(";").strip()
    values, flags = _options(_split(options_text))
    if "$" in values.get("--address", ""):
        # Newer KubeRay scripts resolve a shell variable first: dashboard_address='http://...' overridden by
        # ${RAY_DASHBOARD_ADDRESS:-...}; do the same instead of running a shell.
        literal = _SHELL_ADDRESS.search(script)
        values = {
            **values,
            "--address": env.get("RAY_DASHBOARD_ADDRESS") or (literal.group(1) if literal else default_address),
        }
    follows_logs = "--follow" in script[at:]
    follow = "--no-wait" not in flags or follows_logs
    rule: ExitRule = "logs" if follows_logs else "submit"
    return _build(values, address=default_address, entrypoint=entrypoint, check=check, follow=follow, exit_rule=rule)
