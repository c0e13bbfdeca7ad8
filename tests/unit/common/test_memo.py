"""``common.memo``: results remembered by the identity of their arguments, never by equality."""

from __future__ import annotations

import pytest

from services.reconciler.common.memo import by_identity, unremembered


def test_a_result_is_remembered_for_the_same_objects_only() -> None:
    calls: list[object] = []

    @by_identity(size=4)
    def size_of(spec: dict[str, int], config: object) -> int:
        calls.append(spec)
        return len(spec)

    spec, config = {"a": 1}, object()
    assert size_of(spec, config) == size_of(spec, config) == 1
    assert len(calls) == 1
    assert size_of({"a": 1}, config) == 1  # equal, yet another object: computed again
    assert size_of(spec, object()) == 1
    assert len(calls) == 3


def test_the_oldest_result_goes_first_beyond_the_size() -> None:
    calls: list[int] = []

    @by_identity(size=2)
    def first(values: list[int]) -> int:
        calls.append(values[0])
        return values[0]

    one, two, three = [1], [2], [3]
    for values in (one, two, three, three, two, one):
        first(values)
    assert calls == [1, 2, 3, 1]


def test_a_call_that_raises_is_not_remembered() -> None:
    calls: list[dict[str, str]] = []

    @by_identity(size=2)
    def name_of(obj: dict[str, str]) -> str:
        calls.append(obj)
        return obj["name"]

    broken: dict[str, str] = {}
    for _ in range(2):
        with pytest.raises(KeyError):
            name_of(broken)
    assert len(calls) == 2


def test_the_function_itself_remembers_nothing() -> None:
    calls: list[dict[str, int]] = []

    def size_of(spec: dict[str, int]) -> int:
        calls.append(spec)
        return len(spec)

    remembered = by_identity(size=4)(size_of)
    spec = {"a": 1}
    assert unremembered(remembered)(spec) == unremembered(remembered)(spec) == 1
    assert len(calls) == 2
    assert unremembered(size_of) is size_of
