"""Objects in SQLite: the object as read, the reads, and the compare-and-swap writes.

The spec's kinds of function, kept apart (ArchiveBox "States & Lifecycles",
G. Read and H. Write):

- ``read_*(conn, ...)``: one query, no side effects;
- ``write_*(conn, ...)``: one atomic statement (autocommit), no branching.
  :func:`write_claim`, :func:`write_transition` and :func:`write_failure`
  are compare-and-swap updates (``WHERE id = ? AND status = ? AND retry_at
  = ?``) that report whether they won.

Every function here is blocking and takes a connection made by
:func:`~gateway.jobs.schema.connect` (the tables are
:func:`~gateway.jobs.schema.create_schema`'s);
:class:`~gateway.jobs.jobs_db.JobsDB` runs them on one thread of their own,
off the event loop. Several processes share one database: SQLite serializes
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

import functools
import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from gateway.jobs.columns import Value
from gateway.jobs.model import COMMON_COLUMNS, ObjectType, Transition

__all__ = [
    "JobObject",
    "Value",
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

#: The row of an object's type (:attr:`ObjectType.row <gateway.jobs.model.ObjectType.row>`).
R = TypeVar("R")


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
class JobObject(Generic[R]):
    """One object as read: the common columns and the type's own (``row``, typed).

    ``retry_at`` is the exact stored text, which compare-and-swap writes
    compare against; None in a final state.
    """

    type: ObjectType[R]
    id: int
    status: str
    retry_at: str | None
    created_at: str
    updated_at: str
    attempts: int
    last_error: str | None
    last_error_at: str | None
    lease_owner: str | None
    row: R

    def __str__(self) -> str:
        return f"{self.type.name}#{self.id} ({self.status})"

    @classmethod
    def from_row(cls, object_type: ObjectType[R], row: Sequence[Any]) -> JobObject[R]:
        """Build from a row selected as ``object_type.column_names``."""
        common = len(COMMON_COLUMNS)
        own = object_type.decode(row[common:])
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


# --------------------------------------------------------------------------- reads
def _marks(count: int) -> str:
    return ", ".join("?" * count)


def read_object(
    conn: sqlite3.Connection, object_type: ObjectType[R], object_id: int
) -> JobObject[R]:
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
    object_type: ObjectType[Any],
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
    conn: sqlite3.Connection, queues: Iterable[tuple[ObjectType[Any], Iterable[str]]], now: datetime
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
    conn: sqlite3.Connection, object_types: Iterable[ObjectType[Any]]
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
    object_type: ObjectType[R],
    now: datetime,
    row: R | None = None,
    *,
    status: str | None = None,
    retry_at: datetime | None = None,
) -> int:
    """Create one object (status: the type's initial state, due at ``now``); return its id.

    ``row``: its own columns (None: the row's defaults, :class:`TypeError`
    if a field has none). ``status``/``retry_at`` create it elsewhere in
    its life (a file already verified on import starts its scrub life
    ``good``, due later); a final status gets ``retry_at`` NULL. Raises
    :class:`sqlite3.IntegrityError` when a unique column already holds the value.
    """
    own = row if row is not None else object_type.row()
    return write_objects(conn, object_type, now, [own], status=status, retry_at=retry_at)[0]


def write_objects(
    conn: sqlite3.Connection,
    object_type: ObjectType[R],
    now: datetime,
    rows: Sequence[R],
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
        for row in rows:
            values = object_type.encode(row)
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
    object_type: ObjectType[R],
    states: Iterable[str],
    now: datetime,
    lease_s: float,
    owner: str,
    *,
    where: tuple[str, Sequence[Value]] | None = None,
) -> JobObject[R] | None:
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
def _claim_sql(object_type: ObjectType[Any], states: int, where: str | None) -> str:
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
    obj: JobObject[R],
    transition: Transition,
    now: datetime,
    *,
    retry_at: datetime | None,
    values: R | None = None,
    error: str | None = None,
) -> bool:
    """Move ``obj`` along ``transition`` if nobody else moved it since it was read.

    Compare-and-swap on ``(id, status, retry_at)``: sets the new status,
    ``retry_at`` (which must be None exactly when the target is final),
    the own columns ``values`` (the object's row after the transition)
    changes from ``obj.row``, ``last_error`` when ``error`` is given (a
    transition that gives up), clears the lease and the attempt count.
    Returns whether it won. Raises :class:`ValueError` when ``transition``
    is not declared for the object's type or does not start from its
    status (a bug).
    """
    declared = obj.type.transition(transition.source, transition.target)
    if declared != transition or obj.status != transition.source:
        raise ValueError(f"{obj}: cannot make transition {transition.name}")
    if (retry_at is None) != transition.final:
        raise ValueError(
            f"{obj}: transition {transition.name} needs retry_at "
            + ("None (final state)" if transition.final else "set (not a final state)")
        )
    own = obj.type.changes(obj.row, values) if values is not None else {}
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
    conn: sqlite3.Connection, obj: JobObject[Any], now: datetime, error: str, retry_at: datetime
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


def write_release(conn: sqlite3.Connection, obj: JobObject[Any], now: datetime) -> bool:
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
    conn: sqlite3.Connection, object_type: ObjectType[Any], ids: Iterable[int], when: datetime
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
