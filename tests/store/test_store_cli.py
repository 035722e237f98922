"""``gateway store add | check | repair`` through :func:`gateway.commands.store.main`.

``check`` must never change anything: every test that runs it on a broken
store compares a snapshot of the whole store directory before and after.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.warcwriter import WARCWriter

from gateway.cdx.cdxj import CdxRecord
from gateway.commands.store import add_subcommands
from gateway.commands.store import main as store_cli
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.record_driver import record_then_die, settings_for, url_for
from tests.store.store_support import (
    make_capture,
    read_all_records,
    read_record,
    store_path,
    tree_snapshot,
    warc_files,
)


def _fill(settings: StoreSettings, count: int = 4) -> list[bytes]:
    bodies = [f"capture {i} ".encode() * 200 for i in range(count)]

    async def run() -> None:
        async with await Store.open(settings) as store:
            for i, body in enumerate(bodies):
                await store.record(make_capture(f"http://example.com/{i}", body))

    asyncio.run(run())
    return bodies


def _check(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    before = tree_snapshot(root)
    status = store_cli(["check", "--root", str(root), "--no-progress"])
    assert tree_snapshot(root) == before, "store check changed the store"
    return status, capsys.readouterr().out


def _check_repair_check(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str], found: list[str], action: str
) -> None:
    """``check`` fails naming each of ``found``; ``repair`` says ``action``; ``check`` passes."""
    status, out = _check(settings.root_path, capsys)
    assert status == 1
    for text in found:
        assert text in out
    assert store_cli(["repair", "--root", settings.root]) == 0
    assert action in capsys.readouterr().out
    status, out = _check(settings.root_path, capsys)
    assert status == 0, out


def _served_entries(settings: StoreSettings, url: str) -> list[CdxRecord]:
    async def run() -> list[CdxRecord]:
        async with await Store.open(settings, mode="shared") as store:
            return await store.history(url)

    return asyncio.run(run())


def _served(settings: StoreSettings, urls: list[str]) -> dict[str, bytes]:
    async def run() -> dict[str, bytes]:
        out = {}
        async with await Store.open(settings) as store:
            for url in urls:
                for capture in await store.history(url):
                    out[url] = read_record(store.warc_dir, capture).payload
        return out

    return asyncio.run(run())


def test_add_copies_verifies_and_indexes(
    settings: StoreSettings, sample_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = sample_dir / "warcs" / "iana.warc.gz"
    assert store_cli(["add", "--root", settings.root, str(source)]) == 0
    assert "captures indexed" in capsys.readouterr().out
    copy = store_path(Layout(settings.root_path).warcs, "iana.warc.gz")
    assert (
        hashlib.sha256(copy.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )
    # The index agrees with the sample's cdxj-indexer index of the same file.
    expected = set()
    for line in (sample_dir / "cdxj" / "iana.cdxj").read_text().splitlines():
        urlkey, timestamp, block = line.split(" ", 2)
        fields = json.loads(block)
        expected.add((urlkey, timestamp, fields["offset"], fields["length"]))
    assert store_cli(["history", "--root", settings.root, "http://www.iana.org/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines
    for line in lines:
        urlkey, timestamp, block = line.split(" ", 2)
        fields = json.loads(block)
        assert (urlkey, timestamp, fields["offset"], fields["length"]) in expected
    # Adding the same file again changes nothing.
    assert store_cli(["add", "--root", settings.root, str(source)]) == 0
    assert "already in the store" in capsys.readouterr().out
    status, out = _check(settings.root_path, capsys)
    assert status == 0, out


def test_add_rejects_invalid_files(
    settings: StoreSettings, sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.warc.gz"
    shutil.copy(sample_dir / "warcs" / "example-bad.warc.gz.bad", bad)
    not_warc = tmp_path / "notes.txt"
    not_warc.write_text("hello")
    assert store_cli(["add", "--root", settings.root, str(bad), str(not_warc)]) == 1
    err = capsys.readouterr().err
    assert "bad.warc.gz: refused, nothing was changed" in err
    assert "gzip member holds more than one record (use warcio recompress)" in err
    assert "notes.txt: refused, nothing was changed" in err
    assert not settings.root_path.exists()  # refused before the store was even made


def test_check_passes_on_a_healthy_store(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(settings)
    status, out = _check(settings.root_path, capsys)
    assert status == 0
    assert "4 index entries: OK" in out


def test_check_and_repair_a_corrupted_record(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    bodies = _fill(settings)
    [warc] = list(warc_files(Layout(settings.root_path).warcs))
    records = read_all_records(warc)
    victim = [r for r in records if r.rec_type == "response"][1]
    [entry] = _served_entries(settings, "http://example.com/1")
    data = bytearray(warc.read_bytes())
    data[victim.offset + victim.length // 2] ^= 0xFF  # flip a byte inside the gzip member
    warc.write_bytes(bytes(data))
    status, out = _check(settings.root_path, capsys)
    assert status == 1
    assert "damaged" in out
    assert store_cli(["repair", "--root", settings.root]) == 0
    out = capsys.readouterr().out
    # Issue 11 §6: the report says exactly what was lost (it said "0 dropped" when
    # two of three records were): one range of bytes, the one capture in it.
    end = victim.offset + victim.length
    assert (
        f"kept {len(records) - 1} record(s), {len(data) - victim.length} byte(s); "
        f"dropped 0 record(s) failing their digests and 1 unreadable range(s), "
        f"{victim.length} byte(s) in all: bytes {victim.offset}-{end} (unreadable: "
    ) in out
    assert f"1 indexed record(s) lost: http://example.com/1 {entry.timestamp};" in out
    status, out = _check(settings.root_path, capsys)
    assert status == 0, out
    served = _served(settings, [f"http://example.com/{i}" for i in range(4)])
    # Every whole record is kept, the ones after the damaged member included.
    assert served == {f"http://example.com/{i}": bodies[i] for i in (0, 2, 3)}
    assert list((settings.root_path / "invalid").rglob(warc.name))

    async def record_again() -> str:
        async with await Store.open(settings) as store:
            ack = await store.record(make_capture("http://example.com/after", b"after"))
        return ack.capture.filename

    # The writer's next file continues the serials past the salvaged copy's.
    assert Layout.serial_of(asyncio.run(record_again())) == 2


def test_one_repair_drops_a_damaged_record_and_a_bad_digest_after_it(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import zlib

    bodies = _fill(settings)
    [warc] = list(warc_files(Layout(settings.root_path).warcs))
    responses = [r for r in read_all_records(warc) if r.rec_type == "response"]
    first, second = responses[1], responses[3]
    raw = bytearray(warc.read_bytes())
    raw[first.offset + first.length // 2] ^= 0xFF  # unreadable from here on
    member = zlib.decompress(bytes(raw[second.offset : second.offset + second.length]), 31)
    tampered = gzip.compress(member.replace(bodies[3], bodies[3].upper()))  # whole, bad digest
    end = second.offset + second.length
    warc.write_bytes(bytes(raw[: second.offset]) + tampered + bytes(raw[end:]))
    assert store_cli(["repair", "--root", settings.root]) == 0
    out = capsys.readouterr().out
    assert "dropped 1 record(s) failing their digests and 1 unreadable range(s)" in out
    assert f"bytes {second.offset}-{second.offset + len(tampered)} (a record: " in out
    assert "2 indexed record(s) lost: http://example.com/1" in out
    assert "not repaired" not in out
    assert _check(settings.root_path, capsys)[0] == 0
    served = _served(settings, [f"http://example.com/{i}" for i in range(4)])
    assert served == {f"http://example.com/{i}": bodies[i] for i in (0, 2)}


def test_check_and_repair_a_bad_digest(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A record whose bytes are whole but whose digest is wrong: rewrite one
    # response with a different payload of the same length (same framing).
    bodies = _fill(settings)
    [warc] = list(warc_files(Layout(settings.root_path).warcs))
    import gzip
    import zlib

    records = read_all_records(warc)
    victim = [r for r in records if r.rec_type == "response"][2]
    raw = warc.read_bytes()
    member = zlib.decompress(raw[victim.offset : victim.offset + victim.length], 31)
    tampered = member.replace(bodies[2], bodies[2].upper())
    new_member = gzip.compress(tampered)
    warc.write_bytes(raw[: victim.offset] + new_member + raw[victim.offset + victim.length :])
    status, out = _check(settings.root_path, capsys)
    assert status == 1
    assert "[digest]" in out
    assert store_cli(["repair", "--root", settings.root]) == 0
    capsys.readouterr()
    status, out = _check(settings.root_path, capsys)
    assert status == 0, out
    served = _served(settings, [f"http://example.com/{i}" for i in range(4)])
    assert served == {f"http://example.com/{i}": bodies[i] for i in (0, 1, 3)}


def test_check_and_repair_a_torn_open_file(
    store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [name] = set(record_then_die(store_root, 4))
    torn = store_path(Layout(store_root).warcs, name)
    last = read_all_records(torn)[-1]
    member = torn.read_bytes()[last.offset : last.offset + last.length]
    with torn.open("ab") as fh:
        fh.write(member[: len(member) - 9])  # a write cut short
    status, out = _check(store_root, capsys)
    assert status == 1
    assert "not_closed" in out
    assert "torn_tail" in out
    assert store_cli(["repair", "--root", str(store_root)]) == 0
    assert "truncated the torn tail" in capsys.readouterr().out
    assert _check(store_root, capsys)[0] == 0
    served = _served(settings_for(str(store_root)), [url_for(i) for i in range(4)])
    assert set(served) == {url_for(i) for i in range(4)}
    assert not list(Layout(store_root).warcs.glob("*.open"))


def test_check_notices_a_file_that_changed_after_it_was_closed(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    # A whole record added after the last one (a warcinfo: nothing to index):
    # framing and digests still pass, the SHA-256 does not.
    _fill(settings, count=2)
    [warc] = list(warc_files(Layout(settings.root_path).warcs))
    with warc.open("ab") as fh:
        writer = WARCWriter(fh, gzip=True, warc_version="1.1")
        writer.write_record(writer.create_warcinfo_record("added.warc.gz", {"note": "x"}))
    found = ["[sha256]", "changed after it was closed"]
    _check_repair_check(settings, capsys, found, "recorded the new SHA-256")


def test_check_reports_index_entries_that_disagree(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    _fill(settings)
    db = sqlite3.connect(Layout(settings.root_path).db_path)
    db.execute("UPDATE captures SET offset = offset + 1 WHERE id = 2")
    db.execute("DELETE FROM captures WHERE id = 3")
    db.commit()
    db.close()
    _check_repair_check(settings, capsys, ["[index_mismatch]", "[unindexed_record]"], "re-indexed")


def test_check_while_a_writer_holds_the_store(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(settings, count=2)

    async def run() -> None:
        async with await Store.open(settings) as store:
            await store.record(make_capture("http://example.com/live", b"live"))
            status = await asyncio.to_thread(
                store_cli, ["check", "--root", settings.root, "--no-progress"]
            )
            assert status == 0
            assert "1 file(s) being written or imported skipped: OK" in capsys.readouterr().out
            assert await asyncio.to_thread(store_cli, ["repair", "--root", settings.root]) == 2
            assert "in use" in capsys.readouterr().err

    asyncio.run(run())


def test_check_shows_a_progress_bar(
    settings: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(settings, count=2)
    assert store_cli(["check", "--root", settings.root, "--progress"]) == 0
    assert "store check: 100%" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "repair"])
def test_check_or_repair_of_a_missing_store_is_refused_and_creates_nothing(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "nothing"
    assert store_cli([command, "--root", str(root)]) == 2  # bad usage, not a problem to repair
    err = capsys.readouterr().err
    assert f"gateway store {command}: no store at {root}" in err
    assert "run `gateway store repair`" not in err  # no advice to repair nothing
    assert not root.exists()


def test_subcommands_register_under_gateway_store(settings: StoreSettings) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="gateway")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["store", "check", "--root", settings.root, "--no-progress"])
    assert callable(args.run)
    _fill(settings, count=1)
    assert args.run(args) == 0


def test_module_entry_point_runs_as_a_process(settings: StoreSettings) -> None:
    _fill(settings, count=1)
    done = subprocess.run(
        [sys.executable, "-m", "gateway.commands.store", "check", "--root", settings.root],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


def test_config_option_uses_the_settings_loader(settings: StoreSettings, tmp_path: Path) -> None:
    import argparse

    seen: list[str] = []

    def loader(path: str) -> StoreSettings:
        seen.append(path)
        return settings

    parser = argparse.ArgumentParser(prog="gateway")
    add_subcommands(parser.add_subparsers(dest="command", required=True), settings_loader=loader)
    _fill(settings, count=1)
    config = str(tmp_path / "collections.yaml")
    args = parser.parse_args(["store", "check", "--config", config, "--no-progress"])
    assert args.run(args) == 0
    assert seen == [config]
