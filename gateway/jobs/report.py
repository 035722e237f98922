"""What ``gateway jobs`` and ``GET /_jobs`` show: per object type, counts and trouble.

:func:`read_report` is one read (several queries, no side effects) giving,
for every object type: the count of objects in each state, how many are due
and since when the oldest has waited, the ticks running now (active leases,
by the process that holds them), the last errors, and the objects in the
type's attention states (a refused import and its reason, a damaged file
and its problems). :func:`format_report` renders it as text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from gateway.jobs.db import format_time, parse_time, read_counts, read_registered_types
from gateway.jobs.model import ObjectType

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["JobsCollector", "format_report", "read_report"]

#: Last errors and attention objects listed per type.
LISTED: Final = 5


def _one(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> Any:
    return conn.execute(sql, params).fetchone()[0]


def _type_report(
    conn: sqlite3.Connection, object_type: ObjectType[Any], now: str, listed: int
) -> dict[str, Any]:
    table = object_type.table
    states = read_counts(conn, [object_type])[object_type.name]
    due = _one(conn, f"SELECT COUNT(*) FROM {table} WHERE retry_at <= ?", (now,))
    oldest = _one(conn, f"SELECT MIN(retry_at) FROM {table} WHERE retry_at <= ?", (now,))
    running = dict(
        conn.execute(
            f"SELECT lease_owner, COUNT(*) FROM {table}"
            " WHERE lease_owner IS NOT NULL AND retry_at > ? GROUP BY lease_owner"
            " ORDER BY lease_owner",
            (now,),
        ).fetchall()
    )
    # An object in a final state has its outcome in its state (and its result):
    # the errors met on the way there are history, not current errors.
    finals = ", ".join("?" * len(object_type.final))
    not_final = f" AND status NOT IN ({finals})" if finals else ""
    errors = [
        {"id": i, "status": s, "attempts": a, "error": e, "at": at}
        for i, s, a, e, at in conn.execute(
            f"SELECT id, status, attempts, last_error, last_error_at FROM {table}"
            f" WHERE last_error_at IS NOT NULL{not_final}"
            " ORDER BY last_error_at DESC LIMIT ?",
            (*object_type.final, listed),
        )
    ]
    attention: list[dict[str, Any]] = []
    if object_type.attention_states:
        wanted = object_type.attention_states
        attention = [
            {"id": i, "status": s, "label": label, "detail": detail, "updated_at": at}
            for i, s, label, detail, at in conn.execute(
                f"SELECT id, status, {object_type.label_column}, {object_type.detail_column},"
                f" updated_at FROM {table} WHERE status IN ({', '.join('?' * len(wanted))})"
                " ORDER BY updated_at DESC LIMIT ?",
                (*wanted, listed),
            )
        ]
    return {
        "description": object_type.description,
        "states": states,
        "due": due,
        "oldest_due": oldest,
        "running": running,
        "last_errors": errors,
        "attention": attention,
    }


def read_report(
    conn: sqlite3.Connection,
    object_types: Iterable[ObjectType[Any]],
    now: datetime,
    *,
    listed: int = LISTED,
) -> dict[str, Any]:
    """``{"now": ..., "types": {name: {...}}}`` (see the module docstring).

    Types come in the order given; a type recorded in the database but not
    given (its plugin is not loaded here) gets its counts by state only. A
    database without the jobs schema reports every given type empty.
    """
    moment = format_time(now)
    known = list(object_types)
    registered = read_registered_types(conn)
    types: dict[str, Any] = {}
    for object_type in known:
        if object_type.name in registered:
            types[object_type.name] = _type_report(conn, object_type, moment, listed)
        else:
            types[object_type.name] = {
                "description": object_type.description,
                "states": dict.fromkeys(object_type.states, 0),
                "due": 0,
                "oldest_due": None,
                "running": {},
                "last_errors": [],
                "attention": [],
            }
    for name, (table, states) in registered.items():
        if name in types:
            continue
        counts = dict.fromkeys(states, 0)
        for status, count in conn.execute(f"SELECT status, COUNT(*) FROM {table} GROUP BY status"):
            counts[str(status)] = int(count)
        types[name] = {"description": "(no actor type loaded here)", "states": counts}
    return {"now": moment, "types": types}


def format_report(report: Mapping[str, Any]) -> str:
    """The report as text, one block per object type."""
    lines = []
    for name, entry in report["types"].items():
        lines.append(f"{name}: {entry['description']}")
        lines.append("  " + ", ".join(f"{s} {n}" for s, n in entry["states"].items()))
        if "due" not in entry:
            continue
        lines.append(f"  due now: {entry['due']} (oldest due since {entry['oldest_due'] or '-'})")
        running = entry["running"]
        if running:
            owners = ", ".join(f"{owner}: {count}" for owner, count in running.items())
            lines.append(f"  running: {sum(running.values())} tick(s) ({owners})")
        else:
            lines.append("  running: none")
        for error in entry["last_errors"]:
            lines.append(
                f"  error: #{error['id']} ({error['status']}, attempt {error['attempts']},"
                f" {error['at']}): {error['error']}"
            )
        for item in entry["attention"]:
            lines.append(f"  {item['status']}: #{item['id']} {item['label']}: {item['detail']}")
    return "\n".join(lines)


class JobsCollector:
    """Prometheus families of the background jobs, read at each scrape (``/metrics``).

    ``read()`` gives a :func:`read_report` (called in the scrape's worker
    thread). Families, one sample per object type (``type`` label):

    - ``gateway_jobs_objects{type, state}``: objects in each state;
    - ``gateway_jobs_due{type}``: objects due now (waiting for an actor);
    - ``gateway_jobs_running{type}``: ticks running, in every process (active leases);
    - ``gateway_jobs_oldest_due_seconds{type}``: how long the oldest due
      object has waited (0 when none is due): a queue that stopped moving.
    """

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        report = self._read()
        now = parse_time(report["now"])
        objects = GaugeMetricFamily(
            "gateway_jobs_objects",
            "Background-job objects by type and state.",
            labels=["type", "state"],
        )
        due = GaugeMetricFamily("gateway_jobs_due", "Objects due now, by type.", labels=["type"])
        running = GaugeMetricFamily(
            "gateway_jobs_running",
            "Ticks running in every process (active leases).",
            labels=["type"],
        )
        oldest = GaugeMetricFamily(
            "gateway_jobs_oldest_due_seconds",
            "How long the oldest due object has waited, by type (0: none due).",
            labels=["type"],
        )
        for name, entry in report["types"].items():
            for state, count in entry["states"].items():
                objects.add_metric([name, state], count)
            if "due" not in entry:  # a type whose actor is not loaded here: counts only
                continue
            due.add_metric([name], entry["due"])
            running.add_metric([name], sum(entry["running"].values()))
            waited = (
                (now - parse_time(entry["oldest_due"])).total_seconds()
                if entry["oldest_due"]
                else 0.0
            )
            oldest.add_metric([name], max(0.0, waited))
        yield from (objects, due, running, oldest)
