"""Concurrent captures: one writer, whole records, no interleaved bytes, no half writes."""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.store.framing import scan_frames
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_all_records, read_record, warc_files

URL = "http://example.com/same"
BODY = b"<html>" + b"identical content " * 2000 + b"</html>"


def _assert_pairs_not_interleaved(warc: Path) -> None:
    """Every record is one whole gzip member; each request directly follows its response."""
    with warc.open("rb") as fh:
        frames = list(scan_frames(fh))
    assert frames[-1].end == warc.stat().st_size
    records = read_all_records(warc)
    assert [r.offset for r in records] == [f.offset for f in frames]
    assert records[0].rec_type == "warcinfo"
    body = records[1:]
    assert len(body) % 2 == 0
    for first, second in zip(body[::2], body[1::2], strict=True):
        assert first.rec_type in ("response", "revisit")
        assert second.rec_type == "request"
        assert second.headers["WARC-Concurrent-To"] == first.record_id
        assert second.headers["WARC-Date"] == first.headers["WARC-Date"]


@pytest.mark.parametrize(("policy", "other"), [("revisit", "revisit"), ("skip", "skipped")])
async def test_twenty_concurrent_captures_of_one_url(
    store_root: Path, policy: str, other: str
) -> None:
    settings = StoreSettings(root=str(store_root), dedup=policy)  # type: ignore[arg-type]
    async with await Store.open(settings) as store:
        acks = await asyncio.gather(*(store.record(make_capture(URL, BODY)) for _ in range(20)))
        history = await store.history(URL)
    outcomes: list[str] = sorted(a.outcome for a in acks)
    assert outcomes.count("full") == 1
    assert outcomes.count(other) == 19
    full = next(a for a in acks if a.outcome == "full")
    [warc] = list(warc_files(store.warc_dir))
    _assert_pairs_not_interleaved(warc)
    records = read_all_records(warc)
    responses = [r for r in records if r.rec_type == "response"]
    revisits = [r for r in records if r.rec_type == "revisit"]
    assert len(responses) == 1
    assert responses[0].payload == BODY
    if policy == "revisit":
        assert len(revisits) == 19
        assert len(history) == 20
        assert {r.headers["WARC-Refers-To"] for r in revisits} == {full.record_id}
    else:
        assert revisits == []
        assert len(history) == 1
    assert check_store(Layout(store_root), progress=False).ok


async def test_concurrent_large_captures_from_spooled_files(store_root: Path) -> None:
    bodies = [os.urandom(300_000 + i * 1000) for i in range(12)]

    def spooled(body: bytes) -> tempfile.SpooledTemporaryFile[bytes]:
        # The store takes ownership of the file and closes it.
        spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
            64 * 1024
        )
        spool.write(body)
        return spool

    async with await Store.open(StoreSettings(root=str(store_root))) as store:
        captures = [
            replace(make_capture(f"http://example.com/big{i}", b""), payload=spooled(body))
            for i, body in enumerate(bodies)
        ]
        acks = await asyncio.gather(*(store.record(c) for c in captures))
        for ack, body in zip(acks, bodies, strict=True):
            assert ack.outcome == "full"
            assert read_record(store.warc_dir, ack.capture).payload == body
        assert all(c.payload.closed for c in captures if not isinstance(c.payload, bytes))
    [warc] = list(warc_files(store.warc_dir))
    _assert_pairs_not_interleaved(warc)


async def test_cancelled_caller_does_not_cancel_the_write(store: Store) -> None:
    # A client disconnect cancels the handler awaiting record(); the writer
    # still finishes the capture whole and indexes it.
    bodies = [os.urandom(200_000) for _ in range(10)]
    tasks = [
        asyncio.create_task(store.record(make_capture(f"http://example.com/c{i}", body)))
        for i, body in enumerate(bodies)
    ]
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    await store.close()
    async with await Store.open(store.settings) as reopened:
        for i, body in enumerate(bodies):
            [capture] = await reopened.history(f"http://example.com/c{i}")
            assert read_record(reopened.warc_dir, capture).payload == body
    assert check_store(Layout(store.root), progress=False).ok


async def test_submit_returns_before_the_write_and_acks_later(store: Store) -> None:
    future = await store.submit(make_capture("http://example.com/later", BODY))
    ack = await future
    assert ack.outcome == "full"
    [found] = await store.history("http://example.com/later")
    assert found.offset == ack.capture.offset
