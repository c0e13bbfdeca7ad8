"""docs/behaviour.md#5.3 submitters: the submit script token by token, the default and user submitter templates, the
HTTPMode request, and the Go quoting/marshalling they rely on."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from schema.config import OperatorConfig, OperatorSwitches
from schema.ray.rayjob import RayJobSpec
from services.reconciler.rayjob.submitter import (
    PYTHON_HEALTH_COMMAND,
    SubmitterError,
    build_submit_command,
    build_submit_request,
    build_submitter_job,
    go_json,
    go_quote,
)
from tests.unit.rayjob.builders import cluster_spec, rayjob

URL = "rj-abcde-head-svc.default.svc.cluster.local:8265"
ADDRESS = f"http://{URL}"


def spec_of(**fields: Any) -> RayJobSpec:
    raw = {
        "entrypoint": "  echo no quote 'single quote' \"double quote\"  ",
        "rayClusterSpec": cluster_spec(),
        **fields,
    }
    return msgspec.convert(raw, RayJobSpec, strict=False)


def test_k8s_job_mode_command_tokens() -> None:
    spec = spec_of(
        runtimeEnvYAML="env_vars:\n  B: '1'\n  A: x\n",
        metadata={"testKey": "testValue"},
        entrypointNumCpus=1,
        entrypointNumGpus=0.5,
        entrypointResources='{"Custom_1": 1, "Custom_2": 5.5}',
    )
    command = build_submit_command(
        spec, job_id="testJobId", dashboard_url=URL, mode="K8sJobMode", head_dashboard_port=8265, restartable=False
    )
    health = PYTHON_HEALTH_COMMAND % (f"{ADDRESS}/api/gcs_healthz", 10)
    assert command == [
        "until", health, ">/dev/null", "2>&1", ";",
        "do", "echo", f'"Waiting for Ray Dashboard GCS to become healthy at {ADDRESS} ..."', ";",
        "sleep", "2", ";", "done", ";",
        "if", "!", "ray", "job", "status", "--address", ADDRESS, "testJobId", ">/dev/null", "2>&1", ";", "then",
        "ray", "job", "submit", "--address", ADDRESS, "--no-wait",
        "--runtime-env-json", '"{\\"env_vars\\":{\\"A\\":\\"x\\",\\"B\\":\\"1\\"}}"',
        "--metadata-json", '"{\\"testKey\\":\\"testValue\\"}"',
        "--submission-id", "testJobId",
        "--entrypoint-num-cpus", "1.000000",
        "--entrypoint-num-gpus", "0.500000",
        "--entrypoint-resources", '"{\\"Custom_1\\": 1, \\"Custom_2\\": 5.5}"',
        "--", "echo no quote 'single quote' \"double quote\"", ";",
        "fi", ";", "ray", "job", "logs", "--address", ADDRESS, "--follow", "testJobId",
    ]  # fmt: skip


def test_sidecar_mode_command_is_a_blocking_submit_on_localhost() -> None:
    command = build_submit_command(
        spec_of(), job_id="id", dashboard_url="", mode="SidecarMode", head_dashboard_port=9999, restartable=False
    )
    assert command[1] == PYTHON_HEALTH_COMMAND % ("http://localhost:9999/api/gcs_healthz", 10)
    tail = command[command.index("done") + 2 :]
    assert tail == [
        "ray", "job", "submit", "--address", "http://127.0.0.1:9999", "--submission-id", "id",
        "--", "echo no quote 'single quote' \"double quote\"", ";",
    ]  # fmt: skip


def test_metadata_needs_ray_2_6() -> None:
    cluster = cluster_spec(ray_version="2.5.0")
    spec = spec_of(metadata={"a": "b"}, rayClusterSpec=cluster)
    with pytest.raises(SubmitterError, match="the Ray version must be at least 2.6.0 to use the metadata field"):
        build_submit_command(
            spec, job_id="x", dashboard_url=URL, mode="K8sJobMode", head_dashboard_port=1, restartable=False
        )


def _job(spec: RayJobSpec, raw: dict[str, Any], config: OperatorConfig | None = None) -> dict[str, Any]:
    obj = rayjob(**raw)
    return build_submitter_job(
        obj,
        spec,
        raw_spec=obj["spec"],
        job_id="jid",
        dashboard_url=URL,
        cluster_name="rj-abcde",
        cluster_spec=cluster_spec(),
        owner_reference={"kind": "RayJob", "name": "rj"},
        config=config or OperatorConfig(),
    )


def test_default_submitter_template() -> None:
    job = _job(spec_of(), {})
    template = job["spec"]["template"]
    assert template["spec"]["restartPolicy"] == "Never"
    (container,) = template["spec"]["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == "rayproject/ray:2.52.0"
    assert container["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "200Mi"},
    }
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert container["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": URL},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": "jid"},
    ]
    assert template["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"


def test_login_shell_switch() -> None:
    config = OperatorConfig(switches=OperatorSwitches(enable_login_shell=True))
    job = _job(spec_of(), {}, config)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["/bin/bash", "-lce", "--"]


@pytest.mark.parametrize(
    ("command", "expected_command"),
    [
        pytest.param(["sh", "-c", "my submit"], ["sh", "-c", "my submit"], id="user-command-kept"),
        pytest.param(None, ["/bin/bash", "-ce", "--"], id="default-command"),
    ],
)
def test_user_submitter_template(command: list[str] | None, expected_command: list[str]) -> None:
    container: dict[str, Any] = {"name": "light", "image": "small:1", "env": [{"name": "X", "value": "y"}]}
    if command is not None:
        container["command"] = command
    template = {"metadata": {"labels": {"team": "a"}}, "spec": {"restartPolicy": "Never", "containers": [container]}}
    job = _job(
        spec_of(submitterPodTemplate=template, submitterConfig={"backoffLimit": 5}), {"submitterPodTemplate": template}
    )
    assert job["spec"]["backoffLimit"] == 5
    (out,) = job["spec"]["template"]["spec"]["containers"]
    assert out["command"] == expected_command
    assert out["image"] == "small:1"
    assert [e["name"] for e in out["env"]] == [
        "X",
        "PYTHONUNBUFFERED",
        "RAY_DASHBOARD_ADDRESS",
        "RAY_JOB_SUBMISSION_ID",
    ]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "a" and labels["app.kubernetes.io/created-by"] == "kuberay-operator"


def test_token_auth_env_for_the_submitter() -> None:
    obj = rayjob()
    cluster = cluster_spec()
    cluster["authOptions"] = {"mode": "token"}
    job = build_submitter_job(
        obj, spec_of(), raw_spec=obj["spec"], job_id="jid", dashboard_url=URL, cluster_name="1cluster",
        cluster_spec=cluster, owner_reference={}, config=OperatorConfig(),
    )  # fmt: skip
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-2:] == [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "rcluster", "key": "auth_token"}}},
    ]


def test_http_request_body() -> None:
    spec = spec_of(jobId="x", runtimeEnvYAML="pip: [requests]", entrypointNumCpus=2, entrypointResources='{"r": 1}')
    assert build_submit_request(spec, job_id="x") == {
        "entrypoint": "  echo no quote 'single quote' \"double quote\"  ",
        "submission_id": "x",
        "runtime_env": {"pip": ["requests"]},
        "entrypoint_num_cpus": 2.0,
        "entrypoint_resources": {"r": 1},
    }
    with pytest.raises(SubmitterError):
        build_submit_request(spec_of(entrypointResources="nope"), job_id="x")


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        pytest.param('{"a":"b"}', '"{\\"a\\":\\"b\\"}"', id="json"),
        pytest.param("tab\there\n", '"tab\\there\\n"', id="controls"),
        pytest.param("back\\slash", '"back\\\\slash"', id="backslash"),
        pytest.param("é", '"é"', id="printable-unicode"),
        pytest.param("\x01", '"\\x01"', id="low-control"),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_go_json_escapes_html_and_sorts_keys() -> None:
    assert go_json({"b": "<&>", "a": 1}) == '{"a":1,"b":"\\u003c\\u0026\\u003e"}'
