"""The index's schema versions: an ordered chain of migration steps.

The steps are gateway/store/schema.py's.

Each step runs in its own transaction together with ``PRAGMA user_version``;
the kill test shows that a process SIGKILLed at random moments during a
migration leaves the database at a committed step, from which the next open
finishes it.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest

from gateway.store.db import IndexDB
from gateway.store.errors import StoreError
from gateway.store.schema import (
    SCHEMA_VERSION,
    STEPS,
    Step,
    create_index_tables,
    migrate,
    schema_version,
)
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture

REPO: Final = Path(__file__).resolve().parents[2]


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")]


def test_a_new_index_gets_every_step(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "index.sqlite3")
    assert migrate(conn) == list(range(1, SCHEMA_VERSION + 1))
    assert schema_version(conn) == SCHEMA_VERSION == len(STEPS)
    assert _columns(conn, "files") == [
        "id",
        "name",
        "origin",
        "indexed_end",
        "state",
        "open_link",
        "sha256",
        "fs_version",
        "date",
    ]
    assert migrate(conn) == []  # nothing left to do


def test_an_unversioned_index_of_the_previous_release_is_migrated(tmp_path: Path) -> None:
    """The release at af8b42d created the tables with no version: step 1 leaves them as they are."""
    conn = _connect(tmp_path / "index.sqlite3")
    create_index_tables(conn)
    insert = "INSERT INTO files (name, open, origin) VALUES (?, ?, ?)"
    conn.execute(insert, ("gateway-20240506070809-00001.warc.gz", 1, "written"))
    conn.execute(insert, ("user.warc.gz", 0, "imported"))
    assert schema_version(conn) == 0
    assert migrate(conn) == list(range(1, SCHEMA_VERSION + 1))
    rows = conn.execute("SELECT name, state, fs_version, date, sha256 FROM files ORDER BY id")
    assert rows.fetchall() == [
        ("gateway-20240506070809-00001.warc.gz", "open", 1, "20240506070809", None),
        ("user.warc.gz", "closed", 1, None, None),
    ]


def test_adding_a_step_is_one_function_and_one_list_entry(tmp_path: Path) -> None:
    def add_jobs_table(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT, retry_at TEXT)")

    conn = _connect(tmp_path / "index.sqlite3")
    migrate(conn)
    steps: list[Step] = [*STEPS, add_jobs_table]
    assert migrate(conn, steps) == [SCHEMA_VERSION + 1]
    assert _columns(conn, "jobs") == ["id", "status", "retry_at"]
    assert schema_version(conn) == SCHEMA_VERSION + 1
    # This release does not know that step: it refuses the newer index, changing nothing.
    with pytest.raises(StoreError, match="newer than this release"):
        migrate(conn)
    assert schema_version(conn) == SCHEMA_VERSION + 1


def test_a_failing_step_leaves_nothing_of_itself(tmp_path: Path) -> None:
    def half_done(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half (x)")
        raise RuntimeError("a step that fails after its first statement")

    conn = _connect(tmp_path / "index.sqlite3")
    migrate(conn)
    with pytest.raises(RuntimeError, match="fails after"):
        migrate(conn, [*STEPS, half_done])
    assert schema_version(conn) == SCHEMA_VERSION
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []


async def test_opening_a_store_newer_than_this_release_is_refused(
    settings: StoreSettings,
) -> None:
    async with await Store.open(settings) as store:
        await store.record(make_capture("http://example.com/", b"x"))
    conn = _connect(settings.root_path / "index.sqlite3")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="written by a newer gateway"):
        await Store.open(settings)


# ------------------------------------------------------------------ kill -9
#: Run in a child process: migrate the index at argv[1] with a slow last step.
_MIGRATOR: Final = """
import sqlite3, sys
from gateway.store.schema import STEPS, migrate

def slow_backfill(conn):
    conn.execute("ALTER TABLE files ADD COLUMN checked INTEGER")
    for (file_id,) in conn.execute("SELECT id FROM files").fetchall():
        conn.execute("UPDATE files SET checked = ? WHERE id = ?", (file_id * 2, file_id))

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = FULL")
print("migrating", flush=True)
migrate(conn, [*STEPS, slow_backfill])
print("done", flush=True)
"""


def _old_index(path: Path, files: int) -> None:
    conn = _connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    create_index_tables(conn)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO files (name, open, origin) VALUES (?, 0, 'written')",
        ((f"gateway-20240506070809-{i:05d}.warc.gz",) for i in range(1, files + 1)),
    )
    conn.execute("COMMIT")
    conn.close()


def _run(path: Path, kill_after_s: float | None) -> tuple[bool, float]:
    """Run the migrator; SIGKILL it ``kill_after_s`` after its "migrating" line.

    Returns whether it finished, and the seconds from that line to its exit.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _MIGRATOR, str(path)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"migrating\n"
    started = time.monotonic()
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode == 0 and out == b"done\n", time.monotonic() - started


def _migration_s(path: Path) -> float:
    """Seconds a whole migration of a fresh old index takes here, now (median of 3)."""
    times = []
    for _ in range(3):
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
        _old_index(path, 8_000)
        finished, seconds = _run(path, None)
        assert finished
        times.append(seconds)
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    return sorted(times)[1]


@pytest.mark.timeout(600)
def test_sigkill_during_migration_at_random_moments(tmp_path: Path) -> None:
    seed = int(os.environ.get("STORE_SCHEMA_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"schema kill test seed: {seed}")
    path = tmp_path / "index.sqlite3"
    final = SCHEMA_VERSION + 1
    # Kill moments spread over what a migration takes on this machine under
    # its present load (a fixed window missed every step on a busy machine).
    window_s = _migration_s(path)
    seen: list[int] = []
    # 16 rounds, and more (up to 48) until kills have landed in two steps at
    # least: how far a migration gets in a given time depends on the load.
    for round_no in range(48):
        if round_no >= 16 and len(set(seen) - {final}) >= 2:
            break
        if not path.exists():
            _old_index(path, 8_000)
        finished, _ = _run(path, rng.uniform(0.0, window_s))
        conn = _connect(path)
        version = schema_version(conn)
        seen.append(version)
        columns = _columns(conn, "files")
        # Whatever the moment, the database is exactly at a committed step.
        assert ("state" in columns) == (version >= 2), (seed, version, columns)
        assert ("checked" in columns) == (version >= final), (seed, version)
        assert not finished or version == final
        conn.close()
        if version == final:  # start again from an old index
            for leftover in tmp_path.glob("index.sqlite3*"):
                leftover.unlink()
    if not path.exists():
        _old_index(path, 8_000)
    assert _run(path, None)[0], f"seed {seed}: the last run did not finish the migration"
    conn = _connect(path)
    assert schema_version(conn) == final
    (wrong,) = conn.execute("SELECT COUNT(*) FROM files WHERE checked != id * 2").fetchone()
    assert wrong == 0
    print(f"schema kill test: versions after each kill {seen}")
    assert len(set(seen) - {final}) >= 2, f"seed {seed}: kills landed in too few steps: {seen}"


def test_index_db_migrates_when_it_opens_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    _old_index(path, 3)
    db = IndexDB(path)
    try:
        assert schema_version(db.conn) == SCHEMA_VERSION
        assert [f.state for f in db.files()] == ["closed"] * 3
    finally:
        db.close()


def test_the_queries_of_an_open_read_partial_indexes_only(tmp_path: Path) -> None:
    """Opening is O(1) in the store's size (issue 14 §2): no start-up query scans ``files``."""
    db = IndexDB(tmp_path / "index.sqlite3")
    try:
        queries = {
            "unfinished": "state != 'closed'",
            "pending links": "open_link != 0",
            "writer's newest": "origin = 'written'",
        }
        for what, where in queries.items():
            plan = db.conn.execute(
                f"EXPLAIN QUERY PLAN SELECT id FROM files WHERE {where} ORDER BY id DESC"
            ).fetchall()
            details = " ".join(str(row[-1]) for row in plan)
            assert "USING INDEX files_" in details or "USING COVERING INDEX files_" in details, (
                what,
                details,
            )
    finally:
        db.close()
