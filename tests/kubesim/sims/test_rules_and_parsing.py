"""Pure parts: job/serve scripting markers, failure annotations and submitter command recognition."""

from __future__ import annotations

import math

import pytest
import yaml

from kubesim.dashboard.rules import parse_job_script, parse_serve_app_script
from kubesim.sims.annotations import HEAD_URLS, pod_faults, recorded_head_urls
from kubesim.sims.rayresources import fits, group_node
from kubesim.sims.submitter import parse_submitter
from kubesim.sims.submitter_run import exit_code
from tests.helpers import samples_dir


@pytest.mark.parametrize(
    ("entrypoint", "runtime_env", "pending", "run", "code"),
    [
        pytest.param("python /home/ray/samples/sample_code.py", None, 0.0, 0.2, 0, id="default"),
        pytest.param("KUBESIM_RUN_SECONDS=3 python x.py", None, 0.0, 3.0, 0, id="run"),
        pytest.param("python x.py KUBESIM_EXIT_CODE=2 KUBESIM_PENDING_SECONDS=1.5", None, 1.5, 0.2, 2, id="fail"),
        pytest.param("KUBESIM_RUN_SECONDS=inf serve run", None, 0.0, math.inf, 0, id="forever"),
        pytest.param("KUBESIM_RUN_SECONDS=nope x", None, 0.0, 0.2, 0, id="malformed"),
        pytest.param("x", {"env_vars": {"KUBESIM_EXIT_CODE": "4"}}, 0.0, 0.2, 4, id="runtime-env"),
        pytest.param(
            "KUBESIM_EXIT_CODE=0 x", {"env_vars": {"KUBESIM_EXIT_CODE": "4"}}, 0.0, 0.2, 0, id="entrypoint-wins"
        ),
    ],
)
def test_job_script(
    entrypoint: str, runtime_env: dict[str, object] | None, pending: float, run: float, code: int
) -> None:
    script = parse_job_script(entrypoint, runtime_env, default_run_seconds=0.2)
    assert (script.pending_seconds, script.run_seconds, script.exit_code) == (pending, run, code)


def test_serve_app_script() -> None:
    assert not parse_serve_app_script({"name": "a", "import_path": "x.y"}, default_deploy_seconds=1).fails
    assert parse_serve_app_script({"name": "Kubesim_Deploy_Fail", "import_path": "x"}, default_deploy_seconds=1).fails
    env_fail = {"name": "a", "import_path": "x", "runtime_env": {"env_vars": {"KUBESIM_DEPLOY_FAIL": "1"}}}
    assert parse_serve_app_script(env_fail, default_deploy_seconds=1).fails
    slow = {"name": "a", "import_path": "x", "runtime_env": {"env_vars": {"KUBESIM_DEPLOY_SECONDS": "7"}}}
    assert parse_serve_app_script(slow, default_deploy_seconds=1).deploy_seconds == 7.0


def test_pod_faults() -> None:
    faults = pod_faults(
        {
            "metadata": {
                "annotations": {
                    "kubesim.raybus.io/never-ready": "True",
                    "kubesim.raybus.io/fail-after-seconds": "2.5",
                    "kubesim.raybus.io/exit-code": "oops",
                    "kubesim.raybus.io/ready-after-seconds": "-1",
                }
            }
        }
    )
    assert faults.never_ready
    assert faults.fail_after_seconds == 2.5
    assert faults.exit_code == 1
    assert faults.ready_after_seconds is None
    assert pod_faults({}) == pod_faults({"metadata": {"annotations": {}}})


# KubeRay's K8sJobMode script, token by token as its Go tests spell it (docs/behaviour.md#5.3).
K8S_JOB_MODE = (
    'until python -c "import sys, urllib.request; r=urllib.request.urlopen(sys.argv[1], timeout=10); '
    'exit(0 if b\'success\' in r.read() else 1)" "http://rc-head-svc.ns.svc.cluster.local:8265/api/gcs_healthz" '
    '>/dev/null 2>&1 ; do echo "Waiting for Ray Dashboard GCS to become healthy at '
    'http://rc-head-svc.ns.svc.cluster.local:8265 ..." ; sleep 2 ; done ; '
    "if ! ray job status --address http://rc-head-svc.ns.svc.cluster.local:8265 testJobId >/dev/null 2>&1 ; "
    "then ray job submit --address http://rc-head-svc.ns.svc.cluster.local:8265 --no-wait "
    '--runtime-env-json "{\\"test\\":\\"test\\"}" --metadata-json "{\\"testKey\\":\\"testValue\\"}" '
    "--submission-id testJobId --entrypoint-num-cpus 1.000000 --entrypoint-num-gpus 0.500000 "
    '--entrypoint-resources "{\\"Custom_1\\": 1, \\"Custom_2\\": 5.5}" '
    "-- echo no quote 'single quote' \"double quote\" ; fi ; "
    "ray job logs --address http://rc-head-svc.ns.svc.cluster.local:8265 --follow testJobId"
)


def test_parse_k8s_job_mode_script() -> None:
    command = parse_submitter(["/bin/bash", "-ce", "--"], [K8S_JOB_MODE], env={})
    assert command is not None
    assert command.host == "rc-head-svc.ns.svc.cluster.local"
    assert command.port == 8265
    assert command.submission_id == "testJobId"
    assert command.entrypoint == "echo no quote 'single quote' \"double quote\""
    assert command.runtime_env == {"test": "test"}
    assert command.metadata == {"testKey": "testValue"}
    assert command.entrypoint_num_cpus == 1.0
    assert command.entrypoint_num_gpus == 0.5
    assert command.entrypoint_resources == {"Custom_1": 1, "Custom_2": 5.5}
    assert command.check_status_first
    assert command.follow
    assert command.exit_rule == "logs"  # ray job logs --follow exits 0 whatever the job's end
    assert command.submit_body()["submission_id"] == "testJobId"


def test_parse_sidecar_mode_script() -> None:
    script = (
        "until wget --tries 1 -T 10 -q -O- http://localhost:8265/api/gcs_healthz >/dev/null 2>&1 ; do echo "
        '"Waiting ..." ; sleep 2 ; done ; ray job submit --address http://127.0.0.1:8265 --submission-id sid '
        "-- python /home/ray/samples/sample_code.py ;"
    )
    command = parse_submitter(["/bin/bash", "-ce", "--"], [script], env={})
    assert command is not None
    assert (command.host, command.port) == ("127.0.0.1", 8265)
    assert command.entrypoint == "python /home/ray/samples/sample_code.py"
    assert not command.check_status_first
    assert command.follow  # blocking submit
    assert command.exit_rule == "submit"


def test_parse_shell_variable_address_and_env_expansion() -> None:
    script = (
        "dashboard_address='http://127.0.0.1:8265'; "
        'dashboard_address="${RAY_DASHBOARD_ADDRESS:-$dashboard_address}"; '
        'if ! ray job status --address "$dashboard_address" j >/dev/null 2>&1 ; then ray job submit --address '
        '"$dashboard_address" --no-wait --submission-id j -- echo hi ; fi ; '
        'ray job logs --address "$dashboard_address" --follow j'
    )
    command = parse_submitter(["/bin/bash", "-ce", "--"], [script], env={"RAY_DASHBOARD_ADDRESS": "svc.ns.svc:8265"})
    assert command is not None
    assert (command.host, command.port) == ("svc.ns.svc", 8265)
    without_env = parse_submitter(["/bin/bash", "-ce", "--"], [script], env={})
    assert without_env is not None
    assert without_env.host == "127.0.0.1"

    sample = (
        "ray job submit --address=http://$RAY_DASHBOARD_ADDRESS "
        "--submission-id=$RAY_JOB_SUBMISSION_ID -- echo hello world"
    )
    env = {"RAY_DASHBOARD_ADDRESS": "rc-head-svc.default.svc.cluster.local:8265", "RAY_JOB_SUBMISSION_ID": "abc"}
    parsed = parse_submitter(["sh", "-c", sample], [], env=env)
    assert parsed is not None
    assert (parsed.host, parsed.submission_id, parsed.entrypoint) == (
        "rc-head-svc.default.svc.cluster.local",
        "abc",
        "echo hello world",
    )


def test_parse_light_weight_submitter() -> None:
    args = ["--runtime-env-json", '{"pip":["requests==2.26.0"]}', "--", "python", "/home/ray/samples/sample_code.py"]
    env = {"RAY_DASHBOARD_ADDRESS": "rc-head-svc.ns.svc.cluster.local:8265", "RAY_JOB_SUBMISSION_ID": "lw-1"}
    command = parse_submitter(["/submitter"], args, env=env)
    assert command is not None
    assert command.submission_id == "lw-1"
    assert command.exit_rule == "status"
    assert command.entrypoint == "python /home/ray/samples/sample_code.py"
    assert command.runtime_env == {"pip": ["requests==2.26.0"]}
    assert command.host == "rc-head-svc.ns.svc.cluster.local"


def test_non_submitters() -> None:
    assert parse_submitter(["ray", "start", "--head"], [], env={}) is None
    assert parse_submitter(["/bin/bash", "-c", "--"], ["ulimit -n 65536; ray start --head --block"], env={}) is None
    assert parse_submitter(["ray", "job", "submit", "echo"], [], env={}) is None  # no "--" separator


def test_submitter_exit_codes_follow_the_real_commands() -> None:
    assert [exit_code("logs", s) for s in ("SUCCEEDED", "FAILED", "STOPPED")] == [0, 0, 0]
    assert [exit_code("submit", s) for s in ("SUCCEEDED", "FAILED", "STOPPED")] == [0, 1, 0]
    assert [exit_code("status", s) for s in ("SUCCEEDED", "FAILED", "STOPPED")] == [0, 1, 1]


def test_cluster_resources_from_ray_start_params() -> None:
    sample = next(
        d for d in yaml.safe_load_all((samples_dir() / "ray-job.resources.yaml").read_text()) if d["kind"] == "RayJob"
    )
    cluster = {"metadata": {"name": "c"}, "spec": sample["spec"]["rayClusterSpec"]}
    nodes = [group_node(cluster["spec"]["headGroupSpec"])]
    assert nodes[0] == {"GPU": 2.0, "resource1": 2.0, "resource2": 3.0}
    assert fits({"GPU": 0.5, "resource1": 1, "resource2": 2}, nodes)
    assert not fits({"GPU": 4}, nodes) and not fits({"TPU": 1}, nodes)
    assert fits({}, []) and not fits({"GPU": 1}, [])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param('{"8265": "http://127.0.0.1:40123"}', {"8265": "http://127.0.0.1:40123"}, id="loopback"),
        pytest.param('{"8265": "http://169.254.169.254:80"}', {}, id="another-host"),
        pytest.param('{"8265": "http://127.0.0.1:1/path"}', {}, id="with-a-path"),
        pytest.param('["http://127.0.0.1:1"]', {}, id="not-an-object"),
        pytest.param("{", {}, id="malformed"),
    ],
)
def test_recorded_head_urls_are_loopback_base_urls_only(raw: str, expected: dict[str, str]) -> None:
    assert recorded_head_urls({"metadata": {"annotations": {HEAD_URLS: raw}}}) == expected
