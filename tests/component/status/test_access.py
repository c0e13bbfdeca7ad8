"""Callers of the history API reviewed by the API server (kubesim over HTTP): 401 without a token or with one
the TokenReview rejects, 403 for a user the SubjectAccessReview denies, 200 for a granted one; answers cached
for the configured time; no token in any answer or log line."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nats.aio.client import Client

from kubesim.reviews import AccessRule, AccessTable, TokenUser
from services.runtime.settings import RaybusSettings, StatusAuthSettings
from services.status.access import AccessReviewer
from services.status.api import ApiError
from tests.component.status.conftest import StatusRunner, publish_results
from tests.fixtures.kubesim import KubeSimHandle, reviewing_kubesim
from tests.fixtures.nats import free_port
from tests.helpers import eventually
from tests.unit.status.builders import lifecycle

OWN_TOKEN = "status-own-token-5f1e"
READER = "reader-token-9a7c"
OUTSIDER = "outsider-token-31d2"
TOKENS = (OWN_TOKEN, READER, OUTSIDER, "forged-token-77b0")
TABLE = AccessTable(
    tokens={
        OWN_TOKEN: TokenUser(username="system:serviceaccount:raybus-system:raybus-status"),
        READER: TokenUser(username="alice", uid="a-1", groups=("history-readers", "system:authenticated")),
        OUTSIDER: TokenUser(username="mallory", groups=("system:authenticated",)),
    },
    rules=(AccessRule(subject="group:history-readers", verbs=("get",), non_resource_urls=("/v1/*", "/openapi.json")),),
)


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeSimHandle]:
    yield from reviewing_kubesim(TABLE)


@pytest.fixture
def own_token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(OWN_TOKEN + "\n")
    return path


def _auth(kube: KubeSimHandle, token_file: Path, *, cache_ttl: float = 10.0) -> StatusAuthSettings:
    return StatusAuthSettings(enabled=True, api_url=kube.url, token_file=str(token_file), cache_ttl=cache_ttl)


def _set_table(kube: KubeSimHandle, table: AccessTable) -> None:
    kube.call(lambda: setattr(kube.sim, "settings", dataclasses.replace(kube.sim.settings, access=table)))


@pytest.fixture
async def guarded(
    runner: StatusRunner, settings: RaybusSettings, kube: KubeSimHandle, own_token: Path, nc: Client
) -> StatusRunner:
    """The status service, with callers reviewed, holding one RayJob."""
    runner.settings = dataclasses.replace(
        settings, status=dataclasses.replace(settings.status, auth=_auth(kube, own_token))
    )
    await publish_results(nc.jetstream(), [lifecycle("created", uid="u1", name="demo")])
    return await runner.start()


async def _get(url: str, token: str | None = None, *, scheme: str = "Bearer") -> tuple[int, dict[str, Any], str]:
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        text = await response.text()
        return response.status, dict(response.headers), text


async def test_callers_are_reviewed_by_the_api_server(guarded: StatusRunner, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"{guarded.url}/v1/rayjobs"
    answers = []

    status, headers, body = await _get(url)
    answers.append(body)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert "bearer token is required" in body

    status, _, body = await _get(url, "forged-token-77b0")
    answers.append(body)
    assert status == 401
    assert "not accepted" in body

    status, _, body = await _get(url, OUTSIDER)
    answers.append(body)
    assert status == 403
    assert json.loads(body)["message"] == 'user "mallory" may not get path "/v1/rayjobs"'

    status, _, body = await _get(url, READER)
    answers.append(body)
    assert status == 200
    assert "items" in json.loads(body)

    async def recorded() -> bool:
        status, _, body = await _get(f"{url}/default/demo", READER)
        return status == 200

    await eventually(recorded, message="the RayJob is served to the granted reader")
    status, _, body = await _get(f"{guarded.url}/console/", READER)  # not granted to the group
    assert status == 403
    assert (await _get(f"{guarded.url}/v1/commands", READER, scheme="Basic"))[0] == 401

    for token in TOKENS:
        assert all(token not in answer for answer in answers)
        assert token not in caplog.text


async def test_answers_are_cached_for_the_configured_time(kube: KubeSimHandle, own_token: Path) -> None:
    now = [0.0]
    reviewer = AccessReviewer(_auth(kube, own_token, cache_ttl=10.0), clock=lambda: now[0])
    try:
        caller = await reviewer.check(f"Bearer {READER}", "/v1/rayjobs")
        assert (caller.username, caller.groups) == ("alice", ("history-readers", "system:authenticated"))
        assert reviewer.reviews == 2  # one TokenReview, one SubjectAccessReview
        await reviewer.check(f"Bearer {READER}", "/v1/rayjobs")
        assert reviewer.reviews == 2
        await reviewer.check(f"Bearer {READER}", "/v1/commands")  # a new path: the token is known
        assert reviewer.reviews == 3
        with pytest.raises(ApiError) as denied:
            await reviewer.check(f"Bearer {OUTSIDER}", "/v1/rayjobs")
        assert denied.value.status == 403
        with pytest.raises(ApiError):
            await reviewer.check(f"Bearer {OUTSIDER}", "/v1/rayjobs")
        assert reviewer.reviews == 5  # the denial is cached too

        _set_table(kube, AccessTable(tokens={}, rules=TABLE.rules))  # every token revoked
        now[0] = 9.9
        await reviewer.check(f"Bearer {READER}", "/v1/rayjobs")  # still within the cache time
        now[0] = 10.0
        with pytest.raises(ApiError) as expired:
            await reviewer.check(f"Bearer {READER}", "/v1/rayjobs")
        assert expired.value.status == 401
    finally:
        _set_table(kube, TABLE)
        await reviewer.close()


async def test_an_unreachable_api_server_is_a_503_that_names_no_token(
    own_token: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = StatusAuthSettings(enabled=True, api_url=f"http://127.0.0.1:{free_port()}", token_file=str(own_token))
    reviewer = AccessReviewer(settings)
    try:
        with pytest.raises(ApiError) as failed:
            await reviewer.check(f"Bearer {READER}", "/v1/rayjobs")
    finally:
        await reviewer.close()
    assert failed.value.status == 503
    for token in TOKENS:
        assert token not in failed.value.message
        assert token not in caplog.text
