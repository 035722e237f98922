"""Fixtures for the storage tests: one open storage of every type.

``storage`` is parametrized over :data:`STORAGE_PARAMS`, which must name every
type of :data:`gateway.storage.STORAGE_TYPES` (a test checks it): a
:class:`~gateway.storage.local.LocalStorage` in a fresh directory, and an
:class:`~gateway.storage.s3.S3Storage` on the session's SeaweedFS with a
fresh key prefix in the bucket ``contract``, the smallest part size S3
allows (5 MiB) and single PUTs up to 8 MiB, so that spooled single PUTs and
multipart uploads are cheap to reach.

Helpers: :func:`blob` makes deterministic bytes, :func:`sha256_hex` hashes
them, :func:`chunks` feeds them to ``put`` as an async iterator and
:func:`read_all` reads an object back.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from gateway.storage import Storage
from gateway.storage.local import LocalStorage, LocalStorageConfig
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_config import MIN_PART_BYTES, S3StorageConfig
from tests.storage.seaweedfs import SeaweedFS, run_in_thread

STORAGE_PARAMS: Final = ("local", "s3")
BUCKET: Final = "contract"
PART_BYTES: Final = MIN_PART_BYTES
#: Objects past this go up as multipart uploads in the suite (5 GiB by default).
SINGLE_PUT_MAX_BYTES: Final = PART_BYTES + 3 * (1 << 20)


def blob(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def chunks(data: bytes, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
    """``data`` in pieces of ``chunk_bytes``, as a source storage would yield it."""
    for start in range(0, len(data), chunk_bytes):
        yield data[start : start + chunk_bytes]


async def read_all(
    storage: Storage, name: str, offset: int = 0, length: int | None = None
) -> bytes:
    parts = [chunk async for chunk in storage.get_range(name, offset, length)]
    return b"".join(parts)


@pytest.fixture(scope="session")
def s3_bucket(seaweedfs: SeaweedFS) -> str:
    """The bucket the contract suite writes to (each test under its own prefix)."""
    run_in_thread(seaweedfs.create_bucket(BUCKET))
    return BUCKET


async def open_s3(seaweedfs: SeaweedFS, bucket: str, prefix: str | None = None) -> S3Storage:
    """An S3 storage on ``seaweedfs`` (credentials must be in the environment: ``s3_env``)."""
    config = S3StorageConfig(
        bucket=bucket,
        endpoint=seaweedfs.endpoint,
        prefix=prefix or f"t-{uuid.uuid4().hex}/",
        part_size_bytes=PART_BYTES,
        single_put_max_bytes=SINGLE_PUT_MAX_BYTES,
    )
    return await S3Storage.open("s3", config)


@pytest.fixture(params=STORAGE_PARAMS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    """An open, empty storage of each type, closed after the test."""
    opened: Storage
    if request.param == "local":
        root = tmp_path / "backup"
        root.mkdir()
        opened = await LocalStorage.open("backup", LocalStorageConfig(path=str(root)))
    else:
        s3: SeaweedFS = request.getfixturevalue("s3_env")
        opened = await open_s3(s3, request.getfixturevalue("s3_bucket"))
    try:
        yield opened
    finally:
        await opened.close()
