"""Simulator conformance: the same calls to a simulated and a real Ray head give the same answers.

Each test sends one call (or one sequence) through kubesim's service proxy to a head Pod in a kubesim with
simulated heads and to the same Pod in a kubesim with real Ray heads, and compares status codes, JSON
fields and status transitions. When either Ray or the simulator changes, the difference shows here.
Job entrypoints are real commands that carry the simulator's markers (``KUBESIM_EXIT_CODE=3 python -c
'...sys.exit(3)'`` is a valid shell command for the real head).
"""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, start_kubesim
from tests.kubesim.test_kubectl import kubectl_binary
from tests.realray.heads import Head, create_head
from tests.realray.pair import Answer, Pair

APPS = Path(__file__).resolve().parent / "apps"
TOKEN = "conformance-" + secrets.token_hex(8)
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
GREETER = {
    "name": "greeter",
    "import_path": "greeter:app",
    "route_prefix": "/",
    "deployments": [{"name": "Greeter", "num_replicas": 1}],
}


def _kubesim(ray: str, workdir: Path) -> KubeSimHandle:
    handle = start_kubesim(kubelet="instant", ray=ray, crd_paths=default_crd_paths(), workdir=workdir)
    client.CoreV1Api(handle.api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="conf")))
    return handle


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Pair]]:
    """A plain and a token-auth head, each simulated and real (the real ones start in parallel)."""
    sim = _kubesim("sim", tmp_path_factory.mktemp("conf-sim"))
    real = _kubesim("real", tmp_path_factory.mktemp("conf-real"))
    env = {"PYTHONPATH": str(APPS)}
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            made = {
                (kind, cluster): pool.submit(
                    create_head, kube, "conf", cluster, token=TOKEN if cluster == "auth" else None, env=env
                )
                for kind, kube in (("sim", sim), ("real", real))
                for cluster in ("plain", "auth")
            }
            found: dict[tuple[str, str], Head] = {key: future.result() for key, future in made.items()}
        yield {
            "plain": Pair(found[("sim", "plain")], found[("real", "plain")]),
            "auth": Pair(found[("sim", "auth")], found[("real", "auth")], token=TOKEN),
        }
    finally:
        sim.close()
        real.close()


def until(probe: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    """Poll ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never {what}")


def same_status(answers: tuple[Answer, Answer]) -> int:
    sim, real = answers
    assert sim.status == real.status, f"simulator {sim}, real Ray {real}"
    return sim.status


def job_statuses(pair: Pair, head: Head, job_id: str) -> list[str]:
    """The statuses a job goes through until it is terminal (each once, in order)."""
    seen: list[str] = []

    def terminal() -> bool:
        from tests.realray.pair import call

        status = call(head, "GET", "dashboard", f"/api/jobs/{job_id}", token=pair.token).json()["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status in TERMINAL

    until(terminal, f"saw job {job_id} end")
    return seen


# --- paths and health -------------------------------------------------------------------------------


def test_health_endpoints_and_paths(heads: dict[str, Pair]) -> None:
    pair = heads["plain"]
    assert same_status(pair.both("GET", "dashboard", "/api/gcs_healthz")) == 200
    assert same_status(pair.both("GET", "dashboard-agent", "/api/local_raylet_healthz")) == 200
    assert same_status(pair.both("GET", "dashboard-agent", "/api/healthz")) == 200
    assert same_status(pair.both("GET", "dashboard", "/api/local_raylet_healthz")) == 404
    assert same_status(pair.both("GET", "dashboard", "/api/jobs")) == 404
    sim, real = pair.both("GET", "dashboard", "/api/version")
    assert (sim.status, real.status) == (200, 200) and set(sim.json()) == set(real.json())


def test_kubectl_port_forward_reaches_the_real_dashboard(heads: dict[str, Pair], tmp_path: Path) -> None:
    """``kubectl port-forward svc/<head> :8265`` through kubesim lands on the real Ray head's dashboard."""
    head = heads["plain"].real
    command = [
        kubectl_binary(),
        *("--kubeconfig", str(head.kube.kubeconfig), "--cache-dir", str(tmp_path / "cache")),
        *("-n", head.namespace, "port-forward", f"svc/{head.service}", ":8265"),
    ]
    # The context manager waits for kubectl and closes its pipes.
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as forward:
        try:
            assert forward.stdout is not None and forward.stderr is not None
            line = forward.stdout.readline()
            if not line.startswith("Forwarding from 127.0.0.1:"):
                forward.kill()
                pytest.fail(f"kubectl port-forward did not start: {line!r} {forward.stderr.read()}")
            local = f"http://127.0.0.1:{int(line.split('127.0.0.1:')[1].split()[0])}"
            # Each request is a fresh forwarded connection on the same tunnel.
            with urllib.request.urlopen(f"{local}/api/version", timeout=60) as response:
                assert response.status == 200
                assert json.loads(response.read())["ray_version"] == ray.__version__
            with urllib.request.urlopen(f"{local}/api/jobs/", timeout=60) as response:
                assert response.status == 200
                assert isinstance(json.loads(response.read()), list)
        finally:
            forward.terminate()


def test_token_auth(heads: dict[str, Pair]) -> None:
    pair = heads["auth"]
    assert same_status(pair.both("GET", "dashboard", "/api/jobs/", token="wrong")) == 403
    same_status(pair.both("GET", "dashboard", "/api/jobs/", token=""))
    assert same_status(pair.both("GET", "dashboard", "/api/jobs/")) == 200
    # Health endpoints answer without a token.
    assert same_status(pair.both("GET", "dashboard", "/api/gcs_healthz", token="")) == 200
    assert same_status(pair.both("GET", "dashboard-agent", "/api/local_raylet_healthz", token="")) == 200


# --- jobs -----------------------------------------------------------------------------------------


def test_submit_validation(heads: dict[str, Pair]) -> None:
    pair = heads["plain"]
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", raw=b"not json")) == 500
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", body={"entrypoint": "true", "colour": 1})) == 400
    bad_metadata = {"entrypoint": "true", "metadata": {"n": 1}}
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", body=bad_metadata)) == 400
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", body={"entrypoint": ""})) == 200


@pytest.mark.parametrize(
    ("entrypoint", "end"),
    [
        pytest.param("python -c 'print(1)'", "SUCCEEDED", id="succeeds"),
        pytest.param("KUBESIM_EXIT_CODE=3 python -c 'import sys; sys.exit(3)'", "FAILED", id="fails"),
    ],
)
def test_job_lifecycle(heads: dict[str, Pair], entrypoint: str, end: str) -> None:
    pair = heads["plain"]
    job_id = f"life-{secrets.token_hex(4)}"
    sim, real = pair.both("POST", "dashboard", "/api/jobs/", body={"entrypoint": entrypoint, "submission_id": job_id})
    assert (sim.status, real.status) == (200, 200) and set(sim.json()) == set(real.json())
    sim_seen, real_seen = job_statuses(pair, pair.sim, job_id), job_statuses(pair, pair.real, job_id)
    assert sim_seen[-1] == real_seen[-1] == end
    for seen in (sim_seen, real_seen):
        assert seen == [s for s in ("PENDING", "RUNNING", end) if s in seen]
    sim, real = pair.both("GET", "dashboard", f"/api/jobs/{job_id}")
    sim_job, real_job = sim.json(), real.json()
    assert set(sim_job) == set(real_job)
    for field in ("status", "error_type", "driver_exit_code", "type", "entrypoint"):
        assert sim_job[field] == real_job[field], field
    prefix = real_job["message"].split(",")[0]
    assert sim_job["message"].startswith(prefix), (sim_job["message"], real_job["message"])


def test_job_without_resources_stays_pending_after_a_stop(heads: dict[str, Pair]) -> None:
    pair = heads["plain"]
    job_id = f"gpu-{secrets.token_hex(4)}"
    body = {"entrypoint": "python -c 'print(1)'", "submission_id": job_id, "entrypoint_num_gpus": 1}
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", body=body)) == 200
    sim, real = pair.both("GET", "dashboard", f"/api/jobs/{job_id}")
    assert sim.json()["status"] == real.json()["status"] == "PENDING"
    sim, real = pair.both("POST", "dashboard", f"/api/jobs/{job_id}/stop")
    assert sim.json() == real.json() == {"stopped": True}
    sim, real = pair.both("GET", "dashboard", f"/api/jobs/{job_id}")
    assert sim.json()["status"] == real.json()["status"] == "PENDING"


def test_stopping_a_running_job(heads: dict[str, Pair]) -> None:
    pair = heads["plain"]
    job_id = f"stop-{secrets.token_hex(4)}"
    body = {"entrypoint": "KUBESIM_RUN_SECONDS=inf sleep 600", "submission_id": job_id}
    assert same_status(pair.both("POST", "dashboard", "/api/jobs/", body=body)) == 200
    for head in (pair.sim, pair.real):
        until(lambda h=head: _status(pair, h, job_id) == "RUNNING", "saw the job running")  # type: ignore[misc]
    sim, real = pair.both("POST", "dashboard", f"/api/jobs/{job_id}/stop")
    assert sim.json() == real.json() == {"stopped": True}
    sim_seen, real_seen = job_statuses(pair, pair.sim, job_id), job_statuses(pair, pair.real, job_id)
    assert sim_seen[-1] == real_seen[-1] == "STOPPED"
    sim, real = pair.both("GET", "dashboard", f"/api/jobs/{job_id}")
    assert sim.json()["message"] == real.json()["message"]


def _status(pair: Pair, head: Head, job_id: str) -> str:
    from tests.realray.pair import call

    return str(call(head, "GET", "dashboard", f"/api/jobs/{job_id}", token=pair.token).json()["status"])


# --- serve ----------------------------------------------------------------------------------------


def _applications(pair: Pair, head: Head) -> dict[str, Any]:
    from tests.realray.pair import call

    return dict(call(head, "GET", "dashboard", "/api/serve/applications/", token=pair.token).json())


def test_serve_lifecycle(heads: dict[str, Pair]) -> None:
    pair = heads["plain"]
    sim, real = pair.both("GET", "dashboard", "/api/serve/applications/")
    assert sim.json() == real.json(), "before Serve runs"
    # No Serve proxy before the first PUT: the serve port does not answer.
    assert same_status(pair.both("GET", "serve", "/-/healthz")) == 503

    assert (
        same_status(pair.both("PUT", "dashboard", "/api/serve/applications/", body={"applications": [GREETER]})) == 200
    )
    for head in (pair.sim, pair.real):
        until(
            lambda h=head: _applications(pair, h)["applications"].get("greeter", {}).get("status") == "RUNNING",  # type: ignore[misc]
            "saw the application running",
        )
    sim_apps, real_apps = _applications(pair, pair.sim), _applications(pair, pair.real)
    assert set(sim_apps) == set(real_apps)
    sim_app, real_app = sim_apps["applications"]["greeter"], real_apps["applications"]["greeter"]
    assert set(sim_app) == set(real_app)
    assert set(sim_app["deployments"]) == set(real_app["deployments"]) == {"Greeter"}
    assert all(isinstance(v, dict) for v in [*sim_apps["proxies"].values(), *real_apps["proxies"].values()])
    assert same_status(pair.both("GET", "serve", "/-/healthz")) == 200
    assert same_status(pair.both("GET", "serve", "/")) == 200

    # An application left out of a PUT goes away.
    assert same_status(pair.both("PUT", "dashboard", "/api/serve/applications/", body={"applications": []})) == 200
    for head in (pair.sim, pair.real):
        until(lambda h=head: not _applications(pair, h)["applications"], "saw the application deleted")  # type: ignore[misc]

    assert same_status(pair.both("DELETE", "dashboard", "/api/serve/applications/")) == 200
    for head in (pair.sim, pair.real):
        until(lambda h=head: not _applications(pair, h)["proxies"], "saw Serve shut down")  # type: ignore[misc]
    assert same_status(pair.both("GET", "serve", "/-/healthz")) == 503


def test_import_failure(heads: dict[str, Pair]) -> None:
    pair = heads["auth"]
    app = {"name": "broken", "import_path": "kubesim_deploy_fail_nowhere:app", "route_prefix": "/broken"}
    assert same_status(pair.both("PUT", "dashboard", "/api/serve/applications/", body={"applications": [app]})) == 200
    for head in (pair.sim, pair.real):
        until(
            lambda h=head: _applications(pair, h)["applications"].get("broken", {}).get("status") == "DEPLOY_FAILED",  # type: ignore[misc]
            "saw the deploy fail",
        )
    sim_app = _applications(pair, pair.sim)["applications"]["broken"]
    real_app = _applications(pair, pair.real)["applications"]["broken"]
    assert sim_app["deployments"] == real_app["deployments"] == {}
    assert shlex.split(real_app["message"])[0] == shlex.split(sim_app["message"])[0]
