"""Start-up recovery (issue section 5) and the WARC file life cycle (section 1).

Crash states are made by hand from a cleanly closed store: a file renamed
back to ``.open`` with half a record appended is what a writer killed
mid-write leaves; the real thing is in ``test_store_crash.py``.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.store.check import check_store
from gateway.store.errors import StoreLocked
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_all_records, read_record

NAME = re.compile(r"gateway-\d{14}-\d{5}\.warc\.gz")


async def _filled(settings: StoreSettings, count: int = 3) -> list[bytes]:
    bodies = [f"body {i} ".encode() * 50 for i in range(count)]
    async with await Store.open(settings) as store:
        for i, body in enumerate(bodies):
            await store.record(make_capture(f"http://example.com/{i}", body))
    return bodies


def _only_warc(layout: Layout) -> Path:
    [path] = [p for p in layout.warcs.iterdir()]
    return path


async def _assert_served(store: Store, bodies: list[bytes]) -> None:
    for i, body in enumerate(bodies):
        [capture] = await store.history(f"http://example.com/{i}")
        assert read_record(store.warc_dir, capture).payload == body


async def test_warc_file_is_open_while_written_and_closed_after(settings: StoreSettings) -> None:
    store = await Store.open(settings)
    ack = await store.record(make_capture("http://example.com/", b"x"))
    [path] = list(store.warc_dir.iterdir())
    assert path.name.endswith(".warc.gz.open")
    assert NAME.fullmatch(path.name.removesuffix(".open"))
    assert ack.capture.filename == path.name
    await store.close()
    [closed] = list(store.warc_dir.iterdir())
    assert closed.name == path.name.removesuffix(".open")
    records = read_all_records(closed)
    assert records[0].rec_type == "warcinfo"
    assert records[0].headers["WARC-Filename"] == closed.name
    assert all(r.headers.get("WARC-Type") for r in records)
    assert {r.headers["WARC-Type"] for r in records} == {"warcinfo", "response", "request"}
    assert closed.read_bytes()[:2] == b"\x1f\x8b"


async def test_rollover_starts_numbered_files_and_keeps_old_names_loadable(
    store_root: Path,
) -> None:
    settings = StoreSettings(root=str(store_root), rollover_bytes=3_000)
    store = await Store.open(settings)
    acks = [
        await store.record(make_capture(f"http://example.com/{i}", os.urandom(3000)))
        for i in range(4)
    ]
    names = sorted(p.name for p in store.warc_dir.iterdir())
    closed = [n for n in names if not n.endswith(".open")]
    assert len(closed) == 4
    serials = [int(n.split("-")[2][:5]) for n in closed]
    assert serials == [1, 2, 3, 4]
    # A lookup made before a close returned the .open name: it still loads.
    assert read_record(store.warc_dir, acks[0].capture).payload
    [first] = await store.history("http://example.com/0")
    assert first.filename == closed[0]
    await store.close()
    assert not [p for p in store.warc_dir.iterdir() if p.name.endswith(".open")]
    assert check_store(Layout(store_root), progress=False).ok


async def test_torn_tail_of_open_file_is_truncated(settings: StoreSettings) -> None:
    bodies = await _filled(settings)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    size = warc.stat().st_size
    torn = warc.with_name(warc.name + ".open")
    warc.rename(torn)
    last = read_all_records(torn)[-2]  # the last response record
    with torn.open("rb") as fh:
        fh.seek(last.offset)
        member = fh.read(last.length)
    with torn.open("ab") as fh:
        fh.write(member[: len(member) // 2])
    assert not check_store(layout, progress=False).ok
    async with await Store.open(settings) as store:
        assert store.recovery.truncated == [torn.name]
        assert store.recovery.closed == [warc.name]
        await _assert_served(store, bodies)
    assert warc.stat().st_size == size
    assert check_store(layout, progress=False).ok


async def test_whole_records_past_the_index_are_indexed(settings: StoreSettings) -> None:
    # A crash after the records were written but before the index commit.
    bodies = await _filled(settings, count=2)
    extra_root = settings.root_path.parent / "other"
    extra = await _filled(StoreSettings(root=str(extra_root)), count=3)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    other = read_all_records(_only_warc(Layout(extra_root)))
    start = other[-2].offset  # capture 2 of the other store: response + request
    data = _only_warc(Layout(extra_root)).read_bytes()[start:]
    torn = warc.with_name(warc.name + ".open")
    warc.rename(torn)
    with torn.open("ab") as fh:
        fh.write(data)
    async with await Store.open(settings) as store:
        assert store.recovery.indexed_records == 1
        await _assert_served(store, bodies)
        [found] = await store.history("http://example.com/2")
        assert read_record(store.warc_dir, found).payload == extra[2]
    assert check_store(layout, progress=False).ok


async def test_entries_past_the_end_of_a_file_are_dropped(settings: StoreSettings) -> None:
    bodies = await _filled(settings)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    last_response = read_all_records(warc)[-2]
    with warc.open("r+b") as fh:
        fh.truncate(last_response.offset)
    async with await Store.open(settings) as store:
        assert store.recovery.dropped_entries == 1
        await _assert_served(store, bodies[:2])
        assert await store.history("http://example.com/2") == []
    assert check_store(layout, progress=False).ok


async def test_unindexed_warc_files_are_indexed(settings: StoreSettings, sample_dir: Path) -> None:
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    shutil.copy(sample_dir / "warcs" / "example.warc.gz", layout.warcs / "example.warc.gz")
    async with await Store.open(settings) as store:
        assert store.recovery.indexed == ["example.warc.gz"]
        records = await store.history("http://example.com?example=1")
        assert [(r.timestamp, r.offset, r.length) for r in records] == [
            ("20140103030321", 333, 1043),  # as in the sample's cdxj/example.cdxj
            ("20140103030341", 1864, 553),
        ]
        assert {r.filename for r in records} == {"example.warc.gz"}
        assert read_record(store.warc_dir, records[0]).rec_type == "response"
        assert read_record(store.warc_dir, records[1]).rec_type == "revisit"
    assert check_store(layout, progress=False).ok


async def test_unreadable_files_move_to_invalid(settings: StoreSettings) -> None:
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    (layout.warcs / "junk.warc.gz").write_bytes(b"this is not a WARC file at all\n" * 10)
    async with await Store.open(settings) as store:
        assert store.recovery.invalid == ["junk.warc.gz"]
    day = datetime.now(UTC).strftime("%Y%m%d")
    assert (layout.invalid / day / "junk.warc.gz").is_file()
    assert not (layout.warcs / "junk.warc.gz").exists()
    assert check_store(layout, progress=False).ok


async def test_leftovers_are_cleaned_up(settings: StoreSettings) -> None:
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    os.link(warc, warc.with_name(warc.name + ".open"))  # a close interrupted after the link
    (layout.warcs / "x.warc.gz.importing").write_bytes(b"half a copy")
    problems = {p.kind for p in check_store(layout, progress=False).problems}
    assert problems == {"leftover_link", "leftover_import"}
    async with await Store.open(settings) as store:
        assert sorted(store.recovery.deleted) == [warc.name + ".open", "x.warc.gz.importing"]
    assert [p.name for p in layout.warcs.iterdir()] == [warc.name]
    assert check_store(layout, progress=False).ok


async def test_missing_files_lose_their_entries(settings: StoreSettings) -> None:
    await _filled(settings, count=2)
    layout = Layout(settings.root_path)
    _only_warc(layout).unlink()
    assert {p.kind for p in check_store(layout, progress=False).problems} == {"missing_file"}
    async with await Store.open(settings) as store:
        assert store.recovery.dropped_entries == 2
        assert await store.history("http://example.com/0") == []
    assert check_store(layout, progress=False).ok


async def test_open_file_without_captures_is_deleted(settings: StoreSettings) -> None:
    await _filled(settings, count=1)
    layout = Layout(settings.root_path)
    warc = _only_warc(layout)
    only_info = read_all_records(warc)[0]
    data = warc.read_bytes()[: only_info.length]
    (layout.warcs / "gateway-20250101000000-00009.warc.gz.open").write_bytes(data)
    async with await Store.open(settings) as store:
        assert store.recovery.deleted == ["gateway-20250101000000-00009.warc.gz.open"]
    assert [p.name for p in layout.warcs.iterdir()] == [warc.name]


async def test_second_writer_is_refused(store: Store) -> None:
    with pytest.raises(StoreLocked, match="in use"):
        await Store.open(store.settings)
