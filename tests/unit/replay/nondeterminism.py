"""A test-only guard that makes clock, randomness, uuid and environment access raise inside reconcile.

raybus has no sandbox (temporal's ``workflow_sandbox`` re-imports modules; we do not): the import-linter
contract keeps ``random``/``uuid``/I/O modules out of reconcile code, and this guard catches what an
import ban cannot (``datetime.now()``, ``time.time()``, ``os.environ``). While active it replaces, by
patching, the forbidden functions of ``FORBIDDEN`` on their modules and on every module of the watched
packages that imported them by name (``from time import time``); ``datetime.datetime`` / ``datetime.date``
become subclasses whose ``now``/``utcnow``/``today`` raise but that construct, compare and ``isinstance``
exactly like the real classes. Everything is restored on exit.

It is process-global while active (patching is), so use it around a reconcile call only, never around
code that runs other threads. msgspec resolves struct annotations lazily, so the guard first builds the
type info of every Struct of the watched modules with the real classes in place.

Rejected: ``sys.setprofile`` tracing (catches C calls without patching, but costs ~10x per call and
cannot tell a forbidden ``time.time`` call by reconcile from one by msgspec internals).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import random
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, NoReturn

import msgspec

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


def _forbidden(name: str) -> Callable[..., NoReturn]:
    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NondeterministicCall(f"reconcile called {name}(): time, randomness and env come in as arguments")

    refuse.__name__ = name
    return refuse


class _ForbiddenEnviron(Mapping[str, str]):
    """Stands in for ``os.environ``: any read raises."""

    def _refuse(self) -> NoReturn:
        raise NondeterministicCall("reconcile read os.environ: configuration comes in as OperatorConfig")

    def __getitem__(self, key: str) -> str:
        self._refuse()

    def __iter__(self) -> Iterator[str]:
        self._refuse()

    def __len__(self) -> int:
        self._refuse()

    def __contains__(self, key: object) -> bool:
        self._refuse()

    def get(self, key: str, default: Any = None) -> Any:
        self._refuse()

    def copy(self) -> dict[str, str]:
        self._refuse()


def _guarded_class(real: type) -> type:
    """A subclass of ``real`` whose clock reads raise; instances and isinstance stay the real ones."""

    class _Meta(type):
        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, real)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real)

    def new(_cls: type, *args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs)

    namespace: dict[str, Any] = {"__new__": new, "__module__": real.__module__, "__qualname__": real.__qualname__}
    for reader in ("now", "utcnow", "today"):
        if hasattr(real, reader):
            namespace[reader] = staticmethod(_forbidden(f"{real.__name__}.{reader}"))
    constructors = (
        "fromisoformat",
        "fromtimestamp",
        "utcfromtimestamp",
        "fromordinal",
        "combine",
        "strptime",
        "fromisocalendar",
    )
    for constructor in constructors:
        if hasattr(real, constructor):
            namespace[constructor] = getattr(real, constructor)
    return _Meta(real.__name__, (real,), namespace)


def _watched_modules(packages: Sequence[str]) -> list[ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and any(name == p or name.startswith(p + ".") for p in packages)
    ]


@functools.cache
def _warm_struct(struct: type[msgspec.Struct]) -> None:
    with contextlib.suppress(Exception):  # a struct msgspec cannot decode is not our concern here
        msgspec.json.Decoder(struct)


def _warm_msgspec(modules: Sequence[ModuleType]) -> None:
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, type) and issubclass(value, msgspec.Struct) and value.__module__ == module.__name__:
                _warm_struct(value)


@contextlib.contextmanager
def forbid_nondeterminism(packages: Sequence[str] = WATCHED_PACKAGES) -> Iterator[None]:
    """Inside: every call in ``FORBIDDEN``, ``datetime.now/utcnow/today``, ``date.today`` and any
    ``os.environ`` read raise :class:`NondeterministicCall`, also through names imported by the modules of
    ``packages``."""
    modules = _watched_modules(packages)
    _warm_msgspec(modules)
    replacements: dict[int, Any] = {}
    for module, name in FORBIDDEN:
        replacements[id(getattr(module, name))] = _forbidden(f"{module.__name__}.{name}")
    replacements[id(os.environ)] = _ForbiddenEnviron()
    replacements[id(_dt.datetime)] = _guarded_class(_dt.datetime)
    replacements[id(_dt.date)] = _guarded_class(_dt.date)
    originals: dict[int, Any] = {id(getattr(m, n)): getattr(m, n) for m, n in FORBIDDEN}
    originals[id(os.environ)] = os.environ
    originals[id(_dt.datetime)] = _dt.datetime
    originals[id(_dt.date)] = _dt.date
    patched: list[tuple[ModuleType, str, Any]] = []
    targets = {*modules, time, random, uuid, os, secrets, _dt}
    try:
        for module in targets:
            for attr, value in list(vars(module).items()):
                if id(value) in replacements and originals.get(id(value)) is value:
                    patched.append((module, attr, value))
                    setattr(module, attr, replacements[id(value)])
        yield
    finally:
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
