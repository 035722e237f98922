"""Objects in SQLite: the schema, reads, and the compare-and-swap writes.

The spec's kinds of function, kept apart (ArchiveBox "States & Lifecycles",
G. Read and H. Write):

- ``read_*(conn, ...)``: one query, no side effects;
- ``write_*(conn, ...)``: one atomic statement (autocommit), no branching.
  :func:`write_claim`, :func:`write_transition` and :func:`write_failure`
  are compare-and-swap updates (``WHERE id = ? AND status = ? AND retry_at
  = ?``) that report whether they won.

Every function here is blocking and takes a connection made by
:func:`connect`; :class:`JobsDB` runs them on one thread of their own, off
the event loop. Several processes share one database: SQLite serializes
writers, every write is one short statement (or a ``BEGIN IMMEDIATE``
transaction, never a read upgraded to a write, which SQLite answers with
``database is locked`` without waiting), and ``busy_timeout`` makes a writer
wait for another's commit instead of failing.

Queues are read through the partial index on ``retry_at`` (due objects,
oldest first; ``+status`` keeps SQLite from choosing the status index and
sorting every object of a state on each claim).

Times are TEXT, ISO 8601 UTC with microseconds (``2026-01-02T03:04:05.678901Z``):
fixed width, so they order as text does, and a compare-and-swap on
``retry_at`` compares the exact value that was read.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from gateway.jobs.model import COMMON_COLUMNS, ObjectType, Transition

__all__ = [
    "BUSY_TIMEOUT_MS",
    "JobObject",
    "JobsDB",
    "Value",
    "connect",
    "create_schema",
    "format_time",
    "parse_time",
    "read_counts",
    "read_next_retry_at",
    "read_object",
    "read_orphans",
    "read_queue_length",
    "read_registered_types",
    "utcnow",
    "write_claim",
    "write_failure",
    "write_object",
    "write_objects",
    "write_release",
    "write_transition",
    "write_wake",
]

#: How long a writer waits for another process's commit before SQLite gives
#: up with ``database is locked``. Every write here is one short statement,
#: so reaching it means a stuck process, not contention.
BUSY_TIMEOUT_MS: Final = 60_000

#: A column value: what SQLite stores and gives back.
Value = str | int | float | None

_P = ParamSpec("_P")
_T = TypeVar("_T")


# ---------------------------------------------------------------------------- time
def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def format_time(when: datetime) -> str:
    """``when`` as stored: ISO 8601 UTC, microseconds, ``Z``.

    >>> format_time(datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=UTC))
    '2026-01-02T03:04:05.006789Z'
    """
    utc = when.astimezone(UTC)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond:06d}Z"


def parse_time(text: str) -> datetime:
    """The inverse of :func:`format_time`.

    >>> parse_time('2026-01-02T03:04:05.006789Z').isoformat()
    '2026-01-02T03:04:05.006789+00:00'
    """
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC)


def _after(now: datetime, seconds: float) -> str:
    return format_time(now + timedelta(seconds=seconds))


# ------------------------------------------------------------------------- objects
@dataclass(frozen=True, slots=True)
class JobObject:
    """One object as read: the common columns and the type's own (``values``).

    ``retry_at`` is the exact stored text, which compare-and-swap writes
    compare against; None in a final state.
    """

    type: ObjectType
    id: int
    status: str
    retry_at: str | None
    created_at: str
    updated_at: str
    attempts: int
    last_error: str | None
    last_error_at: str | None
    lease_owner: str | None
    values: Mapping[str, Value]

    def __getitem__(self, column: str) -> Value:
        return self.values[column]

    def __str__(self) -> str:
        return f"{self.type.name}#{self.id} ({self.status})"

    @classmethod
    def from_row(cls, object_type: ObjectType, row: Sequence[Any]) -> JobObject:
        """Build from a row selected as ``object_type.column_names``."""
        common = len(COMMON_COLUMNS)
        own = {c: row[common + i] for i, (c, _) in enumerate(object_type.columns)}
        ident, status, retry_at, created_at, updated_at, attempts, error, error_at, owner = row[
            :common
        ]
        return cls(
            object_type,
            ident,
            status,
            retry_at,
            created_at,
            updated_at,
            attempts,
            error,
            error_at,
            owner,
            own,
        )


# -------------------------------------------------------------------------- schema
def connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection for this module's functions (autocommit, WAL, ``busy_timeout``).

    ``synchronous = NORMAL``: in WAL mode a commit survives a crash of the
    process; a power loss may undo the last ones, which only makes their
    objects due again (every tick is idempotent). ``read_only`` opens with
    ``mode=ro`` (``gateway jobs``); it raises :class:`sqlite3.OperationalError`
    when the database does not exist.
    """
    if read_only:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not read_only:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


_REGISTRY_TABLE: Final = """
CREATE TABLE IF NOT EXISTS jobs_object_types (
    name TEXT PRIMARY KEY,
    table_name TEXT NOT NULL,
    states TEXT NOT NULL,
    final TEXT NOT NULL
)"""


def _table_sql(object_type: ObjectType) -> list[str]:
    table = object_type.table
    columns = ",\n    ".join(f"{c} {decl}" for c, decl in (*COMMON_COLUMNS, *object_type.columns))
    statements = [
        f"CREATE TABLE IF NOT EXISTS {table} (\n    {columns}\n)",
        # The queue: due objects, oldest retry_at first.
        f"CREATE INDEX IF NOT EXISTS {table}_due ON {table}(retry_at) WHERE retry_at IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS {table}_status ON {table}(status)",
        f"CREATE INDEX IF NOT EXISTS {table}_errors ON {table}(last_error_at)"
        " WHERE last_error_at IS NOT NULL",
    ]
    for kind, keys in (("UNIQUE INDEX", object_type.unique), ("INDEX", object_type.indexes)):
        for columns_ in keys:
            statements.append(
                f"CREATE {kind} IF NOT EXISTS {table}_{'_'.join(columns_)}"
                f" ON {table}({', '.join(columns_)})"
            )
    return statements


def create_schema(conn: sqlite3.Connection, object_types: Iterable[ObjectType]) -> None:
    """Create the tables of ``object_types`` if missing.

    One ``BEGIN IMMEDIATE`` transaction; idempotent, safe to run from several
    processes at once. Each type is also recorded in ``jobs_object_types``,
    so that an orchestrator can tell objects of a type it has no actor for
    (a plugin no longer configured) and warn about them. The engine knows
    no object type of its own: the application hands its declarations in
    (the store's are :data:`gateway.store.object_types.OBJECT_TYPES`).
    """
    types = list(object_types)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_REGISTRY_TABLE)
        for object_type in types:
            for statement in _table_sql(object_type):
                conn.execute(statement)
            # An upsert that writes nothing when the row is already right: opening
            # a database must not change it (``store add`` of a refused file).
            conn.execute(
                "INSERT INTO jobs_object_types (name, table_name, states, final)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " table_name = excluded.table_name, states = excluded.states,"
                " final = excluded.final WHERE (table_name, states, final)"
                " IS NOT (excluded.table_name, excluded.states, excluded.final)",
                (
                    object_type.name,
                    object_type.table,
                    json.dumps(object_type.states),
                    json.dumps(object_type.final),
                ),
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# --------------------------------------------------------------------------- reads
def _marks(count: int) -> str:
    return ", ".join("?" * count)


def read_object(conn: sqlite3.Connection, object_type: ObjectType, object_id: int) -> JobObject:
    """The object ``object_id``; :class:`KeyError` when there is none."""
    row = conn.execute(
        f"SELECT {', '.join(object_type.column_names)} FROM {object_type.table} WHERE id = ?",
        (object_id,),
    ).fetchone()
    if row is None:
        raise KeyError(f"no {object_type.name} object #{object_id}")
    return JobObject.from_row(object_type, row)


def read_queue_length(
    conn: sqlite3.Connection,
    object_type: ObjectType,
    states: Iterable[str],
    now: datetime,
    *,
    cap: int = 1000,
) -> int:
    """How many objects in ``states`` are due at ``now``, counted up to ``cap``."""
    wanted = tuple(states)
    (count,) = conn.execute(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {object_type.table}"
        f" WHERE retry_at <= ? AND +status IN ({_marks(len(wanted))}) LIMIT ?)",
        (format_time(now), *wanted, cap),
    ).fetchone()
    return int(count)


def read_next_retry_at(
    conn: sqlite3.Connection, queues: Iterable[tuple[ObjectType, Iterable[str]]], now: datetime
) -> datetime | None:
    """The earliest ``retry_at`` after ``now`` among the objects of ``queues``, or None."""
    soonest: str | None = None
    moment = format_time(now)
    for object_type, states in queues:
        wanted = tuple(states)
        (first,) = conn.execute(
            f"SELECT MIN(retry_at) FROM {object_type.table}"
            f" WHERE retry_at > ? AND +status IN ({_marks(len(wanted))})",
            (moment, *wanted),
        ).fetchone()
        if first is not None and (soonest is None or first < soonest):
            soonest = first
    return parse_time(soonest) if soonest is not None else None


def read_registered_types(conn: sqlite3.Connection) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``{type name: (table, states)}`` for every type whose table exists here."""
    try:
        rows = conn.execute("SELECT name, table_name, states FROM jobs_object_types").fetchall()
    except sqlite3.OperationalError:  # no jobs schema yet
        return {}
    return {name: (table, tuple(json.loads(states))) for name, table, states in rows}


def read_orphans(
    conn: sqlite3.Connection, table: str, handled: Iterable[str], now: datetime
) -> dict[str, int]:
    """``{status: count}`` of due objects in ``table`` whose status no actor handles."""
    taken = tuple(handled)
    rows = conn.execute(
        f"SELECT status, COUNT(*) FROM {table}"
        f" WHERE retry_at <= ? AND status NOT IN ({_marks(len(taken))}) GROUP BY status",
        (format_time(now), *taken),
    ).fetchall()
    return {str(status): int(count) for status, count in rows}


def read_counts(
    conn: sqlite3.Connection, object_types: Iterable[ObjectType]
) -> dict[str, dict[str, int]]:
    """``{type: {state: count}}`` with every declared state (0 when empty).

    For monitoring (a Prometheus collector reads this at scrape time). A
    type whose table does not exist yet counts 0 everywhere.
    """
    counts: dict[str, dict[str, int]] = {}
    for object_type in object_types:
        states = dict.fromkeys(object_type.states, 0)
        try:
            rows = conn.execute(
                f"SELECT status, COUNT(*) FROM {object_type.table} GROUP BY status"
            ).fetchall()
        except sqlite3.OperationalError:
            rows = []
        for status, count in rows:
            states[str(status)] = int(count)
        counts[object_type.name] = states
    return counts


# -------------------------------------------------------------------------- writes
def write_object(
    conn: sqlite3.Connection,
    object_type: ObjectType,
    now: datetime,
    values: Mapping[str, Value] | None = None,
    *,
    status: str | None = None,
    retry_at: datetime | None = None,
) -> int:
    """Create one object (status: the type's initial state, due at ``now``); return its id.

    ``status``/``retry_at`` create it elsewhere in its life (a file already
    verified on import starts its scrub life ``good``, due later); a final
    status gets ``retry_at`` NULL. Raises :class:`sqlite3.IntegrityError`
    when a unique column already holds the value.
    """
    return write_objects(conn, object_type, now, [values or {}], status=status, retry_at=retry_at)[
        0
    ]


def write_objects(
    conn: sqlite3.Connection,
    object_type: ObjectType,
    now: datetime,
    rows: Sequence[Mapping[str, Value]],
    *,
    status: str | None = None,
    retry_at: datetime | None = None,
    ignore_existing: bool = False,
) -> list[int]:
    """Create many objects in one transaction (see :func:`write_object`); return their ids.

    ``ignore_existing``: a row colliding with a unique column is skipped
    (``INSERT OR IGNORE``) and has no id in the answer.
    """
    state = status or object_type.initial
    if state not in object_type.states:
        raise ValueError(f"{state!r} is not a state of {object_type.name!r}")
    due = None if state in object_type.final else format_time(retry_at or now)
    stamp = format_time(now)
    verb = "INSERT OR IGNORE" if ignore_existing else "INSERT"
    ids: list[int] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for values in rows:
            columns = ["status", "retry_at", "created_at", "updated_at", *values]
            cursor = conn.execute(
                f"{verb} INTO {object_type.table} ({', '.join(columns)})"
                f" VALUES ({_marks(len(columns))})",
                (state, due, stamp, stamp, *values.values()),
            )
            if cursor.rowcount and cursor.lastrowid is not None:
                ids.append(cursor.lastrowid)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return ids


def write_claim(
    conn: sqlite3.Connection,
    object_type: ObjectType,
    states: Iterable[str],
    now: datetime,
    lease_s: float,
    owner: str,
    *,
    where: tuple[str, Sequence[Value]] | None = None,
) -> JobObject | None:
    """Claim the due object with the oldest ``retry_at`` in ``states``: one UPDATE.

    Sets its ``retry_at`` to ``now + lease_s`` (the lease) and
    ``lease_owner``; returns the object as claimed, or None when nothing is
    due. One statement: two actors never claim the same object.
    ``where``: an extra SQL condition and its parameters (``store add``
    claims only the files it handed in).
    """
    wanted = tuple(states)
    moment = format_time(now)
    extra_params = tuple(where[1]) if where else ()
    row = conn.execute(
        _claim_sql(object_type, len(wanted), where[0] if where else None),
        (_after(now, lease_s), owner, moment, moment, *wanted, *extra_params, moment),
    ).fetchone()
    return JobObject.from_row(object_type, row) if row is not None else None


@functools.lru_cache(maxsize=256)
def _claim_sql(object_type: ObjectType, states: int, where: str | None) -> str:
    extra = f" AND ({where})" if where else ""
    return (
        f"UPDATE {object_type.table} SET retry_at = ?, lease_owner = ?, updated_at = ?"
        f" WHERE id = (SELECT id FROM {object_type.table}"
        f" WHERE retry_at <= ? AND +status IN ({_marks(states)}){extra}"
        " ORDER BY retry_at, id LIMIT 1)"
        " AND retry_at <= ?"
        f" RETURNING {', '.join(object_type.column_names)}"
    )


def write_transition(
    conn: sqlite3.Connection,
    obj: JobObject,
    transition: Transition,
    now: datetime,
    *,
    retry_at: datetime | None,
    values: Mapping[str, Value] | None = None,
    error: str | None = None,
) -> bool:
    """Move ``obj`` along ``transition`` if nobody else moved it since it was read.

    Compare-and-swap on ``(id, status, retry_at)``: sets the new status,
    ``retry_at`` (which must be None exactly when the target is final),
    ``values`` (the type's own columns), ``last_error`` when ``error`` is
    given (a transition that gives up), clears the lease and the attempt
    count. Returns whether it won. Raises :class:`ValueError` when
    ``transition`` is not declared for the object's type or does not start
    from its status, or when ``values`` names a column that is not the
    type's own (a bug).
    """
    declared = obj.type.transition(transition.source, transition.target)
    if declared != transition or obj.status != transition.source:
        raise ValueError(f"{obj}: cannot make transition {transition.name}")
    if (retry_at is None) != transition.final:
        raise ValueError(
            f"{obj}: transition {transition.name} needs retry_at "
            + ("None (final state)" if transition.final else "set (not a final state)")
        )
    own = dict(values or {})
    unknown = own.keys() - obj.type.own_columns
    if unknown:
        raise ValueError(f"{obj}: {sorted(unknown)} are not columns of its own")
    stamp = format_time(now)
    if error is not None:
        own.update(last_error=error, last_error_at=stamp)
    sets = ["status = ?", "retry_at = ?", "updated_at = ?", "attempts = 0", "lease_owner = NULL"]
    sets += [f"{column} = ?" for column in own]
    cursor = conn.execute(
        f"UPDATE {obj.type.table} SET {', '.join(sets)}"
        " WHERE id = ? AND status = ? AND retry_at IS ?",
        (
            transition.target,
            format_time(retry_at) if retry_at is not None else None,
            stamp,
            *own.values(),
            obj.id,
            obj.status,
            obj.retry_at,
        ),
    )
    return cursor.rowcount == 1


def write_failure(
    conn: sqlite3.Connection, obj: JobObject, now: datetime, error: str, retry_at: datetime
) -> bool:
    """Record a failed tick: ``attempts + 1``, the error, due again at ``retry_at``.

    Compare-and-swap on the lease (``id, status, retry_at``): False when the
    object moved on meanwhile (its tick's transition won before a time-out,
    or the lease expired and another actor claimed it).
    """
    stamp = format_time(now)
    cursor = conn.execute(
        f"UPDATE {obj.type.table} SET retry_at = ?, attempts = attempts + 1, last_error = ?,"
        " last_error_at = ?, updated_at = ?, lease_owner = NULL"
        " WHERE id = ? AND status = ? AND retry_at IS ?",
        (format_time(retry_at), error, stamp, stamp, obj.id, obj.status, obj.retry_at),
    )
    return cursor.rowcount == 1


def write_release(conn: sqlite3.Connection, obj: JobObject, now: datetime) -> bool:
    """Give back a claimed object that was not ticked: due at ``now``, no lease owner.

    Compare-and-swap on the lease; False when it had expired and another
    actor claimed the object.
    """
    cursor = conn.execute(
        f"UPDATE {obj.type.table} SET retry_at = ?, lease_owner = NULL"
        " WHERE id = ? AND status = ? AND retry_at IS ?",
        (format_time(now), obj.id, obj.status, obj.retry_at),
    )
    return cursor.rowcount == 1


def write_wake(
    conn: sqlite3.Connection, object_type: ObjectType, ids: Iterable[int], when: datetime
) -> int:
    """Make objects due at ``when`` if they were due later: the only side effect allowed.

    Final objects (``retry_at`` NULL), objects due sooner and leased ones
    (an actor works on them: their ``retry_at`` is the lease, which a wake
    must not end) are left as they are. Returns how many moved.
    """
    wanted = tuple(ids)
    if not wanted:
        return 0
    moment = format_time(when)
    cursor = conn.execute(
        f"UPDATE {object_type.table} SET retry_at = ?"
        f" WHERE id IN ({_marks(len(wanted))}) AND retry_at > ? AND lease_owner IS NULL",
        (moment, *wanted, moment),
    )
    return cursor.rowcount


# ------------------------------------------------------------------------- runtime
class JobsDB:
    """One connection and the one thread that uses it, for the event loop.

    ``await db.call(read_queue_length, object_type, states, now)`` runs
    ``read_queue_length(conn, ...)`` on the connection's thread. Calls run
    one at a time in the order they were made; a caller cancelled while
    waiting does not stop a write already started (its outcome is read
    back by the next compare-and-swap).
    """

    def __init__(self, path: Path, object_types: Iterable[ObjectType]) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobs-db")
        self._conn: sqlite3.Connection | None = None
        self._types = list(object_types)

    async def open(self) -> None:
        """Connect and create the schema of the object types (idempotent)."""
        await self._run(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path)
        try:
            create_schema(conn, self._types)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def call(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``fn(conn, *args, **kwargs)`` on the database thread."""
        return await self.submit(fn, *args, **kwargs)

    def submit(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> asyncio.Future[_T]:
        """Like :meth:`call`, but return the future at once (it runs whatever the caller does)."""

        def run() -> _T:
            if self._conn is None:
                raise RuntimeError(f"the jobs database {self.path} is not open")
            return fn(self._conn, *args, **kwargs)

        return asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def close(self) -> None:
        """Close the connection after the calls already made."""
        await self._run(self._close)
        self._executor.shutdown(wait=True)

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
