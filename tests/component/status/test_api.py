"""The history HTTP API over a real database: routes, filters, pagination, errors, OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jsonschema
import pytest

from services.status.api import ApiServer, StatusApi
from services.status.store import ResultRecord, StatusStore
from tests.unit.status.builders import lifecycle, result, transition

JOB_A = [
    lifecycle("created", uid="ja", name="job-a", seconds=0),
    result(
        transition(
            "jobDeploymentStatus",
            "",
            "Initializing",
            uid="ja",
            name="job-a",
            seconds=1,
            rv="2",
            attributes={"jobId": "job-a-1", "rayClusterName": "job-a-c"},
        ),
        transition("jobDeploymentStatus", "Initializing", "Running", uid="ja", name="job-a", seconds=2, rv="3"),
        name="job-a",
        batch_id="a1",
    ),
    result(
        transition(
            "jobDeploymentStatus",
            "Running",
            "Complete",
            uid="ja",
            name="job-a",
            seconds=60,
            rv="4",
            reason="",
            message="Job finished successfully.",
        ),
        name="job-a",
        batch_id="a2",
    ),
    lifecycle("deleted", uid="ja", name="job-a", seconds=100, rv="5"),
]
JOB_B = [
    lifecycle("created", uid="jb", name="job-b", namespace="team", seconds=10),
    result(outcome="failed", error="409 Conflict", status_code=409, name="job-b", namespace="team", batch_id="b1"),
]
CLUSTER = [
    result(transition("state", "", "ready", kind="RayCluster", uid="rc", name="rc", seconds=30), batch_id="c1"),
]


@pytest.fixture
async def api(store: StatusStore) -> AsyncIterator[tuple[str, StatusApi]]:
    """The API over a store holding two RayJobs (one deleted) and a RayCluster."""
    records = [
        ResultRecord(result=one, stream_seq=seq, trace_id=f"{seq:032x}")
        for seq, one in enumerate([*JOB_A, *JOB_B, *CLUSTER], start=1)
    ]
    await store.persist(records)
    status_api = StatusApi(store)
    server = ApiServer(status_api, host="127.0.0.1", port=0)
    await server.start()
    try:
        yield server.url, status_api
    finally:
        await server.stop()


async def get(base: str, path: str, **params: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(base + path, params=params) as response:
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def test_resources_and_filters(api: tuple[str, StatusApi]) -> None:
    base, _ = api
    status, page = await get(base, "/v1/resources")
    assert status == 200
    assert [(r["kind"], r["namespace"], r["name"]) for r in page["items"]] == [
        ("RayJob", "default", "job-a"),
        ("RayJob", "team", "job-b"),
        ("RayCluster", "default", "rc"),
    ]
    assert page["next_after"] is None
    job_a = page["items"][0]
    assert job_a["status"] == "Complete"
    assert job_a["deleted_at"] == "2026-01-01T12:01:40Z"
    assert job_a["rayjob"]["job_id"] == "job-a-1"
    assert job_a["fields"]["jobDeploymentStatus"] == {"value": "Complete", "at": "2026-01-01T12:01:00Z"}
    assert page["items"][2]["rayjob"] is None

    assert [r["name"] for r in (await get(base, "/v1/resources", kind="rayclusters"))[1]["items"]] == ["rc"]
    assert [r["name"] for r in (await get(base, "/v1/resources", namespace="team"))[1]["items"]] == ["job-b"]
    assert [r["name"] for r in (await get(base, "/v1/rayjobs", status="Complete"))[1]["items"]] == ["job-a"]
    since = await get(base, "/v1/rayjobs", since="2026-01-01T12:01:00+00:00")
    assert [r["name"] for r in since[1]["items"]] == ["job-a"]  # job-b last changed at 12:00:10
    first = await get(base, "/v1/resources", limit="2")
    assert len(first[1]["items"]) == 2
    rest = await get(base, "/v1/resources", limit="2", after=str(first[1]["next_after"]))
    assert [r["name"] for r in rest[1]["items"]] == ["rc"]
    assert rest[1]["next_after"] is None


async def test_one_resource_its_timeline_and_errors(api: tuple[str, StatusApi]) -> None:
    base, _ = api
    status, job = await get(base, "/v1/resources/RayJob/default/job-a")
    assert (status, job["uid"]) == (200, "ja")
    assert (await get(base, "/v1/rayjobs/default/job-a", uid="ja"))[1] == job
    status, history = await get(base, "/v1/rayjobs/default/job-a/transitions")
    assert status == 200
    assert history["resource"] == job
    assert [(t["from_value"], t["to_value"]) for t in history["transitions"]] == [
        ("", "created"),
        ("", "Initializing"),
        ("Initializing", "Running"),
        ("Running", "Complete"),
        ("created", "deleted"),
    ]
    assert history["transitions"][1]["attributes"]["rayClusterName"] == "job-a-c"
    assert history["transitions"][3]["message"] == "Job finished successfully."
    assert history["transitions"][3]["stream_seq"] == 3
    status, first = await get(base, "/v1/rayjobs/default/job-a/transitions", limit="2")
    assert (status, first["next_after"]) == (200, first["transitions"][-1]["id"])
    assert first["transitions"] == history["transitions"][:2]

    for path, params, code, error in [
        ("/v1/rayjobs/default/nope", {}, 404, "not_found"),
        ("/v1/rayjobs/default/job-a", {"uid": "other"}, 404, "not_found"),
        ("/v1/rayservices/default/job-a/transitions", {}, 404, "not_found"),
        ("/v1/resources/Pod/default/job-a", {}, 404, "not_found"),
        ("/v1/nothing-here", {}, 404, "not_found"),
        ("/v1/resources", {"kind": "Pod"}, 400, "bad_request"),
        ("/v1/resources", {"limit": "0"}, 400, "bad_request"),
        ("/v1/resources", {"after": "x"}, 400, "bad_request"),
        ("/v1/resources", {"since": "yesterday"}, 400, "bad_request"),
        ("/v1/resources", {"since": "garbage"}, 400, "bad_request"),
        ("/v1/rayjobs", {"since": "0001-01-01T00:00:00+01:00"}, 400, "bad_request"),  # before year 1 in UTC
        ("/v1/rayjobs", {"since": "9999-12-31T23:59:59-01:00"}, 400, "bad_request"),  # after year 9999 in UTC
        ("/v1/resources", {"namespace": "a\x00b"}, 400, "bad_request"),
        ("/v1/rayjobs/default/job-a", {"uid": "\x00"}, 400, "bad_request"),
        ("/v1/rayjobs/default/job-a/transitions", {"limit": "0"}, 400, "bad_request"),
        ("/v1/rayjobs/default/job-a/transitions", {"limit": "1001"}, 400, "bad_request"),
        ("/v1/rayjobs/default/job-a/transitions", {"after": "-1"}, 400, "bad_request"),
        ("/v1/commands", {"outcome": "maybe"}, 400, "bad_request"),
    ]:
        status, body = await get(base, path, **params)
        assert (status, body["error"]) == (code, error), path
        assert body["message"]


async def test_bad_times_say_what_is_wrong(api: tuple[str, StatusApi]) -> None:
    base, _ = api
    status, body = await get(base, "/v1/resources", since="garbage")
    assert status == 400
    assert body["message"] == "since='garbage': not an RFC 3339 time (e.g. 2026-01-01T12:00:00Z)"
    earliest = await get(base, "/v1/rayjobs", since="0001-01-01T00:00:00Z")
    assert [r["name"] for r in earliest[1]["items"]] == ["job-a", "job-b"]
    naive = await get(base, "/v1/rayjobs", since="2026-01-01T12:01:00")  # no offset: UTC
    assert [r["name"] for r in naive[1]["items"]] == ["job-a"]


async def test_transitions_are_paged_like_the_other_lists(api: tuple[str, StatusApi]) -> None:
    base, _ = api
    path = "/v1/rayjobs/default/job-a/transitions"
    whole = (await get(base, path))[1]
    assert whole["next_after"] is None
    assert len(whole["transitions"]) == 5
    pages = []
    page = (await get(base, path, limit="2"))[1]
    pages.append(page)
    while page["next_after"] is not None:
        page = (await get(base, path, limit="2", after=str(page["next_after"])))[1]
        pages.append(page)
    assert [len(p["transitions"]) for p in pages] == [2, 2, 1]
    assert [t for p in pages for t in p["transitions"]] == whole["transitions"]
    assert all(p["resource"] == whole["resource"] for p in pages)


async def test_command_audit_trail(api: tuple[str, StatusApi]) -> None:
    base, _ = api
    status, page = await get(base, "/v1/commands")
    assert status == 200
    assert len(page["items"]) == 7
    failed = (await get(base, "/v1/commands", outcome="failed"))[1]["items"]
    assert [(c["namespace"], c["name"], c["error"], c["status_code"]) for c in failed] == [
        ("team", "job-b", "409 Conflict", 409)
    ]
    observed = (await get(base, "/v1/commands", kind="RayJob", namespace="default", name="job-a"))[1]["items"]
    assert [c["verb"] for c in observed] == ["observe", "patch_status", "patch_status", "observe"]
    assert observed[1]["trace_id"] == f"{2:032x}"
    one = (await get(base, "/v1/commands", limit="1"))[1]
    two = (await get(base, "/v1/commands", limit="1", after=str(one["next_after"])))[1]
    assert two["items"][0]["id"] > one["items"][0]["id"]


async def test_openapi_document_lists_every_route_and_matches_answers(api: tuple[str, StatusApi]) -> None:
    base, status_api = api
    status, document = await get(base, "/openapi.json")
    assert status == 200
    assert document["openapi"].startswith("3.")
    served = set(status_api.served.paths())
    assert served == set(document["paths"])
    assert {"/v1/rayjobs", "/v1/raycronjobs/{namespace}/{name}/transitions", "/v1/commands"} <= served
    components = document["components"]["schemas"]
    for schema in components.values():
        jsonschema.Draft202012Validator.check_schema(schema)

    def validate(path: str, body: Any) -> None:
        ref = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        jsonschema.validate(body, {"$ref": ref, "components": document["components"]})

    validate("/v1/resources", (await get(base, "/v1/resources"))[1])
    validate("/v1/rayjobs/{namespace}/{name}", (await get(base, "/v1/rayjobs/default/job-a"))[1])
    validate(
        "/v1/rayjobs/{namespace}/{name}/transitions", (await get(base, "/v1/rayjobs/default/job-a/transitions"))[1]
    )
    validate("/v1/commands", (await get(base, "/v1/commands"))[1])
    error = document["paths"]["/v1/commands"]["get"]["responses"]["400"]["content"]["application/json"]["schema"]
    jsonschema.validate(
        (await get(base, "/v1/commands", outcome="x"))[1], {**error, "components": document["components"]}
    )
