"""A test-only guard that makes clock, randomness, uuid and environment access raise inside reconcile.

raybus has no sandbox (temporal's ``workflow_sandbox`` re-imports modules; we do not): the import-linter
contract keeps ``random``/``uuid``/I/O modules out of reconcile code, and this guard catches what an
import ban cannot (``datetime.now()``, ``time.time()``, ``os.environ``). While active it replaces, by
patching, the forbidden functions of ``FORBIDDEN`` on their modules and on every module of the watched
packages that imported them by name (``from time import time``), and ``os.environ`` by a mapping whose
every read raises. ``datetime.now/utcnow/today`` and ``date.today`` are methods of C types, which cannot
be patched, so a profile hook (this thread only) refuses those calls. Everything is restored on exit.

Patching is process-global while active, but the replacements refuse only on the thread that entered
the guard: other threads of the process (the threads of services a test runs beside the guarded
reconcile, such as a lease renewal) get the original function or ``os.environ``. A profile hook that
raises is removed by CPython: the first forbidden ``now()`` raises, which is all a test needs.

Rejected: replacing ``datetime.datetime`` by a subclass with a raising ``now`` (msgspec checks types
by identity: ``msgspec.convert(x, datetime)`` in a patched module would stop accepting strings), and a
profile hook for everything (10x slower, and it cannot tell reconcile's calls from msgspec's).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import random
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType, ModuleType
from typing import Any, Final

from schema.config import OperatorConfig
from schema.decision import Decision, ReconcileFn, Snapshot
from schema.keys import KeyKind

WATCHED_PACKAGES: Final = (
    "services.reconciler.raycluster",
    "services.reconciler.rayjob",
    "services.reconciler.raycronjob",
    "services.reconciler.rayservice",
    "schema",
)

FORBIDDEN: Final[tuple[tuple[ModuleType, str], ...]] = (
    (time, "time"),
    (time, "time_ns"),
    (time, "monotonic"),
    (time, "monotonic_ns"),
    (time, "perf_counter"),
    (time, "perf_counter_ns"),
    (time, "localtime"),
    (time, "ctime"),
    (random, "random"),
    (random, "randint"),
    (random, "randrange"),
    (random, "choice"),
    (random, "choices"),
    (random, "shuffle"),
    (random, "sample"),
    (random, "uniform"),
    (random, "getrandbits"),
    (random, "randbytes"),
    (random, "gauss"),
    (uuid, "uuid1"),
    (uuid, "uuid4"),
    (os, "urandom"),
    (os, "getenv"),
    (os, "getenvb"),
    (secrets, "token_bytes"),
    (secrets, "token_hex"),
    (secrets, "token_urlsafe"),
    (secrets, "randbelow"),
    (secrets, "choice"),
)


class NondeterministicCall(AssertionError):
    """Reconcile called something whose result is not a function of its arguments."""


def _forbidden(name: str, original: Callable[..., Any], guarded_thread: int) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != guarded_thread:
            return original(*args, **kwargs)
        raise NondeterministicCall(f"reconcile called {name}(): time, randomness and env come in as arguments")

    refuse.__name__ = name
    return refuse


class _ForbiddenEnviron(Mapping[str, str]):
    """Stands in for ``os.environ``: any read on the guarded thread raises."""

    def __init__(self, original: Mapping[str, str], guarded_thread: int) -> None:
        self._original = original
        self._guarded_thread = guarded_thread

    def _allowed(self) -> Mapping[str, str]:
        if threading.get_ident() != self._guarded_thread:
            return self._original
        raise NondeterministicCall("reconcile read os.environ: configuration comes in as OperatorConfig")

    def __getitem__(self, key: str) -> str:
        return self._allowed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._allowed())

    def __len__(self) -> int:
        return len(self._allowed())

    def __contains__(self, key: object) -> bool:
        return key in self._allowed()

    def get(self, key: str, default: Any = None) -> Any:
        return self._allowed().get(key, default)

    def copy(self) -> dict[str, str]:
        return dict(self._allowed())


_CLOCK_READERS: Final = frozenset({"now", "utcnow", "today"})


def _clock_profile(frame: FrameType, event: str, arg: object) -> None:
    """A profile hook refusing ``datetime.now/utcnow/today`` and ``date.today`` (C class methods)."""
    if event != "c_call" or getattr(arg, "__name__", "") not in _CLOCK_READERS:
        return
    owner = getattr(arg, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, _dt.date):
        raise NondeterministicCall(
            f"reconcile called {owner.__name__}.{getattr(arg, '__name__', '')}(): now is an argument"
        )


def _watched_modules(packages: Sequence[str]) -> list[ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and any(name == p or name.startswith(p + ".") for p in packages)
    ]


@contextlib.contextmanager
def forbid_nondeterminism(packages: Sequence[str] = WATCHED_PACKAGES) -> Iterator[None]:
    """Inside: every call in ``FORBIDDEN``, ``datetime.now/utcnow/today``, ``date.today`` and any
    ``os.environ`` read raise :class:`NondeterministicCall`, also through names imported by the modules of
    ``packages``."""
    modules = _watched_modules(packages)
    here = threading.get_ident()
    replacements: dict[int, Any] = {}
    for module, name in FORBIDDEN:
        original = getattr(module, name)
        replacements[id(original)] = _forbidden(f"{module.__name__}.{name}", original, here)
    replacements[id(os.environ)] = _ForbiddenEnviron(os.environ, here)
    originals: dict[int, Any] = {id(getattr(m, n)): getattr(m, n) for m, n in FORBIDDEN}
    originals[id(os.environ)] = os.environ
    patched: list[tuple[ModuleType, str, Any]] = []
    targets = {*modules, time, random, uuid, os, secrets}
    previous_profile = sys.getprofile()
    try:
        for module in targets:
            for attr, value in list(vars(module).items()):
                if id(value) in replacements and originals.get(id(value)) is value:
                    patched.append((module, attr, value))
                    setattr(module, attr, replacements[id(value)])
        sys.setprofile(_clock_profile)
        yield
    finally:
        sys.setprofile(previous_profile)
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)


def guarded(
    reconcilers: Mapping[KeyKind, ReconcileFn], packages: Sequence[str] = WATCHED_PACKAGES
) -> dict[KeyKind, ReconcileFn]:
    """The same reconcilers, each call run inside :func:`forbid_nondeterminism`."""

    def wrap(reconcile: ReconcileFn) -> ReconcileFn:
        def call(snapshot: Snapshot, now: _dt.datetime, config: OperatorConfig) -> Decision:
            with forbid_nondeterminism(packages):
                return reconcile(snapshot, now, config)

        return call

    return {kind: wrap(fn) for kind, fn in reconcilers.items()}
