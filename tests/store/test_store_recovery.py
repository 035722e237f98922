"""Recovery at open (only what the index says is unfinished) and the WARC file life cycle.

A writer that died is a real process ended with ``os._exit`` after its acks
(:func:`~tests.store.record_driver.record_then_die`): its file stays
``.open`` and its row ``open``. What a kill in the middle of a write leaves
on top of that (half a record, records past the index, a file shorter than
its index) is made by appending to or truncating that ``.open`` file; the
kills themselves are in ``test_store_crash.py``.

Files the index does not know are never touched at open (issue 11 §6,
issue 14 §2): ``store check`` reports them and ``store repair`` indexes the
ones the store wrote.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from gateway.commands.store import main as store_cli
from gateway.store.errors import StoreLocked
from gateway.store.integrity.check import check_store
from gateway.store.layout import FS_VERSION, Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store, StoreMode
from tests.store.record_driver import body_for, record_then_die, settings_for, url_for
from tests.store.store_support import (
    make_capture,
    read_all_records,
    read_record,
    store_path,
    tree_snapshot,
    warc_files,
)

NAME = re.compile(r"gateway-\d{14}-\d{5}\.warc\.gz")


async def _filled(settings: StoreSettings, count: int = 3) -> list[bytes]:
    bodies = [f"body {i} ".encode() * 50 for i in range(count)]
    async with await Store.open(settings) as store:
        for i, body in enumerate(bodies):
            await store.record(make_capture(f"http://example.com/{i}", body))
    return bodies


def _only_warc(layout: Layout) -> Path:
    [path] = [p for p in warc_files(layout.warcs)]
    return path


def _crashed(root: Path, count: int) -> Path:
    """A store whose writer died after ``count`` acknowledged captures: its ``.open`` file."""
    [name] = set(record_then_die(root, count))
    path = store_path(Layout(root).warcs, name)
    assert path.name.endswith(".open")
    assert path.is_file()
    return path


async def _assert_served(store: Store, indexes: range) -> None:
    for i in indexes:
        captures = await store.history(url_for(i))
        payloads = []
        for capture in captures:
            record = read_record(store.warc_dir, capture)
            payloads.append(record.payload)
        assert body_for(i) in payloads or any(c.mime == "warc/revisit" for c in captures), (
            f"capture {i} is not served"
        )


def _file_state(root: Path, name: str) -> tuple[str, int]:
    db = sqlite3.connect(Layout(root).db_path)
    try:
        state, link = db.execute(
            "SELECT state, open_link FROM files WHERE name = ?", (name,)
        ).fetchone()
    finally:
        db.close()
    return str(state), int(link)


async def test_warc_file_is_open_while_written_and_closed_after(settings: StoreSettings) -> None:
    store = await Store.open(settings)
    ack = await store.record(make_capture("http://example.com/", b"x"))
    [path] = list(warc_files(store.warc_dir))
    assert path.name.endswith(".warc.gz.open")
    assert NAME.fullmatch(path.name.removesuffix(".open"))
    assert ack.capture.filename == path.name
    await store.close()
    [closed] = list(warc_files(store.warc_dir))
    assert closed.name == path.name.removesuffix(".open")
    records = read_all_records(closed)
    assert records[0].rec_type == "warcinfo"
    assert records[0].headers["WARC-Filename"] == closed.name
    assert {r.headers["WARC-Type"] for r in records} == {"warcinfo", "response", "request"}
    assert closed.read_bytes()[:2] == b"\x1f\x8b"
    assert _file_state(settings.root_path, closed.name) == ("closed", 0)


async def test_rollover_starts_numbered_files_and_keeps_old_names_loadable(
    store_root: Path,
) -> None:
    settings = StoreSettings(root=str(store_root), rollover_bytes=3_000)
    store = await Store.open(settings)
    acks = [
        await store.record(make_capture(f"http://example.com/{i}", os.urandom(3000)))
        for i in range(4)
    ]
    names = sorted(p.name for p in warc_files(store.warc_dir))
    closed = [n for n in names if not n.endswith(".open")]
    assert len(closed) == 4
    serials = [int(n.split("-")[2][:5]) for n in closed]
    assert serials == [1, 2, 3, 4]
    # A lookup made before a close returned the .open name: it still loads.
    assert read_record(store.warc_dir, acks[0].capture).payload
    [first] = await store.history("http://example.com/0")
    assert first.filename == closed[0]
    await store.close()
    assert not [p for p in warc_files(store.warc_dir) if p.name.endswith(".open")]
    assert check_store(Layout(store_root), progress=False).ok
    # The next writer continues the serials from the index, not from a listing.
    async with await Store.open(settings) as store:
        ack = await store.record(make_capture("http://example.com/next", b"next"))
    assert Layout.serial_of(ack.capture.filename) == 5


async def test_a_dead_writers_file_is_closed_by_the_next_writer(store_root: Path) -> None:
    path = _crashed(store_root, 3)
    assert _file_state(store_root, path.name.removesuffix(".open")) == ("open", 0)
    async with await Store.open(settings_for(str(store_root)), mode="shared") as shared:
        # A shared process leaves the writer's file alone and serves it as it is.
        assert shared.recovery.closed == []
        await _assert_served(shared, range(3))
    assert path.exists()
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.closed == [path.name.removesuffix(".open")]
        assert store.recovery.truncated == []
        await _assert_served(store, range(3))
    final = path.with_name(path.name.removesuffix(".open"))
    assert not path.exists()
    assert final.is_file()
    assert _file_state(store_root, final.name) == ("closed", 0)
    assert check_store(Layout(store_root), progress=False).ok


async def test_torn_tail_of_open_file_is_truncated(store_root: Path) -> None:
    path = _crashed(store_root, 3)
    size = path.stat().st_size
    last = read_all_records(path)[-2]  # the last response record
    with path.open("rb") as fh:
        fh.seek(last.offset)
        member = fh.read(last.length)
    with path.open("ab") as fh:
        fh.write(member[: len(member) // 2])  # a write cut short
    assert not check_store(Layout(store_root), progress=False).ok
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.truncated == [path.name]
        await _assert_served(store, range(3))
    final = path.with_name(path.name.removesuffix(".open"))
    assert final.stat().st_size == size
    assert check_store(Layout(store_root), progress=False).ok


async def test_whole_records_past_the_index_are_indexed(store_root: Path, tmp_path: Path) -> None:
    # A crash after the records were written but before the index commit.
    path = _crashed(store_root, 2)
    extra_path = _crashed(tmp_path / "other", 3)
    records = read_all_records(extra_path)
    start = records[-2].offset  # the other store's capture 2: response + request
    with path.open("ab") as fh:
        fh.write(extra_path.read_bytes()[start:])
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.indexed_records == 1
        await _assert_served(store, range(3))
    assert check_store(Layout(store_root), progress=False).ok


async def test_entries_past_the_end_of_an_open_file_are_dropped(store_root: Path) -> None:
    path = _crashed(store_root, 3)
    last_response = read_all_records(path)[-2]
    with path.open("r+b") as fh:
        fh.truncate(last_response.offset)
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.dropped_entries == 1
        await _assert_served(store, range(2))
        assert await store.history(url_for(2)) == []
    assert check_store(Layout(store_root), progress=False).ok


async def test_an_open_file_left_without_captures_is_deleted(store_root: Path) -> None:
    path = _crashed(store_root, 1)
    warcinfo = read_all_records(path)[0]
    with path.open("r+b") as fh:
        fh.truncate(warcinfo.length)
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.deleted == [path.name]
        assert store.recovery.dropped_entries == 1
    assert list(warc_files(Layout(store_root).warcs)) == []
    assert check_store(Layout(store_root), progress=False).ok


async def test_an_open_row_whose_file_was_never_made_is_dropped(store_root: Path) -> None:
    # The writer commits a file's row, then creates the file: a kill in between.
    path = _crashed(store_root, 1)
    path.unlink()
    async with await Store.open(settings_for(str(store_root))) as store:
        assert store.recovery.missing == [path.name.removesuffix(".open")]
    assert check_store(Layout(store_root), progress=False).ok


async def test_a_kept_open_name_is_removed_by_the_next_writer(settings: StoreSettings) -> None:
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    # What a writer killed during a close's grace period leaves: a second name, flagged.
    os.link(warc, warc.with_name(warc.name + ".open"))
    db = sqlite3.connect(layout.db_path)
    db.execute("UPDATE files SET open_link = 1")
    db.commit()
    db.close()
    async with await Store.open(settings, mode="shared"):
        assert len(list(warc_files(layout.warcs))) == 2  # only a writer removes it
    async with await Store.open(settings):
        pass
    assert [p.name for p in warc_files(layout.warcs)] == [warc.name]
    assert _file_state(settings.root_path, warc.name) == ("closed", 0)
    assert check_store(layout, progress=False).ok


async def test_foreign_files_in_warcs_are_never_touched(
    settings: StoreSettings, sample_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 11 §6: the store adopted and moved a user's files; now it only reports them."""
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    shutil.copy(sample_dir / "warcs" / "example.warc.gz", layout.warcs)
    (layout.warcs / "junk.warc.gz").write_bytes(b"this is not a WARC file at all\n" * 10)
    (layout.warcs / "notes.txt").write_text("a user's notes")
    foreign = {name: tree_snapshot(layout.warcs)[name] for name in ("example.warc.gz",)}
    before = tree_snapshot(layout.warcs)
    modes: tuple[StoreMode, ...] = ("write", "shared")
    for mode in modes:
        async with await Store.open(settings, mode=mode) as store:
            assert not store.recovery.changed
            assert await store.history("http://example.com?example=1") == []
    assert tree_snapshot(layout.warcs) == before
    problems = {(p.kind, p.file) for p in check_store(layout, progress=False).problems}
    assert problems == {
        ("foreign_file", "example.warc.gz"),
        ("foreign_file", "junk.warc.gz"),
        ("foreign_file", "notes.txt"),
    }
    assert store_cli(["repair", "--root", settings.root]) == 1  # what it cannot fix remains
    out = capsys.readouterr().out
    assert "not a file of this store" in out
    assert tree_snapshot(layout.warcs) == before
    assert foreign["example.warc.gz"] == tree_snapshot(layout.warcs)["example.warc.gz"]
    assert not layout.invalid.exists()


async def test_repair_indexes_files_the_store_wrote(
    store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Orphans the store wrote (its index lost them: an older release's crash) are indexed."""
    settings = StoreSettings(root=str(store_root), rollover_bytes=3_000)
    bodies = [os.urandom(3000) for _ in range(3)]
    async with await Store.open(settings) as store:
        for i, body in enumerate(bodies):
            await store.record(make_capture(f"http://example.com/{i}", body))
    layout = Layout(store_root)
    names = sorted(p.name for p in warc_files(layout.warcs))
    assert len(names) == 3
    db = sqlite3.connect(layout.db_path)
    db.execute(
        "DELETE FROM captures WHERE file_id IN (SELECT id FROM files WHERE name = ?)", (names[1],)
    )
    db.execute("DELETE FROM files WHERE name = ?", (names[1],))
    db.commit()
    db.close()
    async with await Store.open(settings) as store:  # not found at open: no listing
        assert await store.history("http://example.com/1") == []
    problems = [(p.kind, p.file) for p in check_store(layout, progress=False).problems]
    assert problems == [("not_indexed", names[1])]
    assert store_cli(["repair", "--root", settings.root]) == 0
    assert f"indexed {names[1]}, written by this store" in capsys.readouterr().out
    async with await Store.open(settings) as store:
        [capture] = await store.history("http://example.com/1")
        assert read_record(store.warc_dir, capture).payload == bodies[1]
    assert sorted(p.name for p in warc_files(layout.warcs)) == names


async def test_second_writer_is_refused_and_shared_processes_are_not(store: Store) -> None:
    with pytest.raises(StoreLocked, match="records into this store"):
        await Store.open(store.settings)
    async with await Store.open(store.settings, mode="shared") as shared:
        assert shared.mode == "shared"


async def test_files_know_their_sha256_date_layout_and_origin(
    store_root: Path, sample_dir: Path
) -> None:
    """The facts replication and layout migration need (issues 13 and 14), for every origin."""
    crashed = _crashed(store_root, 2)  # closed by recovery: its digest is computed then
    settings = StoreSettings(root=str(store_root), rollover_bytes=3_000)
    async with await Store.open(settings) as store:
        for i in range(3):
            await store.record(make_capture(f"http://example.com/{i}", os.urandom(3000)))
        await store.add_warc(sample_dir / "warcs" / "example.arc.gz")
    db = sqlite3.connect(Layout(store_root).db_path)
    rows = db.execute("SELECT name, origin, sha256, fs_version, date, state FROM files").fetchall()
    db.close()
    assert len(rows) == 1 + 3 + 1
    for name, origin, sha256, fs_version, date, state in rows:
        path = store_path(Layout(store_root).warcs, name)
        assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest(), name
        assert (fs_version, state) == (FS_VERSION, "closed")
        if name == "example.arc.gz":
            assert (origin, date) == ("imported", "20140216050221")  # its first record's date
        else:
            assert origin == "written"
            assert date == name.split("-")[1]
    assert crashed.name.removesuffix(".open") in {row[0] for row in rows}
