"""The projection's packed object bytes: exact round trips, small for objects alike, one dictionary per kind."""

from __future__ import annotations

import msgspec

from services.edge.watch.packing import Packer, window_bits


def pod(name: str, ip: str) -> bytes:
    return msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"ray.io/cluster": "c", "ray.io/group": "g"}},
            "spec": {
                "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.41.0", "args": ["ray start"] * 20}]
            },
            "status": {"phase": "Running", "podIP": ip},
        }
    )


def test_objects_come_back_exactly_and_alike_ones_pack_small() -> None:
    packer = Packer()
    first, second = pod("c-worker-a", "10.0.0.1"), pod("c-worker-b", "10.0.0.2")
    packed = [packer.pack("Pod", raw) for raw in (first, second)]
    assert [packer.unpack("Pod", value) for value in packed] == [first, second]
    assert len(packed[1]) < len(second) / 5  # the first Pod is the dictionary the second is packed against


def test_each_kind_keeps_the_dictionary_it_started_with() -> None:
    packer = Packer()
    service = msgspec.json.encode({"kind": "Service", "metadata": {"name": "c-head-svc"}})
    packed_service = packer.pack("Service", service)
    packed_pods = [packer.pack("Pod", pod(f"w{i}", f"10.0.0.{i}")) for i in range(3)]
    assert packer.unpack("Service", packed_service) == service
    assert [packer.unpack("Pod", value) for value in packed_pods] == [pod(f"w{i}", f"10.0.0.{i}") for i in range(3)]
    assert packer.pack("Pod", b"") == b"" and packer.unpack("Pod", b"") == b""


def test_a_first_object_larger_than_deflates_window_serves_as_the_dictionary() -> None:
    packer = Packer()
    large = msgspec.json.encode({"kind": "ConfigMap", "data": {f"k{i}": "v" * 100 for i in range(2000)}})
    assert packer.unpack("ConfigMap", packer.pack("ConfigMap", large)) == large
    other = msgspec.json.encode({"kind": "ConfigMap", "data": {"k1": "v" * 100}})
    assert packer.unpack("ConfigMap", packer.pack("ConfigMap", other)) == other


def test_the_window_reaches_back_over_the_dictionary_and_a_quarter_more() -> None:
    assert window_bits(b"x" * 100) == 9  # zlib's smallest window
    assert window_bits(b"x" * 3000) == 12
    assert window_bits(b"x" * 3500) == 13
    assert window_bits(b"x" * 100_000) == 15  # zlib's largest: only the dictionary's last 32 KiB are kept


def test_an_object_longer_than_the_window_still_comes_back() -> None:
    packer = Packer()
    small = msgspec.json.encode({"kind": "Service", "metadata": {"name": "s"}})
    large = msgspec.json.encode(
        {"kind": "Service", "metadata": {"name": "s", "labels": {f"k{i}": "v" for i in range(500)}}}
    )
    assert [packer.unpack("Service", packer.pack("Service", raw)) for raw in (small, large)] == [small, large]
