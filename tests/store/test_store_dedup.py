"""Deduplication (issue section 4): one test per revisit statement, then skip and keep.

WARC 1.1 §6.7.2: a revisit with profile identical-payload-digest names its
original by WARC-Refers-To, WARC-Refers-To-Target-URI and
WARC-Refers-To-Date, carries the original's payload digest, and its block is
the HTTP status line and headers only.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.store.capture import CaptureAck
from gateway.store.errors import StoreWriteError
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_all_records, read_record, warc_files

PROFILE_1_1 = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
BODY = b"<html><body>the same payload every time</body></html>"


async def _original_and_revisit(
    store: Store, *, url_a: str = "http://example.com/a", url_b: str = "http://example.com/a"
) -> tuple[CaptureAck, CaptureAck]:
    first = await store.record(make_capture(url_a, BODY))
    second = await store.record(make_capture(url_b, BODY, status=200, content_type="text/plain"))
    assert (first.outcome, second.outcome) == ("full", "revisit")
    return first, second


async def test_identical_payload_is_written_as_revisit_record(store: Store) -> None:
    first, second = await _original_and_revisit(store)
    original = read_record(store.warc_dir, first.capture)
    revisit = read_record(store.warc_dir, second.capture)
    assert original.rec_type == "response"
    assert revisit.rec_type == "revisit"
    assert revisit.headers["WARC-Type"] == "revisit"
    assert second.capture.mime == "warc/revisit"
    assert second.capture.is_revisit


async def test_revisit_profile_is_identical_payload_digest(store: Store) -> None:
    _, second = await _original_and_revisit(store)
    revisit = read_record(store.warc_dir, second.capture)
    assert revisit.headers["WARC-Profile"] == PROFILE_1_1
    assert revisit.headers.get("WARC-Type") == "revisit"


async def test_revisit_carries_payload_digest_of_original(store: Store) -> None:
    first, second = await _original_and_revisit(store)
    original = read_record(store.warc_dir, first.capture)
    revisit = read_record(store.warc_dir, second.capture)
    assert revisit.headers["WARC-Payload-Digest"] == original.headers["WARC-Payload-Digest"]
    assert second.capture.digest == first.capture.digest == second.payload_digest


async def test_revisit_refers_to_original_record_id(store: Store) -> None:
    first, second = await _original_and_revisit(store)
    revisit = read_record(store.warc_dir, second.capture)
    assert revisit.headers["WARC-Refers-To"] == first.record_id
    assert second.original is not None
    assert second.original.offset == first.capture.offset


async def test_revisit_refers_to_target_uri_of_original(store: Store) -> None:
    # URL-agnostic: the original is another URL's capture.
    _first, second = await _original_and_revisit(
        store, url_a="http://example.com/one", url_b="http://example.org/two"
    )
    revisit = read_record(store.warc_dir, second.capture)
    assert revisit.headers["WARC-Target-URI"] == "http://example.org/two"
    assert revisit.headers["WARC-Refers-To-Target-URI"] == "http://example.com/one"


async def test_revisit_refers_to_date_of_original(store: Store) -> None:
    then = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    first = await store.record(make_capture("http://example.com/d", BODY, when=then))
    second = await store.record(make_capture("http://example.com/d", BODY))
    original = read_record(store.warc_dir, first.capture)
    revisit = read_record(store.warc_dir, second.capture)
    assert original.headers["WARC-Date"] == "2024-05-06T07:08:09.123456Z"
    assert revisit.headers["WARC-Refers-To-Date"] == original.headers["WARC-Date"]


async def test_revisit_block_is_status_line_and_headers(store: Store) -> None:
    _, second = await _original_and_revisit(store)
    revisit = read_record(store.warc_dir, second.capture)
    expected = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n"
    )
    assert revisit.http_block == expected
    assert revisit.payload == b""
    assert int(revisit.headers["Content-Length"]) == len(expected)


async def test_revisit_is_marked_truncated_length(store: Store) -> None:
    _, second = await _original_and_revisit(store)
    revisit = read_record(store.warc_dir, second.capture)
    assert revisit.headers["WARC-Truncated"] == "length"


async def test_revisit_never_refers_to_another_revisit(store: Store) -> None:
    first = await store.record(make_capture("http://example.com/r", BODY))
    acks = [await store.record(make_capture("http://example.com/r", BODY)) for _ in range(3)]
    other_url = await store.record(make_capture("http://example.net/x", BODY))
    for ack in [*acks, other_url]:
        assert ack.outcome == "revisit"
        record = read_record(store.warc_dir, ack.capture)
        assert record.headers["WARC-Refers-To"] == first.record_id
        assert ack.original is not None
        assert read_record(store.warc_dir, ack.original).rec_type == "response"


async def test_dedup_entry_visible_only_after_original_is_durable(store_root: Path) -> None:
    # Two captures with one payload arrive together (one writer batch). The
    # second may refer to the first only once the first is fsynced and
    # committed: the log of fault points shows both happened before the
    # second capture's dedup lookup.
    points: list[str] = []
    store = await Store.open(StoreSettings(root=str(store_root)), fault_injector=points.append)
    try:
        first, second = await asyncio.gather(
            store.record(make_capture("http://example.com/p", BODY)),
            store.record(make_capture("http://example.com/q", BODY)),
        )
    finally:
        await store.close()
    assert (first.outcome, second.outcome) == ("full", "revisit")
    lookups = [i for i, point in enumerate(points) if point == "dedup_lookup"]
    assert len(lookups) == 2
    between = points[lookups[0] : lookups[1]]
    assert "fsync" in between, points
    assert "commit" in between, points


async def test_original_that_fails_to_become_durable_is_never_referred_to(
    store_root: Path,
) -> None:
    # The original's fsync fails: it is truncated away, and the capture with
    # the same payload that follows it in the batch is written in full.
    failed = False

    def fail_first_fsync(point: str) -> None:
        nonlocal failed
        if point == "fsync" and not failed:
            failed = True
            raise OSError(5, "injected EIO on fsync")

    store = await Store.open(StoreSettings(root=str(store_root)), fault_injector=fail_first_fsync)
    try:
        results = await asyncio.gather(
            store.record(make_capture("http://example.com/p", BODY)),
            store.record(make_capture("http://example.com/q", BODY)),
            return_exceptions=True,
        )
        assert isinstance(results[0], StoreWriteError)
        assert isinstance(results[1], CaptureAck)
        assert results[1].outcome == "full"
        assert await store.history("http://example.com/p") == []
    finally:
        await store.close()
    assert check_store(Layout(store_root), progress=False).ok


async def test_failed_dedup_lookup_writes_full_record(store_root: Path) -> None:
    def broken_lookup(point: str) -> None:
        if point == "dedup_lookup":
            raise OSError(5, "injected: dedup index unreadable")

    store = await Store.open(StoreSettings(root=str(store_root)), fault_injector=broken_lookup)
    try:
        first = await store.record(make_capture("http://example.com/f", BODY))
        second = await store.record(make_capture("http://example.com/f", BODY))
        assert (first.outcome, second.outcome) == ("full", "full")
        record = read_record(store.warc_dir, second.capture)
        assert record.rec_type == "response"
        assert record.payload == BODY
    finally:
        await store.close()


async def test_skip_writes_nothing_for_identical_payload(store: Store) -> None:
    first = await store.record(make_capture("http://example.com/s", BODY, dedup="skip"))
    second = await store.record(make_capture("http://example.com/s", BODY, dedup="skip"))
    assert (first.outcome, second.outcome) == ("full", "skipped")
    assert second.capture == first.capture
    assert len(await store.history("http://example.com/s")) == 1
    changed = await store.record(make_capture("http://example.com/s", b"new", dedup="skip"))
    assert changed.outcome == "full"
    # Another URL with a known payload still gets an entry (as a revisit).
    other = await store.record(make_capture("http://example.com/t", BODY, dedup="skip"))
    assert other.outcome == "revisit"
    await store.close()
    [warc] = list(warc_files(store.warc_dir))
    kinds = [r.rec_type for r in read_all_records(warc)]
    assert kinds == ["warcinfo", "response", "request", "response", "request", "revisit", "request"]


async def test_keep_always_writes_full_records(store: Store) -> None:
    acks = [
        await store.record(make_capture("http://example.com/k", BODY, dedup="keep"))
        for _ in range(3)
    ]
    assert [a.outcome for a in acks] == ["full", "full", "full"]
    assert all(read_record(store.warc_dir, a.capture).payload == BODY for a in acks)


async def test_short_payloads_are_not_deduplicated(store_root: Path) -> None:
    settings = StoreSettings(root=str(store_root), dedup_min_payload_bytes=16)
    async with await Store.open(settings) as store:
        acks = [await store.record(make_capture("http://example.com/e", b"")) for _ in range(2)]
    assert [a.outcome for a in acks] == ["full", "full"]


async def test_recent_capture_for_skip_if_updated_days(store: Store) -> None:
    now = datetime.now(UTC)
    await store.record(make_capture("http://example.com/old", BODY, when=now - timedelta(days=10)))
    fresh = await store.record(
        make_capture("http://example.com/new", BODY, when=now - timedelta(days=1))
    )
    assert await store.recent_capture("http://example.com/old", max_age_days=7) is None
    found = await store.recent_capture("http://example.com/new", max_age_days=7)
    assert found is not None
    assert found.offset == fresh.capture.offset
    assert await store.recent_capture("http://example.com/none", max_age_days=7) is None


@pytest.mark.parametrize("policy", ["revisit", "skip"])
async def test_policy_comes_from_settings_when_capture_has_none(
    store_root: Path, policy: str
) -> None:
    settings = StoreSettings(root=str(store_root), dedup=policy)  # type: ignore[arg-type]
    async with await Store.open(settings) as store:
        await store.record(make_capture("http://example.com/z", BODY))
        second = await store.record(make_capture("http://example.com/z", BODY))
    assert second.outcome == ("revisit" if policy == "revisit" else "skipped")
