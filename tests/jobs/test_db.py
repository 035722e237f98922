"""Reads and compare-and-swap writes on a real SQLite database."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from gateway.jobs.db import (
    format_time,
    read_counts,
    read_next_retry_at,
    read_object,
    read_orphans,
    read_queue_length,
    utcnow,
    write_claim,
    write_failure,
    write_object,
    write_objects,
    write_release,
    write_transition,
    write_wake,
)
from gateway.jobs.schema import connect, create_schema
from tests.jobs.probe_plugin import PROBE, ProbeColumns

ACTIVE = ("queued", "working")


def test_a_claim_takes_the_oldest_due_object_and_leases_it(tmp_path: Path) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    late = write_object(conn, PROBE, now, retry_at=now - timedelta(seconds=1))
    early = write_object(conn, PROBE, now, retry_at=now - timedelta(seconds=2))
    future = write_object(conn, PROBE, now, retry_at=now + timedelta(hours=1))
    first = write_claim(conn, PROBE, ACTIVE, now, 30.0, "me")
    assert first is not None
    assert first.id == early
    assert first.retry_at == format_time(now + timedelta(seconds=30))
    assert first.lease_owner == "me"
    second = write_claim(conn, PROBE, ACTIVE, now, 30.0, "me")
    assert second is not None
    assert second.id == late
    # Leased and future objects are not due: nothing more to claim now.
    assert write_claim(conn, PROBE, ACTIVE, now, 30.0, "me") is None
    assert read_queue_length(conn, PROBE, ACTIVE, now) == 0
    # Once the leases have run out, the objects are due again (equal
    # retry_at: the lower id first).
    later = now + timedelta(seconds=31)
    again = write_claim(conn, PROBE, ACTIVE, later, 30.0, "other")
    assert again is not None
    assert (again.id, again.lease_owner) == (late, "other")
    assert read_object(conn, PROBE, future).lease_owner is None
    conn.close()


def test_a_claim_honours_the_extra_condition(tmp_path: Path) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    write_object(conn, PROBE, now, ProbeColumns(effects_dir="a"))
    mine = write_object(conn, PROBE, now, ProbeColumns(effects_dir="b"))
    claimed = write_claim(conn, PROBE, ACTIVE, now, 5.0, "me", where=("effects_dir = ?", ["b"]))
    assert claimed is not None
    assert claimed.id == mine
    assert (
        write_claim(conn, PROBE, ACTIVE, now, 5.0, "me", where=("effects_dir = ?", ["b"])) is None
    )
    conn.close()


def test_concurrent_claims_from_many_connections_never_share_an_object(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    setup = connect(path)
    create_schema(setup, [PROBE])
    now = utcnow()
    write_objects(setup, PROBE, now, [ProbeColumns()] * 400)
    claimed: list[list[int]] = [[] for _ in range(4)]

    def claim_all(slot: int) -> None:
        conn = connect(path)
        while (obj := write_claim(conn, PROBE, ACTIVE, utcnow(), 60.0, f"t{slot}")) is not None:
            claimed[slot].append(obj.id)
        conn.close()

    threads = [threading.Thread(target=claim_all, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [i for ids in claimed for i in ids]
    assert sorted(every) == list(range(1, 401))
    setup.close()


def test_failure_keeps_the_error_and_backs_off_only_while_holding_the_lease(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    write_object(conn, PROBE, now)
    obj = write_claim(conn, PROBE, ACTIVE, now, 5.0, "me")
    assert obj is not None
    assert write_failure(conn, obj, now, "OSError: disk", now + timedelta(seconds=4))
    failed = read_object(conn, PROBE, obj.id)
    assert (failed.attempts, failed.last_error, failed.lease_owner) == (1, "OSError: disk", None)
    assert failed.retry_at == format_time(now + timedelta(seconds=4))
    # A second report of the same tick compares against the old lease: it loses.
    assert not write_failure(conn, obj, now, "again", now)
    # A transition resets the attempts but keeps the last error as history.
    assert write_transition(conn, failed, PROBE.transition("queued", "working"), now, retry_at=now)
    moved = read_object(conn, PROBE, obj.id)
    assert (moved.attempts, moved.last_error) == (0, "OSError: disk")
    conn.close()


def test_wake_only_moves_retry_at_earlier_and_never_revives_a_final_object_or_ends_a_lease(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    leased = write_object(conn, PROBE, now, retry_at=now - timedelta(hours=2))
    claimed = write_claim(conn, PROBE, ["queued"], now, 60.0, "actor 1")
    assert claimed is not None
    assert claimed.id == leased
    later = write_object(conn, PROBE, now, retry_at=now + timedelta(hours=1))
    sooner = write_object(conn, PROBE, now, retry_at=now - timedelta(hours=1))
    final = write_object(conn, PROBE, now, status="done")
    assert write_wake(conn, PROBE, [leased, later, sooner, final], now) == 1
    assert read_object(conn, PROBE, later).retry_at == format_time(now)
    assert read_object(conn, PROBE, sooner).retry_at == format_time(now - timedelta(hours=1))
    assert read_object(conn, PROBE, final).retry_at is None
    assert read_object(conn, PROBE, leased).retry_at == claimed.retry_at  # the lease holds
    conn.close()


def test_reads_queue_length_next_retry_counts_and_orphans(tmp_path: Path) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    write_objects(conn, PROBE, now, [ProbeColumns()] * 5, retry_at=now - timedelta(seconds=1))
    write_object(conn, PROBE, now, status="working", retry_at=now - timedelta(seconds=1))
    write_object(conn, PROBE, now, retry_at=now + timedelta(minutes=3))
    write_object(conn, PROBE, now, status="done")
    assert read_queue_length(conn, PROBE, ACTIVE, now) == 6
    assert read_queue_length(conn, PROBE, ACTIVE, now, cap=2) == 2
    assert read_queue_length(conn, PROBE, ("working",), now) == 1
    assert read_next_retry_at(conn, [(PROBE, ACTIVE)], now) == now + timedelta(minutes=3)
    assert read_counts(conn, [PROBE]) == {
        "probe": {"queued": 6, "working": 1, "done": 1, "failed": 0}
    }
    # An actor that takes only "queued": the due "working" object is an orphan.
    assert read_orphans(conn, PROBE.table, ("queued",), now) == {"working": 1}
    assert read_orphans(conn, PROBE.table, (), now) == {"queued": 5, "working": 1}
    conn.close()


def test_release_gives_back_a_lease_only_while_it_holds(tmp_path: Path) -> None:
    conn = connect(tmp_path / "jobs.sqlite3")
    create_schema(conn, [PROBE])
    now = utcnow()
    write_object(conn, PROBE, now)
    obj = write_claim(conn, PROBE, ACTIVE, now, 60.0, "me")
    assert obj is not None
    assert write_release(conn, obj, now)
    released = read_object(conn, PROBE, obj.id)
    assert (released.retry_at, released.lease_owner) == (format_time(now), None)
    assert not write_release(conn, obj, now)  # the lease it held is gone
    conn.close()
