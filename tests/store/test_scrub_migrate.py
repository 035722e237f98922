"""Migration on write for scrub results (issue 14 §3): a verified file moves before its result.

Stores are real layout-1 stores (:func:`~tests.store.migrate_support.written_store`:
the flat ``warcs/`` of the release before layout 2), the scrub and the
migrator are the actor types ``gateway serve`` runs, under a real
orchestrator; a move that does not fit its tick is made to happen with a
time box of nothing (:attr:`ScrubActor.move_share` 0), not with a clock.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.jobs.db import format_time, utcnow
from gateway.jobs.jobs_db import JobsDB
from gateway.store.db import IndexDB
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout, moving_name
from gateway.store.migration.actor import MigrateActor, write_migrate_seed
from gateway.store.migration.layout_steps import Mover, MoveResult, migrate_file
from gateway.store.object_types import OBJECT_TYPES
from gateway.store.rows import FileRow
from tests.store.migrate_support import payload_of, placed_files, written_store
from tests.store.test_migrate_actor import _migrate_objects, _run
from tests.store.test_scrub import QuickRetryScrub, _scrub, _scrubs

#: A payload of three copy chunks (1 MiB each; gzip cannot shrink it), so a move
#: can stop in the middle.
BIG: Final = random.Random("big").randbytes(2_500_000)
#: A bound on waits for the other thread (it never comes near it).
DONE_WITHIN_S: Final = 60.0


def _payload(index: int) -> bytes:
    return BIG if index == 0 else payload_of(index)


def _rows(root: Path) -> list[FileRow]:
    db = IndexDB(Layout(root).db_path, access="read")
    try:
        return sorted(db.files(), key=lambda row: row.id)
    finally:
        db.close()


@pytest.fixture
async def jobs_db(tmp_path: Path) -> AsyncIterator[JobsDB]:
    """A layout-1 store of three files (the first of 2.5 MB), each scrub due now."""
    root = tmp_path / "archive"
    written_store(root, 3, payload=_payload)
    db = JobsDB(Layout(root).db_path, OBJECT_TYPES)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


class NoTimeToMove(QuickRetryScrub):
    """A scrub whose moves on write stop at their first chunk: the time box is spent."""

    move_share = 0.0


async def test_a_scrub_moves_each_file_it_verified_to_the_current_layout_first(
    tmp_path: Path, jobs_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    layout = Layout(root)
    before = {row.name: (row.sha256, layout.place(row)) for row in _rows(root)}
    assert {row.fs_version for row in _rows(root)} == {1}
    await _scrub(jobs_db, root)
    scrubs = _scrubs(root)
    for row in _rows(root):
        sha256, old_place = before[row.name]
        assert (row.fs_version, row.sha256) == (2, sha256)
        assert layout.place(row) != old_place
        assert not old_place.exists()
        assert hashlib.sha256(layout.place(row).read_bytes()).hexdigest() == sha256
        scrub = scrubs[row.name]
        assert (scrub["status"], scrub["passes"]) == ("good", 1)
        assert scrub["result"].endswith("; moved to layout 2"), scrub["result"]
    versions, stray = placed_files(root)
    assert (set(versions.values()), stray) == ({2}, [])
    report = check_store(layout)
    assert report.ok, report.problems


async def test_a_move_that_does_not_fit_the_tick_wakes_the_migrator_which_goes_on_from_it(
    tmp_path: Path, jobs_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    layout = Layout(root)
    conn = sqlite3.connect(layout.db_path)
    write_migrate_seed(conn, layout.current, utcnow())
    later = format_time(utcnow() + timedelta(days=1))
    conn.execute("UPDATE jobs_migrate SET status = 'current', retry_at = ?", (later,))
    conn.commit()
    conn.close()
    big = _rows(root)[0]
    assert big.date is not None
    target = layout.path_of(big.name, fs_version=2, date=big.date)

    await _scrub(jobs_db, root, actor_type=NoTimeToMove)
    scrubs = _scrubs(root)
    # The small files moved within their first chunk; the big one stopped after one.
    assert [row.fs_version for row in _rows(root)] == [1, 2, 2]
    assert scrubs[big.name]["status"] == "good"
    assert scrubs[big.name]["result"].endswith("; stays in layout 1 for now (stopped)")
    assert (target.with_name(moving_name(big.name))).stat().st_size == 1 << 20
    old_copy = hashlib.sha256(layout.place(big).read_bytes()).hexdigest()
    assert old_copy == big.sha256  # the old copy is the file
    [migrate] = _migrate_objects(root)
    assert migrate["retry_at"] <= format_time(utcnow())  # woken by the scrub's transition
    assert check_store(layout).ok

    await _run(jobs_db, root, MigrateActor)
    [moved, *_] = _rows(root)
    assert moved.fs_version == 2
    assert layout.place(moved) == target
    assert hashlib.sha256(target.read_bytes()).hexdigest() == big.sha256
    versions, stray = placed_files(root)
    assert (set(versions.values()), stray) == ({2}, [])
    assert check_store(layout).ok


async def test_a_damaged_file_is_not_moved_by_its_scrub(tmp_path: Path, jobs_db: JobsDB) -> None:
    root = tmp_path / "archive"
    layout = Layout(root)
    damaged = _rows(root)[1]
    place = layout.place(damaged)
    data = bytearray(place.read_bytes())
    data[len(data) // 2] ^= 0xFF
    place.write_bytes(bytes(data))
    await _scrub(jobs_db, root)
    rows = {row.name: row for row in _rows(root)}
    assert _scrubs(root)[damaged.name]["status"] == "damaged"
    assert rows[damaged.name].fs_version == 1
    assert place.read_bytes() == bytes(data)
    assert {rows[name].fs_version for name in rows if name != damaged.name} == {2}


def test_a_stopped_move_keeps_its_partial_copy_and_the_next_move_goes_on_from_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archive"
    written_store(root, 1, payload=_payload)
    layout = Layout(root)
    [big] = _rows(root)
    assert big.date is not None
    temporary = layout.path_of(big.name, fs_version=2, date=big.date).with_name(
        moving_name(big.name)
    )
    db = IndexDB(layout.db_path)
    try:
        stopped = migrate_file(layout, db, big, mover=Mover(layout, db, stop=lambda: True))
        assert stopped.outcome == "stopped", stopped
        assert "1048576 of" in stopped.detail
        assert "bytes copied" in stopped.detail
        assert stopped.file == big
        assert layout.place(big).is_file()
        assert temporary.stat().st_size == 1 << 20
        copied: list[str] = []
        moved = migrate_file(layout, db, big, mover=Mover(layout, db, inject=copied.append))
    finally:
        db.close()
    assert moved.outcome == "moved", moved
    assert copied.count("move_copy") == 2  # the two chunks after the one already there
    assert not temporary.exists()
    assert not layout.place(big).exists()
    assert check_store(layout).ok


def test_a_background_move_waits_for_a_move_on_write_of_the_same_file_and_finds_it_done(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archive"
    written_store(root, 1, payload=_payload)
    layout = Layout(root)
    [file] = _rows(root)
    at_commit, waiting, release = threading.Event(), threading.Event(), threading.Event()

    def park(point: str) -> None:  # the move on write, stopped just before its commit
        if point == "move_commit":
            at_commit.set()
            assert release.wait(DONE_WITHIN_S)

    def migrate(**options: Any) -> MoveResult:
        db = IndexDB(layout.db_path)
        try:
            return migrate_file(layout, db, file, mover=Mover(layout, db, **options))
        finally:
            db.close()

    with ThreadPoolExecutor(2) as pool:
        on_write = pool.submit(migrate, inject=park)
        assert at_commit.wait(DONE_WITHIN_S)
        impatient = migrate()  # wait_s 0, as moves on write are
        assert impatient.outcome == "busy", impatient
        assert "another mover is moving it" in impatient.detail

        def progress(count: int) -> None:
            if count == 0:  # said while it waits
                waiting.set()

        background = pool.submit(migrate, wait_s=DONE_WITHIN_S, progress=progress)
        assert waiting.wait(DONE_WITHIN_S)  # it waits for the lock ...
        release.set()
        assert on_write.result().outcome == "moved"
        waited = background.result()
    assert waited.outcome == "current", waited  # ... and finds the file moved
    assert waited.file.fs_version == 2
    assert check_store(layout).ok
