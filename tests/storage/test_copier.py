"""The copier: one file from a source storage to a destination storage, verified,
create-only, with an outcome the replication worker can act on. Destinations are
every storage type; sources a local directory and SeaweedFS."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from gateway.storage import Storage
from gateway.storage.copier import RetryPolicy, copy_file
from gateway.storage.errors import ObjectNotFound
from gateway.storage.integrity import check_for
from gateway.storage.local import LocalStorage, LocalStorageConfig
from tests.storage.conftest import PART_BYTES, blob, chunks, open_s3, read_all, sha256_hex
from tests.storage.seaweedfs import SeaweedFS

NAME: Final = "gateway-20250301120000-00007.warc.gz"
SIZE: Final = PART_BYTES + 777_777  # a multipart upload on S3


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[LocalStorage]:
    root = tmp_path / "primary"
    root.mkdir()
    opened = await LocalStorage.open("primary", LocalStorageConfig(path=str(root)))
    yield opened
    await opened.close()


async def _stored(storage: Storage, data: bytes, name: str = NAME) -> None:
    await storage.put(name, chunks(data), size=len(data), sha256=sha256_hex(data))


async def test_copy_then_already_present(source: LocalStorage, storage: Storage) -> None:
    data = blob(SIZE)
    await _stored(source, data)
    first = await copy_file(source, storage, NAME, size=SIZE, sha256=sha256_hex(data))
    assert first.outcome == "copied"
    assert first.destination_status == "present"
    assert first.source_status is None
    assert (first.source, first.destination, first.attempts) == ("primary", storage.name, 1)
    assert first.verified_by
    assert await storage.digest(NAME) == sha256_hex(data)
    again = await copy_file(source, storage, NAME, size=SIZE, sha256=sha256_hex(data))
    assert again.outcome == "already_present"
    assert again.destination_status == "present"


async def test_read_back(source: LocalStorage, storage: Storage) -> None:
    data = blob(1000)
    await _stored(source, data)
    done = await copy_file(
        source, storage, NAME, size=1000, sha256=sha256_hex(data), read_back=True
    )
    assert done.outcome == "copied"
    assert done.verified_by.endswith("read back")


async def test_another_object_at_the_destination_is_corrupted_not_overwritten(
    source: LocalStorage, storage: Storage
) -> None:
    data, other = blob(SIZE, seed=1), blob(SIZE, seed=2)
    await _stored(source, data)
    await _stored(storage, other)
    done = await copy_file(source, storage, NAME, size=SIZE, sha256=sha256_hex(data))
    assert done.outcome == "corrupted"
    assert done.destination_status == "corrupted"
    assert done.existing is not None
    assert done.existing.size == SIZE
    assert await storage.digest(NAME) == sha256_hex(other)
    replaced = await copy_file(
        source, storage, NAME, size=SIZE, sha256=sha256_hex(data), replace=True
    )
    assert replaced.outcome == "replaced"
    assert replaced.destination_status == "present"
    assert await storage.digest(NAME) == sha256_hex(data)


async def test_source_missing(source: LocalStorage, storage: Storage) -> None:
    done = await copy_file(source, storage, NAME, size=10, sha256=sha256_hex(b"0123456789"))
    assert done.outcome == "source_missing"
    assert done.source_status == "missing"
    assert done.destination_status is None
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)


async def test_source_corrupt_is_not_copied(source: LocalStorage, storage: Storage) -> None:
    data = blob(SIZE)
    await _stored(source, data)
    flipped = bytearray(data)
    flipped[SIZE - 5] ^= 0x40
    (source.root / NAME).chmod(0o644)
    with (source.root / NAME).open("r+b") as fh:
        fh.seek(SIZE - 5)
        fh.write(bytes(flipped[SIZE - 5 : SIZE - 4]))
    done = await copy_file(source, storage, NAME, size=SIZE, sha256=sha256_hex(data))
    assert done.outcome == "source_corrupt"
    assert done.source_status == "corrupted"
    assert sha256_hex(bytes(flipped)) in done.detail
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)
    short = await copy_file(source, storage, NAME, size=SIZE + 1, sha256=sha256_hex(data))
    assert short.outcome == "source_corrupt"
    prefix = bytes(flipped[: SIZE - 1])  # a source longer than its record is corrupt too
    longer = await copy_file(source, storage, NAME, size=SIZE - 1, sha256=sha256_hex(prefix))
    assert longer.outcome == "source_corrupt"
    assert "more than the declared" in longer.detail
    with pytest.raises(ObjectNotFound):
        await storage.stat(NAME)


async def test_every_gzip_member_must_inflate(source: LocalStorage, storage: Storage) -> None:
    """A file whose SHA-256 is the declared one (damaged before it was recorded) is still
    refused when one of its gzip members does not inflate; nothing is published."""
    members = [gzip.compress(blob(200_000, seed=n)) for n in range(6)]
    whole = b"".join(members)
    await _stored(source, whole)
    good = await copy_file(
        source,
        storage,
        NAME,
        size=len(whole),
        sha256=sha256_hex(whole),
        check=lambda: check_for(source.name, NAME),
    )
    assert good.outcome == "copied"
    damaged = bytearray(whole)
    damaged[len(members[0]) + len(members[1]) // 2] ^= 0x01  # inside the second member
    other = "gateway-20250301120000-00008.warc.gz"
    await _stored(source, bytes(damaged), other)
    done = await copy_file(
        source,
        storage,
        other,
        size=len(damaged),
        sha256=sha256_hex(bytes(damaged)),
        check=lambda: check_for(source.name, other),
    )
    assert done.outcome == "source_corrupt"
    assert done.source_status == "corrupted"
    assert f"the gzip member at byte {len(members[0])} does not inflate" in done.detail
    with pytest.raises(ObjectNotFound):
        await storage.stat(other)


async def test_concurrent_copiers_of_one_file(source: LocalStorage, storage: Storage) -> None:
    data = blob(SIZE)
    await _stored(source, data)
    results = await asyncio.gather(
        *(copy_file(source, storage, NAME, size=SIZE, sha256=sha256_hex(data)) for _ in range(4))
    )
    assert {r.outcome for r in results} <= {"copied", "already_present"}
    assert any(r.outcome == "copied" for r in results)
    assert await read_all(storage, NAME) == data


async def test_from_s3_to_a_local_directory(
    s3_env: SeaweedFS, s3_bucket: str, tmp_path: Path
) -> None:
    data = blob(SIZE, seed=5)
    s3 = await open_s3(s3_env, s3_bucket)
    root = tmp_path / "backup"
    root.mkdir()
    local = await LocalStorage.open("backup", LocalStorageConfig(path=str(root)))
    try:
        await _stored(s3, data)
        done = await copy_file(s3, local, NAME, size=SIZE, sha256=sha256_hex(data))
        assert done.outcome == "copied"
        assert (root / NAME).read_bytes() == data
        missing = await copy_file(s3, local, "other.warc.gz", size=1, sha256=sha256_hex(b"x"))
        assert missing.outcome == "source_missing"
    finally:
        await s3.close()


def test_backoff_is_bounded_full_jitter() -> None:
    policy = RetryPolicy(attempts=5, base_delay_s=0.5, max_delay_s=4.0)
    delays = [policy.delay_s(n) for n in range(10) for _ in range(50)]
    assert all(0.0 <= d <= 4.0 for d in delays)
    assert max(policy.delay_s(0) for _ in range(200)) <= 0.5
    assert len({round(d, 6) for d in delays}) > 100, "jittered, not fixed"
