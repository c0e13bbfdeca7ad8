"""The status database: the only module that issues SQL.

Writes: :meth:`StatusStore.persist` stores one fetched batch of command results in **one transaction**
(the consumer acks only after it commits, invariant 5). Every insert is ``INSERT ... ON CONFLICT DO
NOTHING`` on a natural key, so a redelivered or duplicated result changes nothing (invariant 1).
Resource rows and kind views are merged with the idempotent rules of ``transition_folds``. To stay correct
with several status replicas on PostgreSQL, a batch first creates the rows of the uids it touches
(conflicts ignored) and then locks them ``FOR UPDATE`` in uid order before reading and merging; the lock
serialises writers of one uid, the fixed order avoids deadlocks (SQLite serialises writers anyway).

Errors are translated here, into ``services.runtime.errors``: connection trouble, lock timeouts and deadlocks become
``RetryableError`` (the consumer retries the same batch), data the database refuses (a NUL byte on
PostgreSQL, an out-of-range integer) becomes ``PermanentError`` (the consumer isolates the message and
dead-letters it).

Reads serve the HTTP API; they return ORM rows (detached, fully loaded) and know nothing about JSON.
Not here: deciding what to persist (``consumer``), or how views are computed (``transition_folds``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from schema.keys import KeyKind
from schema.messages import CommandResult
from schema.messages import Transition as TransitionMessage
from services.runtime.errors import PermanentError, RetryableError
from services.status.kinds import RUN_RAYJOB_ATTRIBUTE, SCHEDULE_FIELD, kind_info
from services.status.models import Base, Command, RayJobView, RayServiceView, Resource, Transition
from services.status.transition_folds import (
    Fact,
    FieldMark,
    ResourceState,
    fold_rayjob,
    fold_rayservice,
    fold_resource,
    status_of,
    without_repeats,
)

_COMMANDS = Base.metadata.tables[Command.__tablename__]
_TRANSITIONS = Base.metadata.tables[Transition.__tablename__]
_RESOURCES = Base.metadata.tables[Resource.__tablename__]
_TRANSITION_KEY = ("uid", "field", "from_value", "to_value", "resource_version")
_COMMAND_KEY = ("batch_id", "command_id", "batch_seq", "delivery")
"""One execution of a command: redelivering its result changes nothing, running it again adds a row."""
_INSERTED_COLUMNS = tuple(
    _TRANSITIONS.c[name]
    for name in (
        "kind",
        "uid",
        "namespace",
        "name",
        "field",
        "from_value",
        "to_value",
        "at",
        "stream_seq",
        "attributes",
        "reason",
    )
)
_PERMANENT_SQLSTATE_CLASSES = {"22", "23", "54"}
_SQLITE_CACHED_STATEMENTS = 16
"""Compiled statements each SQLite connection keeps (Python's default is 128). A batch of rows is one
multi-row INSERT whose text changes with the batch's size, so the cache fills with large compiled inserts
used once: 12 MB of the status service's peak at 1,000 RayClusters (docs/memory.md). The few statements
that repeat stay cached."""
"""Data exception, integrity violation, program limit exceeded: the same data will fail again."""


class ResultRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded command result with where it came from."""

    result: CommandResult
    stream_seq: int
    """Its sequence in RAYBUS_RESULTS."""
    trace_id: str
    """The result's own trace id, else the one its message headers carried, else ""."""


@dataclass(frozen=True)
class PersistStats:
    """What one :meth:`StatusStore.persist` call wrote."""

    results: int
    transitions: int
    """Transition rows actually inserted (duplicates excluded)."""
    inserted: tuple[InsertedTransition, ...] = ()
    """Those rows, each once per database however often its result is delivered (what metrics count)."""
    views: Mapping[str, msgspec.Struct] = field(default_factory=dict)
    """The kind views refreshed by the call, by uid (the results of ``transition_folds``)."""


@dataclass(frozen=True)
class InsertedTransition:
    """A transition row this database had not stored before."""

    kind: str
    uid: str
    namespace: str
    name: str
    fact: Fact


@dataclass(frozen=True)
class ResourceRecord:
    """A resource row with its kind view, when its kind has one."""

    resource: Resource
    rayjob: RayJobView | None = None
    rayservice: RayServiceView | None = None


@dataclass(frozen=True)
class RunRecord:
    """One scheduled run of a RayCronJob (a ``schedule`` transition) and the RayJob it created.

    ``rayjob`` is None while the history has not seen that RayJob (or the tick names none).
    """

    transition: Transition
    rayjob: ResourceRecord | None


@dataclass(frozen=True)
class _View:
    """A kind view: a table keyed by uid, filled by folding the uid's transitions."""

    kind: KeyKind
    table: sa.Table
    fold: Callable[[Iterable[Fact]], msgspec.Struct]


_VIEWS: tuple[_View, ...] = (
    _View(kind="RayJob", table=Base.metadata.tables[RayJobView.__tablename__], fold=fold_rayjob),
    _View(kind="RayService", table=Base.metadata.tables[RayServiceView.__tablename__], fold=fold_rayservice),
)


def redact_db_url(db_url: str) -> str:
    """The URL without its password, safe for logs and error messages."""
    try:
        return make_url(db_url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL must not leak through the error that reports it
        return "<unparsable database URL>"


def create_engine(db_url: str, *, connect_timeout: float = 5.0) -> AsyncEngine:
    """An async engine for ``db_url`` with raybus's connection settings.

    SQLite gets WAL (API readers never block the writer) and a busy timeout, and its directory is
    created; PostgreSQL gets a connect timeout and pre-ping, so a dead server fails fast.

    Raises:
        PermanentError: the URL does not parse or names an unsupported driver.
    """
    try:
        url = make_url(db_url)
        backend = url.get_backend_name()
        if backend == "sqlite":
            if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
                with contextlib.suppress(OSError):  # the first connect reports the real problem
                    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_async_engine(
                url, connect_args={"timeout": connect_timeout, "cached_statements": _SQLITE_CACHED_STATEMENTS}
            )
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
            return engine
        if backend == "postgresql":
            return create_async_engine(url, pool_pre_ping=True, connect_args={"timeout": connect_timeout})
    except (sa.exc.ArgumentError, ImportError) as exc:  # the error text may quote the URL: never show it
        reason = "driver not installed" if isinstance(exc, ImportError) else "cannot be parsed"
        raise PermanentError(f"database URL {redact_db_url(db_url)}: {reason}") from exc
    raise PermanentError(f"database URL {redact_db_url(db_url)}: only sqlite and postgresql are supported")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a failure: of the driver's error SQLAlchemy wrapped, or of a driver's error itself."""
    for source in (getattr(exc, "orig", None), exc):
        code = getattr(source, "sqlstate", None) or getattr(source, "pgcode", None)
        if code:
            return str(code)
    return ""


def _database_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the database (or the way to it) failing rather than a bug: SQLAlchemy's errors, the
    network's, and a driver's error that carries an SQLSTATE. SQLAlchemy does not wrap everything: asyncpg
    raises a server's refusal of a new connection ("starting up", "shutting down", "not currently
    accepting connections") as it is."""
    return isinstance(exc, sa.exc.SQLAlchemyError | OSError | TimeoutError) or bool(_sqlstate(exc))


def _translate(exc: BaseException, what: str) -> PermanentError | RetryableError:
    """Classify a database failure: does retrying the same statement have a chance?"""
    sqlstate = _sqlstate(exc)
    permanent = (
        isinstance(exc, sa.exc.IntegrityError | sa.exc.DataError)
        or sqlstate[:2] in _PERMANENT_SQLSTATE_CLASSES
        or (isinstance(exc, sa.exc.StatementError) and not isinstance(exc, sa.exc.DBAPIError))
        or isinstance(exc, OverflowError)
    )
    message = f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return PermanentError(message) if permanent else RetryableError(message)


class StatusStore:
    """Reads and writes the history tables through one async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self._dialect = engine.dialect.name

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def close(self) -> None:
        """Release every pooled connection."""
        await self._engine.dispose()

    async def ping(self, *, timeout: float = 5.0) -> None:
        """Check that the database answers.

        Raises:
            RetryableError: it does not (within ``timeout`` seconds); the message names the URL without
                its password.
        """
        try:
            async with asyncio.timeout(timeout), self._engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            if not _database_failure(exc):
                raise
            url = self._engine.url.render_as_string(hide_password=True)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RetryableError(f"database {url} is unreachable: {reason}") from exc

    # --- writes ------------------------------------------------------------------------------------

    async def persist(self, records: Sequence[ResultRecord]) -> PersistStats:
        """Store ``records`` (audit rows, transitions, resource rows, kind views) in one transaction.

        Raises:
            RetryableError: the database is unavailable or the transaction lost a race; nothing was
                committed and the same call may be retried.
            PermanentError: the database refused the data of some record; nothing was committed.
        """
        try:
            async with self._engine.begin() as conn:
                return await self._persist(conn, records)
        except Exception as exc:
            if not (_database_failure(exc) or isinstance(exc, OverflowError)):
                raise
            raise _translate(exc, "persisting results") from exc

    def _insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table) if self._dialect == "postgresql" else sqlite.insert(table)

    async def _persist(self, conn: AsyncConnection, records: Sequence[ResultRecord]) -> PersistStats:
        commands: list[dict[str, Any]] = []
        transitions: list[dict[str, Any]] = []
        facts: dict[str, list[Fact]] = defaultdict(list)
        identity: dict[str, tuple[KeyKind, str, str]] = {}
        rows: dict[int, dict[str, Any]] = {}
        for record in records:
            result = record.result
            commands.append(_command_row(record))
            for t in result.transitions:
                row = _transition_row(record, t)
                fact = _fact(row)
                rows[id(fact)] = row
                facts[t.uid].append(fact)
                identity.setdefault(t.uid, (t.kind, t.namespace, t.name))
        uids = sorted(facts)
        if uids:
            steps = await self._merge_resources(conn, uids=uids, facts=facts, identity=identity)
            transitions = [rows[id(fact)] for uid in uids for fact in steps[uid]]
        if commands:
            insert = self._insert(_COMMANDS).on_conflict_do_nothing(index_elements=list(_COMMAND_KEY))
            await conn.execute(insert, commands)
        inserted: list[InsertedTransition] = []
        if transitions:
            insert = self._insert(_TRANSITIONS).on_conflict_do_nothing(index_elements=list(_TRANSITION_KEY))
            returned = await conn.execute(insert.returning(*_INSERTED_COLUMNS), transitions)
            inserted = [
                InsertedTransition(
                    kind=row.kind, uid=row.uid, namespace=row.namespace, name=row.name, fact=_fact(row._mapping)
                )
                for row in returned
            ]
        views: dict[str, msgspec.Struct] = {}
        for view in _VIEWS:
            view_uids = [uid for uid in uids if identity[uid][0] == view.kind]
            if view_uids:
                views.update(await self._refresh_view(conn, view, view_uids, identity))
        return PersistStats(results=len(records), transitions=len(inserted), inserted=tuple(inserted), views=views)

    async def _merge_resources(
        self,
        conn: AsyncConnection,
        *,
        uids: list[str],
        facts: dict[str, list[Fact]],
        identity: dict[str, tuple[KeyKind, str, str]],
    ) -> dict[str, list[Fact]]:
        """Create or update the resource rows of ``uids`` with their ``facts``; returns each uid's facts
        that are steps, in order (those that repeat a step are left out: ``transition_folds.is_repeat``)."""
        steps = {uid: without_repeats(None, facts[uid]) for uid in uids}
        created = []
        for uid in uids:
            kind, namespace, name = identity[uid]
            state = fold_resource(None, steps[uid])
            assert state is not None  # a uid's first fact is never a repeat
            created.append({"uid": uid, "kind": kind, "namespace": namespace, "name": name, **_state_row(kind, state)})
        inserted = await conn.execute(
            self._insert(_RESOURCES).on_conflict_do_nothing(index_elements=["uid"]).returning(_RESOURCES.c.uid),
            created,
        )
        new = {row.uid for row in inserted}
        locked = await conn.execute(
            sa.select(_RESOURCES).where(_RESOURCES.c.uid.in_(uids)).order_by(_RESOURCES.c.uid).with_for_update()
        )
        updates = []
        for row in locked:
            if row.uid in new:
                continue
            current = ResourceState(
                first_seen=row.first_seen,
                updated_at=row.updated_at,
                last_seq=row.last_seq,
                deleted_at=row.deleted_at,
                fields=msgspec.convert(row.fields, dict[str, FieldMark]),
            )
            steps[row.uid] = without_repeats(current, facts[row.uid])
            merged = fold_resource(current, steps[row.uid])
            assert merged is not None
            if merged != current:
                updates.append({"row_id": row.id, **_state_row(row.kind, merged)})
        if updates:
            await conn.execute(
                _RESOURCES.update().where(_RESOURCES.c.id == sa.bindparam("row_id")),
                updates,
            )
        return steps

    async def _refresh_view(
        self, conn: AsyncConnection, view: _View, uids: list[str], identity: dict[str, tuple[KeyKind, str, str]]
    ) -> dict[str, msgspec.Struct]:
        rows = await conn.execute(
            sa.select(
                _TRANSITIONS.c.uid,
                _TRANSITIONS.c.field,
                _TRANSITIONS.c.from_value,
                _TRANSITIONS.c.to_value,
                _TRANSITIONS.c.at,
                _TRANSITIONS.c.stream_seq,
                _TRANSITIONS.c.attributes,
                _TRANSITIONS.c.reason,
            )
            .where(_TRANSITIONS.c.uid.in_(uids))
            .order_by(_TRANSITIONS.c.uid, _TRANSITIONS.c.at, _TRANSITIONS.c.stream_seq, _TRANSITIONS.c.id)
        )
        history: dict[str, list[Fact]] = defaultdict(list)
        for row in rows:
            history[row.uid].append(_fact(row._mapping))
        values = []
        folds: dict[str, msgspec.Struct] = {}
        for uid in uids:
            _, namespace, name = identity[uid]
            folds[uid] = view.fold(history[uid])
            values.append({"uid": uid, "namespace": namespace, "name": name, **msgspec.structs.asdict(folds[uid])})
        insert = self._insert(view.table)
        columns = [c.name for c in view.table.columns if c.name != "uid"]
        upsert = insert.on_conflict_do_update(
            index_elements=["uid"], set_={name: getattr(insert.excluded, name) for name in columns}
        )
        await conn.execute(upsert, values)
        return folds

    # --- reads -------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncSession]:
        """A session for one read; database failures become ``RetryableError``."""
        try:
            async with self._sessions() as session:
                yield session
        except Exception as exc:
            if not _database_failure(exc):
                raise
            raise RetryableError(f"reading history: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc

    async def list_resources(
        self,
        *,
        kind: KeyKind | None = None,
        namespace: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[ResourceRecord]:
        """Resources in first-stored order, optionally filtered; ``since`` keeps those updated since."""
        query = self._resources_query().where(Resource.id > after).order_by(Resource.id).limit(limit)
        if kind is not None:
            query = query.where(Resource.kind == kind)
        if namespace is not None:
            query = query.where(Resource.namespace == namespace)
        if status is not None:
            query = query.where(Resource.status == status)
        if since is not None:
            query = query.where(Resource.updated_at >= since)
        return await self._resource_records(query)

    async def find_resource(
        self, *, kind: KeyKind, namespace: str, name: str, uid: str | None = None
    ) -> ResourceRecord | None:
        """The latest incarnation of ``kind namespace/name`` (by first_seen), or the one with ``uid``."""
        query = (
            self._resources_query()
            .where(Resource.kind == kind, Resource.namespace == namespace, Resource.name == name)
            .order_by(Resource.first_seen.desc(), Resource.id.desc())
            .limit(1)
        )
        if uid is not None:
            query = query.where(Resource.uid == uid)
        found = await self._resource_records(query)
        return found[0] if found else None

    async def list_transitions(self, uid: str, *, limit: int = 100, after: int = 0) -> list[Transition]:
        """Up to ``limit`` transitions of ``uid`` ordered by time then storage order, from the one following
        the ``after`` cursor (a transition id of ``uid``; 0 = from the first)."""
        query = sa.select(Transition).where(Transition.uid == uid)
        if after:
            # Keyset paging on (at, id), the order itself: a page goes on from the previous page's last row.
            cursor = sa.select(Transition.at).where(Transition.id == after, Transition.uid == uid).scalar_subquery()
            query = query.where(sa.or_(Transition.at > cursor, sa.and_(Transition.at == cursor, Transition.id > after)))
        async with self._reading() as session:
            result = await session.scalars(query.order_by(Transition.at, Transition.id).limit(limit))
            return list(result.all())

    async def count_transitions(self, *, kind: KeyKind, field: str, to_value: str) -> dict[str, int]:
        """How many transitions of each ``kind`` uid went to ``to_value`` in ``field`` (uids with none are
        absent); one grouped query, for seeding per-resource counters at start."""
        query = (
            sa.select(Transition.uid, sa.func.count())
            .where(Transition.kind == kind, Transition.field == field, Transition.to_value == to_value)
            .group_by(Transition.uid)
        )
        async with self._reading() as session:
            return {uid: int(count) for uid, count in (await session.execute(query)).all()}

    async def list_runs(self, cron: Resource, *, limit: int = 100) -> tuple[list[RunRecord], int]:
        """The latest ``limit`` scheduled runs of the RayCronJob incarnation ``cron``, oldest first, each
        joined with its RayJob, and how many runs are recorded in all.

        A run's RayJob is the latest incarnation of that name in the cron job's namespace first seen no
        earlier than the cron job itself (a RayJob of an older cron job of the same name predates it).
        """
        schedule = (Transition.uid == cron.uid, Transition.field == SCHEDULE_FIELD)
        async with self._reading() as session:
            total = await session.scalar(sa.select(sa.func.count()).select_from(Transition).where(*schedule))
            latest = await session.scalars(
                sa.select(Transition).where(*schedule).order_by(Transition.at.desc(), Transition.id.desc()).limit(limit)
            )
            runs = list(reversed(latest.all()))
        names = sorted({name for t in runs if (name := _run_rayjob(t))})
        found: dict[str, ResourceRecord] = {}
        if names:
            query = self._resources_query().where(
                Resource.kind == "RayJob",
                Resource.namespace == cron.namespace,
                Resource.name.in_(names),
                Resource.first_seen >= cron.first_seen,
            )
            for record in await self._resource_records(query.order_by(Resource.first_seen, Resource.id)):
                found[record.resource.name] = record  # ascending, so the latest incarnation wins
        return [RunRecord(transition=t, rayjob=found.get(_run_rayjob(t))) for t in runs], int(total or 0)

    async def list_commands(
        self,
        *,
        kind: KeyKind | None = None,
        namespace: str | None = None,
        name: str | None = None,
        outcome: str | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Command]:
        """Audit rows in storage order after the ``after`` cursor (a row id)."""
        query = sa.select(Command).where(Command.id > after).order_by(Command.id).limit(limit)
        for column, value in (
            (Command.kind, kind),
            (Command.namespace, namespace),
            (Command.name, name),
            (Command.outcome, outcome),
        ):
            if value is not None:
                query = query.where(column == value)
        async with self._reading() as session:
            return list((await session.scalars(query)).all())

    def _resources_query(self) -> sa.Select[tuple[Resource, RayJobView, RayServiceView]]:
        return (
            sa.select(Resource, RayJobView, RayServiceView)
            .outerjoin(RayJobView, RayJobView.uid == Resource.uid)
            .outerjoin(RayServiceView, RayServiceView.uid == Resource.uid)
        )

    async def _resource_records(
        self, query: sa.Select[tuple[Resource, RayJobView, RayServiceView]]
    ) -> list[ResourceRecord]:
        async with self._reading() as session:
            rows = (await session.execute(query)).all()
        return [
            ResourceRecord(resource=resource, rayjob=rayjob, rayservice=rayservice)
            for resource, rayjob, rayservice in rows
        ]


def _run_rayjob(row: Transition) -> str:
    """The RayJob a ``schedule`` transition names ("" if none)."""
    name = row.attributes.get(RUN_RAYJOB_ATTRIBUTE)
    return name if isinstance(name, str) else ""


def _state_row(kind: KeyKind, state: ResourceState) -> dict[str, Any]:
    return {
        "status": status_of(state, kind_info(kind).status_field),
        "first_seen": state.first_seen,
        "updated_at": state.updated_at,
        "last_seq": state.last_seq,
        "deleted_at": state.deleted_at,
        "fields": msgspec.to_builtins(state.fields),
    }


def _command_row(record: ResultRecord) -> dict[str, Any]:
    r = record.result
    return {
        "batch_id": r.batch_id,
        "command_id": r.command_id,
        "batch_seq": r.batch_seq,
        "delivery": r.delivery,
        "verb": r.verb,
        "target": r.target,
        "kind": r.key.kind,
        "namespace": r.key.namespace,
        "name": r.key.name,
        "outcome": r.outcome,
        "error": r.error,
        "status_code": r.status_code,
        "resource_version": r.resource_version,
        "at": r.at,
        "trace_id": record.trace_id,
        "stream_seq": record.stream_seq,
    }


def _fact(row: Mapping[Any, Any]) -> Fact:
    """A transition row as the folds read it (as inserted, or as read back)."""
    return Fact(
        field=row["field"],
        from_value=row["from_value"],
        to_value=row["to_value"],
        at=row["at"],
        seq=row["stream_seq"],
        attributes=row["attributes"],
        reason=row["reason"],
    )


def _transition_row(record: ResultRecord, t: TransitionMessage) -> dict[str, Any]:
    return {
        "kind": t.kind,
        "uid": t.uid,
        "namespace": t.namespace,
        "name": t.name,
        "field": t.field,
        "from_value": t.from_value,
        "to_value": t.to_value,
        "reason": t.reason,
        "message": t.message,
        "resource_version": t.resource_version,
        "at": t.at,
        "trace_id": record.trace_id,
        "attributes": dict(t.attributes),
        "stream_seq": record.stream_seq,
        "batch_id": record.result.batch_id,
        "command_id": record.result.command_id,
    }
