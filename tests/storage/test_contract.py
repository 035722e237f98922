"""The storage contract, run against every storage type (a local directory and a
real SeaweedFS alike): create-only and verified puts, range reads, stat,
listing, digests, and what is left behind when a put fails or is cancelled.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from gateway.storage import STORAGE_TYPES, Storage
from gateway.storage.errors import (
    DigestMismatch,
    InvalidObjectName,
    ObjectConflict,
    ObjectNotFound,
    RangeNotSatisfiable,
)
from gateway.storage.local import LocalStorage
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_upload import STAGING_DIR
from tests.storage.conftest import PART_BYTES, STORAGE_PARAMS, blob, chunks, read_all, sha256_hex

NAME: Final = "gateway-20250301120000-00001.warc.gz"
SMALL: Final = 300_000
#: Past the S3 part size, not past its single-PUT limit: spooled to a file there.
SPOOLED: Final = PART_BYTES + 1_000_003
#: Past the S3 single-PUT limit of the suite: a multipart upload of three parts there.
LARGE: Final = 2 * PART_BYTES + 123_457
#: Every way a put can go (on S3: in memory, spooled to a file, multipart).
SIZES: Final = pytest.mark.parametrize(
    "size", [SMALL, SPOOLED, LARGE], ids=["single", "spooled", "multipart"]
)
#: The two ends, where the middle way adds nothing to what a test shows.
ENDS: Final = pytest.mark.parametrize("size", [SMALL, LARGE], ids=["single", "multipart"])


async def leftovers(storage: Storage) -> list[str]:
    """Everything a put may leave besides objects: temporary files, staging keys,
    multipart uploads in progress."""
    if isinstance(storage, LocalStorage):
        return [
            str(path.relative_to(storage.root))
            for path in storage.root.rglob("*")
            if any(part.startswith(".") for part in path.relative_to(storage.root).parts)
        ]
    assert isinstance(storage, S3Storage)
    bucket, staging = storage.config.bucket, storage.config.prefix + STAGING_DIR
    listing = await storage.client.list_objects_v2(Bucket=bucket, Prefix=staging)
    uploads = await storage.client.list_multipart_uploads(Bucket=bucket, Prefix=staging)
    return [item["Key"] for item in listing.get("Contents", [])] + [
        f"upload {upload['Key']}" for upload in uploads.get("Uploads", [])
    ]


class Tracked:
    """An async iterable over ``data`` that records whether it was read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.read = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.read = True
        async for chunk in chunks(self.data):
            yield chunk


def test_every_type_is_in_the_contract_suite() -> None:
    assert set(STORAGE_PARAMS) == set(STORAGE_TYPES)


@SIZES
async def test_put_creates_a_verified_object(storage: Storage, size: int) -> None:
    data = blob(size)
    result = await storage.put(NAME, chunks(data), size=size, sha256=sha256_hex(data))
    assert result.outcome == "created"
    assert result.info.size == size
    assert result.verified_by
    info = await storage.stat(NAME)
    assert (info.name, info.size) == (NAME, size)
    assert info.sha256 in (None, sha256_hex(data))
    assert await read_all(storage, NAME) == data
    assert await storage.digest(NAME) == sha256_hex(data)
    assert await leftovers(storage) == []


@ENDS
async def test_second_put_of_the_same_bytes_is_already_present(storage: Storage, size: int) -> None:
    data = blob(size)
    await storage.put(NAME, chunks(data), size=size, sha256=sha256_hex(data))
    again = Tracked(data)
    result = await storage.put(NAME, again, size=size, sha256=sha256_hex(data))
    assert result.outcome == "already_present"
    assert not again.read, "an object already there is compared, not written again"


@ENDS
async def test_put_never_overwrites_another_object(storage: Storage, size: int) -> None:
    first, other = blob(size, seed=1), blob(size, seed=2)
    await storage.put(NAME, chunks(first), size=size, sha256=sha256_hex(first))
    with pytest.raises(ObjectConflict) as caught:
        await storage.put(NAME, chunks(other), size=size, sha256=sha256_hex(other))
    assert caught.value.existing_sha256 == sha256_hex(first)
    assert caught.value.storage == storage.name
    assert caught.value.name == NAME
    assert await storage.digest(NAME) == sha256_hex(first)
    shorter = other[:-1]
    with pytest.raises(ObjectConflict, match=f"{size} bytes"):
        await storage.put(NAME, chunks(shorter), size=len(shorter), sha256=sha256_hex(shorter))
    assert await storage.digest(NAME) == sha256_hex(first)
    assert await leftovers(storage) == []


@ENDS
async def test_replace_writes_over_another_object_only_when_asked(
    storage: Storage, size: int
) -> None:
    first, other = blob(size, seed=1), blob(size + 10, seed=2)
    await storage.put(NAME, chunks(first), size=size, sha256=sha256_hex(first))
    result = await storage.put(
        NAME, chunks(other), size=len(other), sha256=sha256_hex(other), replace=True
    )
    assert result.outcome == "replaced"
    assert await storage.digest(NAME) == sha256_hex(other)
    assert await leftovers(storage) == []


@SIZES
async def test_digest_mismatch_leaves_nothing(storage: Storage, size: int) -> None:
    data = blob(size)
    corrupt = bytearray(data)
    corrupt[size // 2] ^= 0x01
    with pytest.raises(DigestMismatch) as caught:
        await storage.put(NAME, chunks(bytes(corrupt)), size=size, sha256=sha256_hex(data))
    assert caught.value.sha256 == sha256_hex(bytes(corrupt))
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)
    assert [info async for info in storage.iter()] == []
    assert await leftovers(storage) == []
    # the same name takes the right bytes afterwards
    result = await storage.put(NAME, chunks(data), size=size, sha256=sha256_hex(data))
    assert result.outcome == "created"


@ENDS
async def test_wrong_size_leaves_nothing(storage: Storage, size: int) -> None:
    data = blob(size)
    with pytest.raises(DigestMismatch, match="more than the declared"):
        await storage.put(NAME, chunks(data + b"x"), size=size, sha256=sha256_hex(data))
    with pytest.raises(DigestMismatch, match=f"{size - 1} bytes"):
        await storage.put(NAME, chunks(data[:-1]), size=size, sha256=sha256_hex(data))
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)
    assert await leftovers(storage) == []


async def test_empty_object(storage: Storage) -> None:
    result = await storage.put(NAME, chunks(b""), size=0, sha256=sha256_hex(b""))
    assert result.outcome == "created"
    assert (await storage.stat(NAME)).size == 0
    assert await read_all(storage, NAME) == b""
    assert await storage.digest(NAME) == sha256_hex(b"")


async def test_range_reads(storage: Storage) -> None:
    data = blob(3_000_000)
    await storage.put(NAME, chunks(data), size=len(data), sha256=sha256_hex(data))
    for offset, length in [(0, 1), (0, 10), (1_234_567, 1_500_000), (2_999_999, 1), (100, 0)]:
        assert await read_all(storage, NAME, offset, length) == data[offset : offset + length]
    assert await read_all(storage, NAME, 2_000_000) == data[2_000_000:]
    assert await read_all(storage, NAME, len(data), 0) == b""
    assert await read_all(storage, NAME, len(data)) == b""
    pieces = [chunk async for chunk in storage.get_range(NAME)]
    assert max(map(len, pieces)) <= 1 << 20
    with pytest.raises(RangeNotSatisfiable):
        await read_all(storage, NAME, 2_999_990, 11)
    with pytest.raises(RangeNotSatisfiable):
        await read_all(storage, NAME, 3_000_001)
    with pytest.raises(ObjectNotFound):
        await read_all(storage, "missing.warc.gz", 0, 10)
    with pytest.raises(ObjectNotFound):
        await storage.stat("missing.warc.gz")
    with pytest.raises(ObjectNotFound):
        await storage.digest("missing.warc.gz")


async def _read_opened(storage: Storage, name: str, offset: int, length: int | None) -> bytes:
    reader = await storage.open_range(name, offset, length)
    try:
        pieces = []
        while piece := await reader.read(100_000):
            assert len(piece) <= 100_000
            pieces.append(piece)
        assert await reader.read(10) == b""
        return b"".join(pieces)
    finally:
        reader.close()
        reader.close()  # twice is allowed


async def test_opened_ranges(storage: Storage) -> None:
    data = blob(3_000_000)
    await storage.put(NAME, chunks(data), size=len(data), sha256=sha256_hex(data))
    for offset, length in [(0, 1), (1_234_567, 1_500_000), (2_999_999, 1), (100, 0), (5, None)]:
        end = None if length is None else offset + length
        assert await _read_opened(storage, NAME, offset, length) == data[offset:end]
    assert await _read_opened(storage, NAME, len(data), None) == b""
    assert await _read_opened(storage, NAME, len(data), 0) == b""
    reader = await storage.open_range(NAME, 10, 1_000_000)
    assert await reader.read(10) == data[10:20]
    reader.close()  # mid-range: the file or connection is let go
    assert await reader.read(10) == b""
    if reader.read_blocking is not None:
        blocking = await storage.open_range(NAME, 7, 3)
        assert await asyncio.to_thread(blocking.read_blocking, 100) == data[7:10]  # type: ignore[arg-type]
        blocking.close()
    with pytest.raises(RangeNotSatisfiable):
        await _read_opened(storage, NAME, 2_999_990, 11)
    with pytest.raises(RangeNotSatisfiable):
        await _read_opened(storage, NAME, 3_000_001, None)
    with pytest.raises(ObjectNotFound):
        await storage.open_range("missing.warc.gz", 0, 10)


async def test_a_range_read_can_stop_early(storage: Storage) -> None:
    data = blob(4_000_000)
    await storage.put(NAME, chunks(data), size=len(data), sha256=sha256_hex(data))
    stream = storage.get_range(NAME)
    first = await anext(stream)
    await stream.aclose()
    assert first == data[: len(first)]
    assert await read_all(storage, NAME, 0, 5) == data[:5]


async def test_listing(storage: Storage) -> None:
    storage.page_size = 100  # 3 pages
    names = [f"2025/03/file-{i:04d}.warc.gz" for i in range(250)] + ["top.warc.gz", "a/b/c.warc"]
    slots = asyncio.Semaphore(16)

    async def put(name: str) -> None:
        data = name.encode()
        async with slots:
            await storage.put(name, chunks(data), size=len(data), sha256=sha256_hex(data))

    await asyncio.gather(*(put(name) for name in names))
    listed = [info async for info in storage.iter()]
    assert sorted(info.name for info in listed) == sorted(names)
    assert all(info.size == len(info.name) for info in listed)
    assert {info.name async for info in storage.iter("2025/03/file-000")} == {
        f"2025/03/file-{i:04d}.warc.gz" for i in range(10)
    }
    assert {info.name async for info in storage.iter("a/")} == {"a/b/c.warc"}
    assert [info async for info in storage.iter("nothing/")] == []
    stream = storage.iter()
    assert (await anext(stream)).name in names
    await stream.aclose()


@pytest.mark.parametrize(
    "name", ["", "../escape.warc", "/abs.warc", "a//b.warc", ".hidden.warc", "a/.b/c", "nul\0"]
)
async def test_invalid_names(storage: Storage, name: str) -> None:
    with pytest.raises(InvalidObjectName):
        await storage.put(name, chunks(b"x"), size=1, sha256=sha256_hex(b"x"))
    with pytest.raises(InvalidObjectName):
        await storage.stat(name)


@ENDS
async def test_concurrent_puts_of_the_same_bytes_create_it_once(
    storage: Storage, size: int
) -> None:
    data = blob(size)
    results = await asyncio.gather(
        *(storage.put(NAME, chunks(data), size=size, sha256=sha256_hex(data)) for _ in range(4))
    )
    outcomes = sorted(result.outcome for result in results)
    assert outcomes.count("created") >= 1
    assert set(outcomes) <= {"created", "already_present"}
    assert await storage.digest(NAME) == sha256_hex(data)
    assert await leftovers(storage) == []


@SIZES
async def test_concurrent_puts_of_different_bytes_leave_one_whole_object(
    storage: Storage, size: int
) -> None:
    """Create-only under races: one put wins, every other one reports the conflict,
    and the object is the winner's bytes (SeaweedFS' conditional CompleteMultipartUpload
    alone would let several win and the last one overwrite)."""
    blobs = [blob(size, seed=seed) for seed in range(4)]
    results = await asyncio.gather(
        *(storage.put(NAME, chunks(data), size=size, sha256=sha256_hex(data)) for data in blobs),
        return_exceptions=True,
    )
    winners = [i for i, result in enumerate(results) if not isinstance(result, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(results[i], ObjectConflict) for i in range(4) if i not in winners)
    assert await storage.digest(NAME) == sha256_hex(blobs[winners[0]])
    assert await leftovers(storage) == []


@SIZES
async def test_cancelled_put_leaves_nothing(storage: Storage, size: int) -> None:
    data = blob(size)
    started = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        async for chunk in chunks(data, 1 << 20):
            yield chunk
            started.set()
            await asyncio.sleep(0.05)

    task = asyncio.create_task(storage.put(NAME, slow(), size=size, sha256=sha256_hex(data)))
    await started.wait()
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # cleanup of a cancelled put may finish just after it
        if not await leftovers(storage):
            break
        await asyncio.sleep(0.05)
    assert await leftovers(storage) == []
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)


async def test_a_failing_source_leaves_nothing(storage: Storage) -> None:
    data = blob(LARGE)

    async def broken() -> AsyncIterator[bytes]:
        async for chunk in chunks(data[: PART_BYTES + 10], 1 << 20):
            yield chunk
        raise OSError("the source disk failed")

    with pytest.raises(OSError, match="the source disk failed"):
        await storage.put(NAME, broken(), size=LARGE, sha256=sha256_hex(data))
    assert await leftovers(storage) == []
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)


async def test_remove_leftovers_keeps_objects(storage: Storage) -> None:
    data = blob(1000)
    await storage.put(NAME, chunks(data), size=len(data), sha256=sha256_hex(data))
    assert await storage.remove_leftovers(0) == []
    assert await storage.digest(NAME) == sha256_hex(data)


async def test_describe(storage: Storage) -> None:
    assert storage.describe()


def test_local_directory_must_exist(tmp_path: Path) -> None:
    from gateway.storage.errors import StorageUnavailable
    from gateway.storage.local import LocalStorageConfig

    missing = tmp_path / "not-mounted"
    with pytest.raises(StorageUnavailable, match="never created"):
        asyncio.run(LocalStorage.open("backup", LocalStorageConfig(path=str(missing))))
    assert not os.path.exists(missing)
