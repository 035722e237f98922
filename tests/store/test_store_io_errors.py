"""I/O errors while writing (issue section 5/6): a failed write leaves the store consistent.

Faults are injected through the writer's documented ``fault_injector`` hook
(an OSError raised at a named step, after bytes already reached the file for
``write``), or come from a payload file that really fails while being copied.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from io import BytesIO
from pathlib import Path

import pytest

from gateway.store.errors import StoreWriteError
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_all_records, read_record, warc_files


class FailOnce:
    """A fault injector raising OSError(EIO) the first time ``point`` is reached."""

    def __init__(self, point: str, *, armed: bool = True) -> None:
        self.point = point
        self.armed = armed
        self.fired = False

    def __call__(self, point: str) -> None:
        if self.armed and point == self.point and not self.fired:
            self.fired = True
            raise OSError(5, f"injected EIO at {point}")


def _warc_size(store: Store) -> int:
    return sum(p.stat().st_size for p in warc_files(store.warc_dir))


@pytest.mark.parametrize("point", ["write", "fsync", "commit"])
async def test_failed_write_leaves_store_consistent(store_root: Path, point: str) -> None:
    fault = FailOnce(point, armed=False)
    store = await Store.open(StoreSettings(root=str(store_root)), fault_injector=fault)
    try:
        before = await store.record(make_capture("http://example.com/before", b"ok " * 1000))
        size = _warc_size(store)
        fault.armed = True
        with pytest.raises(StoreWriteError, match=f"injected EIO at {point}"):
            await store.record(make_capture("http://example.com/lost", os.urandom(50_000)))
        assert fault.fired
        assert _warc_size(store) == size  # truncated back to the offset before it
        assert await store.history("http://example.com/lost") == []
        after = await store.record(make_capture("http://example.com/after", b"fine " * 1000))
        assert after.outcome == "full"
        assert after.capture.offset == size
        for ack in (before, after):
            assert read_record(store.warc_dir, ack.capture).record_id == ack.record_id
    finally:
        await store.close()
    assert check_store(Layout(store_root), progress=False).ok
    [warc] = list(warc_files(store_root / "warcs"))
    kinds = [r.rec_type for r in read_all_records(warc)]
    assert kinds == ["warcinfo", "response", "request", "response", "request"]


class FailsOnSecondPass(BytesIO):
    """A payload file that reads once (the digest pass), then fails half-way through the copy."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.passes = 0

    def seek(self, pos: int, whence: int = 0) -> int:
        if pos == 0 and whence == 0:
            self.passes += 1
        return super().seek(pos, whence)

    def read(self, size: int | None = -1) -> bytes:
        if self.passes >= 2 and self.tell() > 100_000:
            raise OSError(5, "spool file unreadable")
        return super().read(size)


async def test_payload_file_failing_mid_copy_is_rolled_back(store: Store) -> None:
    await store.record(make_capture("http://example.com/a", b"first"))
    size = _warc_size(store)
    flaky = FailsOnSecondPass(os.urandom(400_000))
    capture = make_capture("http://example.com/b", b"")
    with pytest.raises(StoreWriteError, match="spool file unreadable"):
        await store.record(replace(capture, payload=flaky))
    assert flaky.closed
    assert _warc_size(store) == size
    ack = await store.record(make_capture("http://example.com/c", b"third"))
    assert read_record(store.warc_dir, ack.capture).payload == b"third"
    await store.close()
    assert check_store(Layout(store.root), progress=False).ok


async def test_failure_in_one_capture_of_a_batch_spares_the_others(store_root: Path) -> None:
    fault = FailOnce("write")
    store = await Store.open(StoreSettings(root=str(store_root)), fault_injector=fault)
    try:
        results = await asyncio.gather(
            *(
                store.record(make_capture(f"http://example.com/{i}", os.urandom(10_000)))
                for i in range(6)
            ),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert len(failed) == 1
        assert isinstance(failed[0], StoreWriteError)
        for i, result in enumerate(results):
            found = await store.history(f"http://example.com/{i}")
            assert len(found) == (0 if isinstance(result, BaseException) else 1)
    finally:
        await store.close()
    assert check_store(Layout(store_root), progress=False).ok
