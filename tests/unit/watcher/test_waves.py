"""Which commands of a batch the applier runs side by side."""

from __future__ import annotations

from schema.messages import Command, CreateObject, DeleteObject, EmitEvent, ObjectRef, PatchStatus
from services.edge.apply.waves import waves


def ref(kind: str, name: str) -> ObjectRef:
    return ObjectRef(api_version="v1", kind=kind, namespace="default", name=name)


def create(kind: str, name: str) -> CreateObject:
    return CreateObject(id=f"create/{kind}/{name}", target=ref(kind, name), body={})


def delete(kind: str, name: str) -> DeleteObject:
    return DeleteObject(id=f"delete/{kind}/{name}", target=ref(kind, name))


def event(n: int) -> EmitEvent:
    regarding = ref("RayCluster", "c")
    return EmitEvent(id=f"event/{n}", regarding=regarding, event_type="Normal", reason="Created", message="")


def indexes(commands: list[Command]) -> list[list[int]]:
    return [[index for index, _ in wave] for wave in waves(commands)]


def test_a_scale_up_is_one_wave_and_what_depends_on_order_runs_alone() -> None:
    commands: list[Command] = [
        create("Service", "c-head-svc"),
        create("Pod", "c-head"),
        event(1),
        create("Pod", "c-w1"),
        event(2),
        create("Pod", "c-w2"),
        event(3),
        PatchStatus(id="status", target=ref("RayCluster", "c"), status={}),
        create("Role", "r"),
        create("RoleBinding", "r"),
    ]
    assert indexes(commands) == [[0], [1, 2, 3, 4, 5, 6], [7], [8], [9]]


def test_two_commands_on_one_pod_never_share_a_wave() -> None:
    commands: list[Command] = [delete("Pod", "c-w1"), event(1), create("Pod", "c-w1"), create("Pod", "c-w2")]
    assert indexes(commands) == [[0, 1], [2, 3]]


def test_every_command_is_in_exactly_one_wave_in_order() -> None:
    commands: list[Command] = [*(event(n) for n in range(5)), create("Service", "s"), event(9)]
    assert [i for wave in indexes(commands) for i in wave] == list(range(7))
    assert indexes(commands) == [[0, 1, 2, 3, 4], [5], [6]]
