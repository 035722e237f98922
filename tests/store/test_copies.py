"""The copy status table (gateway/store/replication/copy_status.py): what counts as a safe copy, the
director's query, claims by compare-and-swap, and rows about other bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.store.replication.copy_status import (
    CopyRow,
    read_copy_summary,
    read_file_copies,
    read_files_needing_copies,
    write_copy_claim,
    write_copy_present,
    write_copy_release,
    write_copy_status,
)
from gateway.store.schema import migrate

PLACES = ("primary", "backup", "s3")
NOW = 1_800_000_000.0
CUTOFF = NOW - 3600


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(tmp_path / "index.sqlite3", isolation_level=None)
    migrate(db)
    for i in range(1, 6):
        db.execute(
            "INSERT INTO files (name, origin, state, sha256) VALUES (?, 'written', 'closed', ?)",
            (f"f{i}.warc.gz", f"{i:064x}"),
        )
    db.execute(
        "INSERT INTO files (name, origin, state, sha256) VALUES ('open.warc.gz', 'written',"
        " 'open', NULL)"
    )
    return db


def _sha(i: int) -> str:
    return f"{i:064x}"


def _present(conn: sqlite3.Connection, i: int, storage: str) -> None:
    write_copy_present(
        conn, f"f{i}.warc.gz", storage, _sha(i), mtime=NOW, verified_at=NOW, detail="test"
    )


def test_safe_copies_and_the_directors_query(conn: sqlite3.Connection) -> None:
    # f1: present on both storages; f2: one present, one ongoing (fresh); f3: ongoing expired;
    # f4: a row about other bytes; f5: nothing. The open file never appears.
    _present(conn, 1, "backup")
    _present(conn, 1, "s3")
    _present(conn, 2, "backup")
    assert write_copy_claim(conn, "f2.warc.gz", "s3", _sha(2), None, NOW - 10)
    assert write_copy_claim(conn, "f3.warc.gz", "s3", _sha(3), None, NOW - 7200)
    write_copy_present(conn, "f4.warc.gz", "s3", _sha(99), mtime=NOW, verified_at=NOW, detail="")
    need = read_files_needing_copies(conn, PLACES, 3, CUTOFF)
    assert need == [3, 4, 5]
    assert read_files_needing_copies(conn, PLACES, 2, CUTOFF) == [3, 4, 5]
    assert read_files_needing_copies(conn, PLACES, 1, CUTOFF) == []
    assert read_files_needing_copies(conn, PLACES, 3, CUTOFF, after_id=3, limit=1) == [4]
    # a storage no longer configured does not count
    assert read_files_needing_copies(conn, ("primary", "backup"), 2, CUTOFF) == [3, 4, 5]
    # the primary's own row: a missing primary does not count
    write_copy_status(conn, "f1.warc.gz", "primary", _sha(1), "missing", mtime=NOW, detail="")
    assert read_files_needing_copies(conn, PLACES, 3, CUTOFF) == [1, 3, 4, 5]
    f4 = read_file_copies(conn, PLACES, names=["f4.warc.gz"])[0]
    assert f4.copies == {}  # the row about other bytes does not apply
    assert f4.status("s3", CUTOFF) == "missing"
    assert f4.status("primary", CUTOFF) == "present"
    f3 = read_file_copies(conn, PLACES, ids=[3])[0]
    assert f3.status("s3", CUTOFF) == "missing"  # expired
    assert f3.copies["s3"].status == "ongoing"
    summary = read_copy_summary(conn, PLACES, 3, CUTOFF)
    assert (summary.files, summary.safe, summary.pending, summary.under_replicated) == (
        5,
        0,
        1,
        4,
    )
    assert summary.no_sha256 == 0
    assert summary.by_status[("primary", "present")] == 4
    assert summary.by_status[("primary", "missing")] == 1
    assert summary.by_status[("s3", "missing")] == 1  # f3's expired claim
    assert summary.by_status[("s3", "ongoing")] == 1


def test_claims_are_compare_and_swap(conn: sqlite3.Connection) -> None:
    name, sha = "f5.warc.gz", _sha(5)
    assert write_copy_claim(conn, name, "backup", sha, None, NOW)
    assert not write_copy_claim(conn, name, "backup", sha, None, NOW + 1), "one claim wins"
    seen = read_file_copies(conn, PLACES, names=[name])[0].copies["backup"]
    stale = CopyRow(name, "backup", sha, "ongoing", NOW - 1)
    assert not write_copy_claim(conn, name, "backup", sha, stale, NOW + 2)
    assert write_copy_claim(conn, name, "backup", sha, seen, NOW + 3)
    # a release only takes back the caller's own claim
    assert not write_copy_release(conn, name, "backup", NOW, "missing", mtime=NOW, detail="x")
    assert write_copy_release(conn, name, "backup", NOW + 3, "missing", mtime=NOW + 4, detail="y")
    row = read_file_copies(conn, PLACES, names=[name])[0].copies["backup"]
    assert (row.status, row.mtime, row.detail, row.archived) == ("missing", NOW + 4, "y", False)
    # a row about other bytes is taken over by a claim
    write_copy_present(conn, name, "s3", _sha(77), mtime=NOW, verified_at=NOW, detail="")
    assert write_copy_claim(conn, name, "s3", sha, None, NOW + 5)


def test_damage_keeps_the_archived_flag(conn: sqlite3.Connection) -> None:
    _present(conn, 1, "backup")
    write_copy_status(conn, "f1.warc.gz", "backup", _sha(1), "corrupted", mtime=NOW, detail="rot")
    row = read_file_copies(conn, PLACES, ids=[1])[0].copies["backup"]
    assert (row.status, row.archived) == ("corrupted", True)
    write_copy_status(
        conn, "f2.warc.gz", "backup", _sha(2), "corrupted", mtime=NOW, detail="x", archived=False
    )
    assert not read_file_copies(conn, PLACES, ids=[2])[0].copies["backup"].archived
