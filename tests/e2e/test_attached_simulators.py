"""The whole pipeline on kubesim serving the API only, with its simulators attached over HTTP.

kubesim's kubelet, Job controller and Ray heads run on ``kubesim.remote.RemoteStore`` (``kubesim attach``),
as they would against a real kube-apiserver; raybus reaches the heads through kubesim's service proxy, which
follows the URLs the attached kubelet records on each head Pod.
"""

from __future__ import annotations

from pathlib import Path

from kubesim.apiclient import ApiConnection
from kubesim.attach import Attachment
from tests.e2e.pipeline import running_pipeline
from tests.e2e.rayjobs import JobDriver, small_rayjob


async def test_rayjobs_complete_with_the_simulators_attached_over_http(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path, kubelet="off") as pipe:
        attachment = Attachment(ApiConnection.from_kubeconfig(str(pipe.kube.kubeconfig)))
        async with attachment:
            submitter = JobDriver(pipe, small_rayjob("k8s-job-mode"), "attached-k8s")
            http_body = small_rayjob("http-mode")
            http_body["spec"]["submissionMode"] = "HTTPMode"
            direct = JobDriver(pipe, http_body, "attached-http")
            await submitter.create()
            await direct.create()

            for job in (submitter, direct):
                status = await job.wait_deployment("Complete", timeout=120)
                assert status["jobStatus"] == "SUCCEEDED"
                assert (status["succeeded"], status["failed"]) == (1, 0)
            assert await submitter.submitter_jobs() == ["k8s-job-mode"]
        assert not attachment.errors, attachment.errors
