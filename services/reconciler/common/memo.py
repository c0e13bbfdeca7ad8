"""Results of pure functions remembered by the identity of their arguments.

A key's snapshots share their decoded entries (a snapshot handed out is never mutated, and the entries an
input did not change are the same objects in the next one), and so do the snapshots a replay rebuilds.
What is derived from one object alone (a RayCluster's decoded and validated spec, a worker group's Pod
template) is therefore derived once for as long as the object lasts, however many decisions read it.

Invariants: a result is returned only for the very objects it was computed from (``is``, never ``==``:
equality would cost what it saves), which the memory holds, so their ids are never reused meanwhile;
results are shared and never mutated, like the snapshots; a call that raises is not remembered. The
memory is bounded (the oldest result goes first) and safe to use from several threads (the replay
responder replays beside the worker's loop).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar, cast

REMEMBERED: Final = 256
"""Results a function remembers: more than the keys decided at once, so a key decided again soon finds its
own (some 20 KB each for a RayCluster's decoded view, less for the rest)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def by_identity(size: int = REMEMBERED) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Remember the last ``size`` results of a pure function of positional arguments, each by the
    identity of its arguments."""

    def wrap(function: Callable[_P, _R]) -> Callable[_P, _R]:
        held: dict[tuple[int, ...], tuple[tuple[Any, ...], _R]] = {}
        lock = threading.Lock()

        @functools.wraps(function)
        def remembered(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if kwargs:
                return function(*args, **kwargs)
            ids = tuple(map(id, args))
            found = held.get(ids)
            if found is not None and all(a is b for a, b in zip(found[0], args, strict=True)):
                return found[1]
            result = function(*args, **kwargs)
            with lock:
                held[ids] = (args, result)
                while len(held) > size:
                    del held[next(iter(held))]
            return result

        return remembered

    return wrap


def unremembered(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """The function itself, without the memory :func:`by_identity` gave it: for a caller that remembers what
    it makes of the result (the applier's checks keep a worker Pod's spec, not the Pod), so that both are
    not held."""
    return cast(Callable[_P, _R], getattr(function, "__wrapped__", function))
