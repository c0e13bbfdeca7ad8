"""The byte-level checks that run before any decoder sees bus or API-server JSON."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schema.bounds import TooComplex, check_bounds, nesting_depth, truncate_nesting

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n', max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(json_values)
def test_the_depth_of_any_document_is_found_without_decoding_it(value: Any) -> None:
    data = msgspec.json.encode(value)
    assert nesting_depth(data) == depth(value)
    assert nesting_depth(data, limit=depth(value) - 1) is None if depth(value) else True


@given(json_values, st.integers(0, 4))
def test_a_document_is_refused_exactly_when_it_nests_deeper_than_the_limit(value: Any, limit: int) -> None:
    data = msgspec.json.encode(value)
    if depth(value) > limit:
        with pytest.raises(TooComplex, match="nested deeper"):
            check_bounds(data, max_nesting=limit)
    else:
        check_bounds(data, max_nesting=limit)


@given(json_values, st.integers(0, 4))
def test_truncation_keeps_the_shallow_part(value: Any, limit: int) -> None:
    truncated = msgspec.json.decode(truncate_nesting(msgspec.json.encode(value), limit))
    assert depth(truncated) <= limit
    if depth(value) <= limit:
        assert truncated == value


def test_msgspec_breaking_depths_and_unclosed_brackets_are_refused_with_the_reason() -> None:
    with pytest.raises(TooComplex, match="nested deeper than 100 levels"):
        check_bounds(b'{"a":' * 2000 + b"1" + b"}" * 2000)
    with pytest.raises(TooComplex, match="nested deeper than 100 levels"):
        check_bounds(b"[" * 5000)
    with pytest.raises(TooComplex, match="bytes, more than the 10 accepted"):
        check_bounds(b"[" + b"1," * 10 + b"1]", max_bytes=10)
    check_bounds(b"[" * 100 + b"]" * 100)
