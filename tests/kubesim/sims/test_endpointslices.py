"""The EndpointSlice simulator's Service index (its behaviour end to end is in test_controllers)."""

from __future__ import annotations


def test_selector_index_finds_exactly_the_selecting_services() -> None:
    from kubesim.sims.endpointslices import SelectorIndex

    index = SelectorIndex()
    common = {"app.kubernetes.io/created-by": "kuberay-operator"}
    for cluster in ("a", "b", "c"):
        index.put(("ns", f"{cluster}-head-svc"), {**common, "ray.io/cluster": cluster, "ray.io/node-type": "head"})
    index.put(("ns", "all-ray"), dict(common))
    index.put(("other", "a-head-svc"), {**common, "ray.io/cluster": "a"})
    head_a = {**common, "ray.io/cluster": "a", "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    assert index.selecting("ns", head_a) == {("ns", "a-head-svc"), ("ns", "all-ray")}
    assert index.selecting("ns", {**head_a, "ray.io/node-type": "worker"}) == {("ns", "all-ray")}
    index.put(("ns", "a-head-svc"), {"ray.io/cluster": "z"})
    index.drop(("ns", "all-ray"))
    assert index.selecting("ns", head_a) == set()
