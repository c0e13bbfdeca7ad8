"""No polling. Running RayJobs whose Ray jobs do not change cause no reconcile at all.

KubeRay re-reconciles every RayJob every 3 s to ask the dashboard about its job (docs/behaviour.md#5, #12): 100 running
RayJobs cost it about 1,000 reconciles in 30 s. In raybus only the watcher's prober polls the dashboards,
and it publishes an observation only when an answer changed. So 100 RayJobs running long Ray jobs
(``KUBESIM_RUN_SECONDS=inf``; half submitted by a K8s Job, half over HTTP by raybus itself) must not be
reconciled once in 30 s, counted from when the last one got running and the echoes of that change (its
status write's own watch event, the Service it created) were reconciled. Every reconcile publishes a
CommandBatch on ``raybus.cmd.RayJob.<ns>.<name>``, even an empty one, so that subject counts them. Then
one Ray job is stopped on its dashboard: that RayJob, and only it, is reconciled and completes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from schema import subjects
from schema.keys import ReconcileKey
from tests.e2e.pipeline import running_pipeline
from tests.e2e.rayjobs import LONG, JobDriver, rayjob_statuses, small_rayjob
from tests.helpers import eventually

JOBS = 100
WINDOW = 30.0
"""Seconds of silence required."""
SETTLE = 2.0
"""Seconds without a reconcile after the last RayJob got running before the window opens."""
NAMESPACE = "quiet"


async def test_running_rayjobs_whose_status_does_not_change_are_never_reconciled(tmp_path: Path) -> None:
    async with running_pipeline(tmp_path) as p:
        nc = await p.nc()
        decisions: list[tuple[float, str]] = []
        loop = asyncio.get_running_loop()
        reconciled = asyncio.Event()

        async def count(msg: Msg) -> None:
            decisions.append((loop.time(), msg.subject))
            reconciled.set()

        prefix = subjects.command_subject(ReconcileKey(kind="RayJob", namespace=NAMESPACE, name="x"))[: -len(".x")]
        sub = await nc.subscribe(f"{prefix}.*", cb=count)
        try:
            modes = ("K8sJobMode", "HTTPMode")
            bodies = [small_rayjob(f"quiet-{i:03d}", entrypoint=LONG, submissionMode=modes[i % 2]) for i in range(JOBS)]
            jobs = [JobDriver(p, body, NAMESPACE) for body in bodies]
            await jobs[0].create_namespace()
            for job in jobs:
                await job.create(namespace=False)

            async def settled() -> dict[str, dict[str, Any]] | None:
                """Every Ray job reported RUNNING, and the echoes of the last changes (the status write's
                own watch event, the Service it created, ...) have been reconciled: none for SETTLE s."""
                p.check()
                statuses = await asyncio.to_thread(rayjob_statuses, p, NAMESPACE)
                running = {
                    name: s
                    for name, s in statuses.items()
                    if s.get("jobDeploymentStatus") == "Running" and s.get("jobStatus") == "RUNNING"
                }
                quiet = bool(decisions) and loop.time() - decisions[-1][0] > SETTLE
                return running if len(running) == JOBS and quiet else None

            running = await eventually(settled, timeout=240, interval=0.5, message="not every Ray job got running")
            assert running is not None
            total = len(decisions)

            reconciled.clear()
            try:
                await asyncio.wait_for(reconciled.wait(), timeout=WINDOW)  # the first reconcile, if any, ends it
            except TimeoutError:
                pass
            late = [subject for _, subject in decisions[total:]]
            assert late == [], f"{len(late)} reconcile(s) of unchanged RayJobs in {WINDOW:g} s: {late[:10]}"
            statuses = await asyncio.to_thread(rayjob_statuses, p, NAMESPACE)
            assert {s.get("jobDeploymentStatus") for s in statuses.values()} == {"Running"}

            # still event-driven: a change of one Ray job reconciles its RayJob, and only it
            target = jobs[7]  # HTTPMode: no submitter to wait for
            status = running[target.name]
            dashboard = p.kube.dashboards.dashboard_state(NAMESPACE, str(status["rayClusterName"]))
            assert dashboard is not None
            record = dashboard.jobs.get(str(status["jobId"]))
            assert record is not None
            assert p.kube.call(lambda: dashboard.jobs.stop(record))
            done = await target.wait_deployment("Complete")
            assert done["jobStatus"] == "STOPPED"
            assert {subject.rsplit(".", 1)[-1] for _, subject in decisions[total:]} == {target.name}
        finally:
            await sub.unsubscribe()
            await nc.close()
