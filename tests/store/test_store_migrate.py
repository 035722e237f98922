"""Layout migration (issue 14): layouts, the move, on write and in the background, reconcile.

Stores in layout 1 are the release at af8b42d's own (``tests/data``) or
written with that release's chain of layouts (:func:`flat_store`). The
kill -9 test and the migration under load are in
``test_store_migrate_crash.py``.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import shutil
import sqlite3
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

import gateway.store.writer as writer_module
from gateway.commands.store import main as store_cli
from gateway.store.db import IndexDB
from gateway.store.errors import StoreError
from gateway.store.integrity.check import check_store
from gateway.store.layout import FS_VERSION, LAYOUTS, Layout, by_day, flat, moving_name
from gateway.store.migration.layout_steps import STEPS, Mover, Step, migrate_file
from gateway.store.migration.migrator import MigrationReport, open_shared, run_migration
from gateway.store.rows import FileRow
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.migrate_support import (
    expected_payloads,
    flat_store,
    layout_chain,
    placed_files,
)
from tests.store.store_support import tree_snapshot
from tests.store.test_store_legacy import _extract, _payload_sha256, _serves_every_capture

Client = TestClient[web.Request, web.Application]


def _config(root: Path) -> str:
    return f"store: {{root: {root}}}\ncollections:\n  stored: $store\n"


def _rows(root: Path) -> dict[str, FileRow]:
    db = IndexDB(Layout(root).db_path)
    try:
        return {file.name: file for file in db.files()}
    finally:
        db.close()


def _migrate(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = store_cli(["migrate", "--root", str(root), "--no-progress", *args])
    return status, capsys.readouterr().out


def _check_ok(root: Path) -> list[str]:
    report = check_store(Layout(root), progress=False)
    assert report.ok, [str(p) for p in report.problems]
    return report.notes


async def _loads_every_capture(client: Client, payloads: dict[str, str]) -> None:
    for url, sha256 in payloads.items():
        resp = await client.get("/stored/resource", params={"url": url})
        body = await resp.read()
        assert resp.status == 200, (url, body[:300])
        assert _payload_sha256(body) == sha256, url


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ layouts
def test_layouts_place_a_file_by_its_row(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert (flat, by_day) == LAYOUTS
    assert layout.current == FS_VERSION == 2
    old = FileRow(1, "a.warc.gz", "closed", "written", 0, fs_version=1, date="20240506070809")
    new = FileRow(1, "a.warc.gz", "closed", "written", 0, fs_version=2, date="20240506070809")
    assert layout.place(old) == tmp_path / "warcs" / "a.warc.gz"
    assert layout.place(new) == tmp_path / "warcs" / "2024" / "05" / "06" / "a.warc.gz"
    assert layout.place(new, open_=True).name == "a.warc.gz.open"
    # The row's place first, then the other layout's: a moving file is in one of them.
    assert layout.candidates(old) == [layout.place(old), layout.place(new)]
    assert layout.candidates(new) == [layout.place(new), layout.place(old)]
    undated = FileRow(2, "b.warc.gz", "closed", "found", 0, fs_version=1)
    assert layout.candidates(undated) == [tmp_path / "warcs" / "b.warc.gz"]
    assert layout.version_at(layout.place(new), new.date) == 2
    assert layout.version_at(tmp_path / "warcs" / "x" / "a.warc.gz", new.date) is None
    with pytest.raises(StoreError, match="layout version 3 is unknown to this release"):
        layout.directory_of(3, new.date)
    with pytest.raises(StoreError, match="14-digit creation date"):
        layout.directory_of(2, None)


# -------------------------------------------------- the release before this
async def test_a_store_of_the_previous_release_migrates_and_serves_every_capture(
    tmp_path: Path,
    make_client: Callable[[str], Awaitable[Client]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = _extract(tmp_path)
    root = tmp_path / "clean"
    found = (root / "warcs" / "example-wget-1-14.warc.gz").read_bytes()
    status, out = _migrate(root, capsys)
    assert status == 0, out
    # 4 files it recorded and the one it imported move; the one it adopted stays.
    assert "5 processed, 5 migrated, 0 imported, 0 invalid, 0 merged" in out
    rows = _rows(root)
    assert {name: row.fs_version for name, row in rows.items()} == {
        **{name: 2 for name in rows if name != "example-wget-1-14.warc.gz"},
        "example-wget-1-14.warc.gz": 1,
    }
    # Rows of that release lacked SHA-256s (and the import its date): now recorded.
    assert rows["example.warc.gz"].date == "20140103030322"  # its first record's WARC-Date
    for row in rows.values():
        if row.origin != "found":  # read, never moved: nothing to verify a move against
            assert row.sha256 == _sha256(Layout(root).place(row)), row.name
    assert (root / "warcs" / "example-wget-1-14.warc.gz").read_bytes() == found
    assert placed_files(root)[1] == []
    assert _check_ok(root) == []
    client = await make_client(_config(root))
    await _serves_every_capture(client, manifest["clean"])
    await client.close()
    # A second run has nothing to do.
    status, out = _migrate(root, capsys)
    assert (status, out.strip()) == (
        0,
        "store migrate: 0 processed, 0 migrated, 0 imported, 0 invalid, 0 merged",
    )


def test_a_file_another_process_moved_since_its_row_was_read_is_current(
    tmp_path: Path,
) -> None:
    """Two migrators (the server's and the command) read the same batch; one moves a file first."""
    root = tmp_path / "store"
    flat_store(root, 2)
    layout = Layout(root)
    with open_shared(layout) as db:
        stale = db.files_to_move(below_id=None, fs_version=layout.current, limit=10)
        assert len(stale) == 2
        first = migrate_file(layout, db, stale[0])  # the other process's move
        assert first.outcome == "moved"
        again = migrate_file(layout, db, stale[0])  # this one, with the row it read before
    assert again.outcome == "current", again.detail
    assert again.file.fs_version == 2
    assert _rows(root)[stale[0].name].fs_version == 2
    assert _check_ok(root) == []


def test_the_index_pass_goes_newest_first_and_resumes_where_it_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    flat_store(root, 6)
    layout = Layout(root)
    names = sorted(_rows(root))  # the serials grow with time
    moved: list[str] = []
    with open_shared(layout) as db:
        report = MigrationReport(say=moved.append)
        run_migration(layout, db, report, batch_size=2, stop=lambda: report.migrated == 2)
    assert report.stopped
    assert report.stopped_at == names[3]
    assert "stopped: resume with --resume-from " + names[3] in report.summary()
    assert [n for n, row in _rows(root).items() if row.fs_version == 2] == names[4:]
    status, out = _migrate(root, capsys, "--resume-from", names[1], "--batch-size", "1")
    assert status == 0, out
    assert "2 processed, 2 migrated" in out
    assert {n for n, row in _rows(root).items() if row.fs_version == 1} == {names[2], names[3]}
    assert _check_ok(root) == []
    status, out = _migrate(root, capsys)
    assert (status, "2 processed, 2 migrated" in out) == (0, True)
    assert placed_files(root) == ({name: 2 for name in names}, [])


def test_the_command_says_what_is_wrong_with_its_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert store_cli(["migrate", "--root", str(tmp_path / "none")]) == 2
    assert f"no store at {tmp_path / 'none'}" in capsys.readouterr().err
    root = tmp_path / "store"
    flat_store(root, 1)
    assert store_cli(["migrate", "--root", str(root), "--resume-from", "nope.warc.gz"]) == 1
    assert "--resume-from nope.warc.gz: no file of that name in the store" in (
        capsys.readouterr().err
    )
    for bad in (["--batch-size", "0"], ["--interval", "-1"], ["--interval", "soon"]):
        with pytest.raises(SystemExit) as exit_info:
            store_cli(["migrate", "--root", str(root), *bad])
        assert exit_info.value.code == 2
        assert "is not a" in capsys.readouterr().err


# ---------------------------------------------- what an interrupted move leaves
def _one_file(root: Path) -> tuple[Layout, FileRow]:
    [row] = _rows(root).values()
    return Layout(root), row


def test_a_partial_copy_is_resumed_and_a_torn_one_copied_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    flat_store(root, 100)  # file 99 holds 2.5 MB: three copy chunks
    layout = Layout(root)
    big = max(_rows(root).values(), key=lambda row: layout.place(row).stat().st_size)
    data = layout.place(big).read_bytes()
    target = layout.path_of(big.name, fs_version=2, date=big.date)
    temporary = target.with_name(moving_name(big.name))
    for prefix, chunks in ((data[: 2 << 20], 1), (b"torn" * (1 << 19), 1 + 3)):
        layout.make_directory(target.parent)
        temporary.write_bytes(prefix)  # what a move killed in its copy leaves
        copied: list[str] = []
        db = IndexDB(layout.db_path)
        try:
            row = db.file_by_id(big.id)
            assert row is not None
            result = migrate_file(layout, db, row, mover=Mover(layout, db, inject=copied.append))
        finally:
            db.close()
        assert result.outcome == "moved", result.detail
        # Only the bytes after the good prefix were copied; a torn one is copied whole.
        assert copied.count("move_copy") == chunks
        assert target.read_bytes() == data
        assert not temporary.exists()
        assert not layout.place(big).exists()
        with sqlite3.connect(layout.db_path) as conn:  # back to layout 1 for the next round
            conn.execute("UPDATE files SET fs_version = 1 WHERE id = ?", (big.id,))
        shutil.move(target, layout.place(big))
    assert _check_ok(root) == []


def _two_files(root: Path) -> tuple[Layout, FileRow, FileRow, Path]:
    """A store of two files in layout 1, and the layout-2 place of the first (made)."""
    flat_store(root, 2)
    layout = Layout(root)
    first, second = sorted(_rows(root).values(), key=lambda row: row.id)
    target = layout.path_of(first.name, fs_version=2, date=first.date)
    layout.make_directory(target.parent)
    return layout, first, second, target


def test_copies_left_by_a_killed_move_pass_check_and_are_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    # Killed after the link, before the commit: a whole copy at the new place.
    layout, first, second, ahead = _two_files(root)
    shutil.copyfile(layout.place(first), ahead)
    # Killed after the commit, before the old copy was removed.
    behind = layout.place(second)
    shutil.copyfile(behind, tmp_path / "copy")
    with sqlite3.connect(layout.db_path) as conn:
        conn.execute("UPDATE files SET fs_version = 2 WHERE id = ?", (second.id,))
    (tmp_path / "copy").rename(layout.path_of(second.name, fs_version=2, date=second.date))
    # Killed in the middle of a copy (of a third move) is the test above.
    notes = _check_ok(root)
    assert sorted(notes) == sorted(
        f"{path.relative_to(root)}: a second copy of {name} left by an interrupted move "
        "(`gateway store migrate` removes it)"
        for path, name in ((ahead, first.name), (behind, second.name))
    )
    status, out = _migrate(root, capsys)
    assert status == 0, out
    assert "2 processed, 1 migrated" in out
    assert "1 leftover(s) of interrupted moves removed" in out
    assert placed_files(root) == ({first.name: 2, second.name: 2}, [])
    assert _check_ok(root) == []


# -------------------------------------------------------- the reconcile pass
async def test_orphans_are_imported_where_they_are(
    tmp_path: Path,
    sample_dir: Path,
    make_client: Callable[[str], Awaitable[Client]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "store"
    await asyncio.to_thread(flat_store, root, 3)
    layout = Layout(root)
    # One file the store wrote whose row an older release's crash lost ...
    lost = sorted(_rows(root).values(), key=lambda row: row.id)[1]
    with sqlite3.connect(layout.db_path) as conn:
        conn.execute("DELETE FROM captures WHERE file_id = ?", (lost.id,))
        conn.execute("DELETE FROM files WHERE id = ?", (lost.id,))
    # ... and one copied in by hand.
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", layout.warcs)
    by_hand = (layout.warcs / "iana.warc.gz").read_bytes()
    status, out = _migrate(root, capsys)
    assert status == 0, out
    assert "imported, 343 record(s) (the store will read it, never move it)" in out
    assert f"warcs/{lost.name}: imported, 3 record(s) (written by this store)" in out
    assert "processed, 3 migrated, 2 imported, 0 invalid, 0 merged" in out
    rows = _rows(root)
    assert (rows[lost.name].origin, rows[lost.name].fs_version) == ("written", 2)
    assert (rows["iana.warc.gz"].origin, rows["iana.warc.gz"].fs_version) == ("found", 1)
    assert (layout.warcs / "iana.warc.gz").read_bytes() == by_hand
    assert placed_files(root)[1] == []
    assert _check_ok(root) == []
    client = await make_client(_config(root))
    await _loads_every_capture(client, expected_payloads(3))
    resp = await client.get(
        "/stored/resource", params={"url": "http://www.iana.org/", "closest": "20140126200624"}
    )
    assert resp.status == 200


def test_a_store_written_file_that_cannot_be_read_is_quarantined(
    tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    flat_store(root, 2)
    layout = Layout(root)
    lost = sorted(_rows(root).values(), key=lambda row: row.id)[0]
    with sqlite3.connect(layout.db_path) as conn:
        conn.execute("DELETE FROM captures WHERE file_id = ?", (lost.id,))
        conn.execute("DELETE FROM files WHERE id = ?", (lost.id,))
    path = layout.place(lost)
    data = bytearray(path.read_bytes())
    data[-200] ^= 0xFF  # inside its last record's gzip member
    path.write_bytes(bytes(data))
    foreign = layout.warcs / "someone-elses.warc.gz"
    shutil.copy(sample_dir / "warcs" / "example-bad.warc.gz.bad", foreign)
    status, out = _migrate(root, capsys)
    assert status == 1
    day = datetime.now(UTC).strftime("%Y%m%d")
    quarantined = root / "invalid" / day / lost.name
    assert f"warcs/{lost.name}: written by this store but not whole (" in out
    assert f"moved to invalid/{day}/{lost.name}" in out
    assert quarantined.read_bytes() == bytes(data)
    assert "warcs/someone-elses.warc.gz: not a whole WARC file (" in out
    assert "not the store's: left alone" in out
    assert foreign.read_bytes() == (sample_dir / "warcs" / "example-bad.warc.gz.bad").read_bytes()
    assert "3 processed, 1 migrated, 0 imported, 1 invalid, 0 merged; " in out
    assert "1 file(s) reported, not the store's to change" in out
    assert lost.name not in _rows(root)


async def test_two_files_with_the_same_bytes_are_merged(
    tmp_path: Path,
    sample_dir: Path,
    make_client: Callable[[str], Awaitable[Client]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An older release imported a file without its SHA-256; the same bytes came again."""
    _extract(tmp_path)
    root = tmp_path / "clean"
    again = tmp_path / "example-again.warc.gz"
    shutil.copy(sample_dir / "warcs" / "example.warc.gz", again)
    assert await asyncio.to_thread(store_cli, ["add", "--root", str(root), str(again)]) == 0
    assert "example-again.warc.gz: added" in capsys.readouterr().out
    twice = _rows(root)
    copy = Layout(root).place(twice["example-again.warc.gz"])
    status, out = _migrate(root, capsys)
    assert status == 0, out
    assert "0 imported, 0 invalid, 1 merged" in out
    rows = _rows(root)
    assert "example-again.warc.gz" not in rows
    assert not copy.exists()
    assert rows["example.warc.gz"].sha256 == twice["example-again.warc.gz"].sha256
    client = await make_client(_config(root))
    url = "http://example.com?example=1"
    resp = await client.get("/stored/index", params={"url": url, "output": "json"})
    lines = (await resp.text()).splitlines()
    # The original's two captures, once each (the duplicate's entries were not kept twice).
    assert len(lines) == 2
    assert all('"filename": "example.warc.gz"' in line for line in lines)
    for closest in ("20140103030321", "20140103030341"):  # the response, then its revisit
        resp = await client.get("/stored/resource", params={"url": url, "closest": closest})
        assert resp.status == 200
    assert _check_ok(root) == []


def test_a_name_clash_at_the_new_place_keeps_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    layout, first, _, squatter = _two_files(root)
    squatter.write_bytes(b"a file someone put here, not the store's\n")
    ours = layout.place(first).read_bytes()
    status, out = _migrate(root, capsys)
    assert status == 1
    assert f"{first.name}: left in layout 1 (clash): {squatter} exists and is another file" in out
    assert squatter.read_bytes() == b"a file someone put here, not the store's\n"
    assert layout.place(_rows(root)[first.name]).read_bytes() == ours
    # check names the file in the way; once it is gone, the move goes ahead.
    problems = [str(p) for p in check_store(layout, progress=False).problems]
    assert problems == [
        f"{squatter.relative_to(root)}: not a file of this store; the store never moves or "
        "deletes it (to import it, move it out of the store and `gateway store add` it) "
        "[foreign_file]"
    ]
    squatter.unlink()
    status, out = _migrate(root, capsys)
    assert status == 0, out
    assert placed_files(root)[1] == []


# --------------------------------------------------------------- disk full
def test_a_full_disk_abandons_the_move_cleanly_and_it_is_tried_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    flat_store(root, 100)
    layout = Layout(root)
    big = max(_rows(root).values(), key=lambda row: layout.place(row).stat().st_size)
    before = tree_snapshot(root / "warcs")
    calls: list[str] = []

    def full(point: str) -> None:
        calls.append(point)
        if point == "move_copy" and calls.count(point) == 2:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    with open_shared(layout) as db:
        row = db.file_by_id(big.id)
        assert row is not None
        result = migrate_file(layout, db, row, mover=Mover(layout, db, inject=full))
    assert result.outcome == "failed"
    assert "the move was abandoned and will be tried again (No space left on device" in (
        result.detail
    )
    # Nothing but an empty directory changed: no partial copy, the row as it was.
    assert tree_snapshot(root / "warcs") == before
    assert _rows(root)[big.name].fs_version == 1
    assert _check_ok(root) == []
    with open_shared(layout) as db:
        report = run_migration(layout, db, MigrationReport())
    assert (report.migrated, report.left) == (100, 0)
    assert placed_files(root)[1] == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted by the test (skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_really_full_disk_abandons_the_move_cleanly(
    tmp_path: Path, small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy of a 2.5 MB file does not fit beside it on a 4 MiB file system."""
    flat_store(tmp_path / "source", 100)
    root = small_disk / "store"
    layout = Layout(root)
    layout.create()
    source = Layout(tmp_path / "source")
    big = max(_rows(tmp_path / "source").values(), key=lambda r: source.place(r).stat().st_size)
    shutil.copy(source.db_path, layout.db_path)
    with sqlite3.connect(layout.db_path) as conn:  # keep only the big file
        conn.execute("DELETE FROM captures WHERE file_id != ?", (big.id,))
        conn.execute("DELETE FROM files WHERE id != ?", (big.id,))
    shutil.copy(source.place(big), layout.place(big))
    before = tree_snapshot(layout.warcs)
    status, out = _migrate(root, capsys)
    assert status == 1
    assert f"{big.name}: left in layout 1 (failed): {big.name}: the move was abandoned" in out
    assert "No space left on device" in out
    assert tree_snapshot(layout.warcs) == before
    assert _check_ok(root) == []
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    status, out = _migrate(root, capsys)
    assert status == 0, out
    assert placed_files(root) == ({big.name: 2}, [])


# ------------------------------------------------- a new version of the layout
def by_month(warcs: Path, date: str | None) -> Path:
    """A third layout, for the test: ``warcs/v3/YYYY/MM/``."""
    assert date is not None
    return warcs / "v3" / date[:4] / date[4:6]


def by_day_to_by_month(mover: Mover, file: FileRow) -> FileRow:
    return mover.move(file, 3)


CHAIN_3: tuple[tuple[Callable[..., Path], ...], tuple[Step, ...]] = (
    (flat, by_day, by_month),
    (*STEPS, by_day_to_by_month),
)


async def test_a_step_added_for_a_new_layout_is_picked_up_on_write_and_in_the_background(
    tmp_path: Path, sample_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _extract(tmp_path)
    legacy = tmp_path / "clean"  # layout 1, rows without SHA-256
    current = tmp_path / "current"
    await asyncio.to_thread(flat_store, current, 3)
    assert store_cli(["migrate", "--root", str(current), "--no-progress"]) == 0  # to layout 2
    with layout_chain(*CHAIN_3):
        # In the background: every file of layout 2 moves to 3.
        layout = Layout(current)
        with open_shared(layout) as db:
            report = run_migration(layout, db, MigrationReport())
        assert report.migrated == 3
        assert placed_files(current) == ({name: 3 for name in _rows(current)}, [])
        assert all("/v3/" in str(path) for path in layout.walk())
        # On write: the SHA-256 of a row of the old release is about to be recorded
        # (the same file added again); the file moves first, through both steps.
        again = str(sample_dir / "warcs" / "example.warc.gz")
        assert await asyncio.to_thread(store_cli, ["add", "--root", str(legacy), again]) == 0
        row = _rows(legacy)["example.warc.gz"]
        assert row.fs_version == 3
        assert row.sha256 is not None
        assert Layout(legacy).place(row).parent.parts[-3:] == ("v3", "2014", "01")
        # On write: a file a writer of the old release left open, once its close is done.
        monkeypatch.setattr(writer_module, "LINK_GRACE_S", 0.05)
        crashed = tmp_path / "crashed"
        async with await Store.open(StoreSettings(root=str(crashed))):
            for _ in range(200):
                rows = _rows(crashed)
                if all(r.fs_version == 3 for r in rows.values()):
                    break
                await asyncio.sleep(0.05)
        [closed] = _rows(crashed).values()
        assert (closed.state, closed.open_link, closed.fs_version) == ("closed", False, 3)
        assert placed_files(crashed)[1] == []
        assert _check_ok(legacy) == []
        assert _check_ok(crashed) == []
