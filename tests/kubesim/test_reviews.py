"""TokenReview and SubjectAccessReview through the official client: answered from the access table,
create-only, malformed reviews refused like the real server does."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubesim.reviews import ACCESS_REVIEW_PATH, AccessRule, AccessTable, TokenUser
from tests.fixtures.kubesim import KubeSimHandle, reviewing_kubesim

TABLE = AccessTable(
    tokens={
        "alice-token": TokenUser(username="alice", uid="u-1", groups=("readers", "system:authenticated")),
        "bob-token": TokenUser(username="bob"),
    },
    rules=(
        AccessRule(subject="group:readers", verbs=("get",), non_resource_urls=("/v1/*",)),
        AccessRule(subject="bob", verbs=("get",), non_resource_urls=("/openapi.json",)),
        AccessRule(subject="alice", verbs=("get", "list"), resources=("ray.io/rayjobs",), namespace="team"),
    ),
)


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeSimHandle]:
    yield from reviewing_kubesim(TABLE)


def _review_token(kube: KubeSimHandle, token: str) -> client.V1TokenReviewStatus:
    api = client.AuthenticationV1Api(kube.api_client)
    review = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert review.status is not None
    return review.status


def _allowed(kube: KubeSimHandle, spec: client.V1SubjectAccessReviewSpec) -> bool:
    api = client.AuthorizationV1Api(kube.api_client)
    status = api.create_subject_access_review(client.V1SubjectAccessReview(spec=spec)).status
    assert status is not None
    return bool(status.allowed)


def test_token_review_knows_the_tables_tokens(kube: KubeSimHandle) -> None:
    alice = _review_token(kube, "alice-token")
    assert alice.authenticated is True
    assert alice.user is not None
    assert (alice.user.username, alice.user.uid, alice.user.groups) == (
        "alice",
        "u-1",
        ["readers", "system:authenticated"],
    )
    bob = _review_token(kube, "bob-token").user
    assert bob is not None
    assert bob.username == "bob"
    stranger = _review_token(kube, "made-up")
    assert stranger.authenticated is False
    assert stranger.user is None
    assert stranger.error


def test_access_review_follows_the_rules(kube: KubeSimHandle) -> None:
    def url(user: str, path: str, *, groups: list[str] | None = None, verb: str = "get") -> bool:
        attributes = client.V1NonResourceAttributes(path=path, verb=verb)
        return _allowed(
            kube, client.V1SubjectAccessReviewSpec(user=user, groups=groups, non_resource_attributes=attributes)
        )

    assert url("alice", "/v1/rayjobs", groups=["readers"])
    assert not url("alice", "/v1/rayjobs")  # the grant is the group's
    assert not url("alice", "/console/", groups=["readers"])
    assert not url("alice", "/v1/rayjobs", groups=["readers"], verb="post")
    assert url("bob", "/openapi.json")
    assert not url("bob", "/openapi.json/x")
    assert not url("carol", "/v1/rayjobs")

    def resource(namespace: str, verb: str = "get", plural: str = "rayjobs") -> bool:
        attributes = client.V1ResourceAttributes(group="ray.io", resource=plural, verb=verb, namespace=namespace)
        return _allowed(kube, client.V1SubjectAccessReviewSpec(user="alice", resource_attributes=attributes))

    assert resource("team")
    assert resource("team", verb="list")
    assert not resource("other")
    assert not resource("team", verb="delete")
    assert not resource("team", plural="rayclusters")


def test_malformed_reviews_are_refused_and_reviews_are_create_only(kube: KubeSimHandle) -> None:
    api = client.AuthorizationV1Api(kube.api_client)
    with pytest.raises(ApiException) as nobody:
        api.create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    non_resource_attributes=client.V1NonResourceAttributes(path="/", verb="get")
                )
            )
        )
    assert nobody.value.status == 422
    assert nobody.value.body is not None
    assert "at least one of user or group" in nobody.value.body
    with pytest.raises(ApiException) as neither:
        api.create_subject_access_review(
            client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(user="alice"))
        )
    assert neither.value.status == 422
    with pytest.raises(urllib.error.HTTPError) as listed:
        urllib.request.urlopen(kube.url + ACCESS_REVIEW_PATH, timeout=30)
    assert listed.value.code == 405
    listed.value.close()
