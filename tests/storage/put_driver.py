"""Driver for the crash test: one put into a storage, in a process of its own.

    python -m tests.storage.put_driver local DIR NAME SIZE SEED
    python -m tests.storage.put_driver s3 ENDPOINT/BUCKET/PREFIX NAME SIZE SEED

Prints ``ready`` once the storage is open, then puts SIZE deterministic bytes
(:func:`tests.storage.conftest.blob` with SEED) under NAME in 256 KiB chunks,
pausing 5 ms after each so that a kill lands in the middle, and prints the
outcome. S3 credentials come from the environment; parts of 5 MiB past 8 MiB, as
in the contract suite.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from gateway.storage import Storage
from gateway.storage.local import LocalStorage, LocalStorageConfig
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_config import S3StorageConfig
from tests.storage.conftest import PART_BYTES, SINGLE_PUT_MAX_BYTES, blob, sha256_hex


async def _slow(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 256 * 1024):
        yield data[start : start + 256 * 1024]
        await asyncio.sleep(0.005)


async def main(kind: str, where: str, name: str, size: int, seed: int) -> None:
    storage: Storage
    if kind == "local":
        storage = await LocalStorage.open("backup", LocalStorageConfig(path=where))
    else:
        endpoint, bucket, prefix = where.rsplit("/", 2)
        config = S3StorageConfig(
            bucket=bucket,
            endpoint=endpoint,
            prefix=prefix + "/",
            part_size_bytes=PART_BYTES,
            single_put_max_bytes=SINGLE_PUT_MAX_BYTES,
        )
        storage = await S3Storage.open("s3", config)
    data = blob(size, seed)
    print("ready", flush=True)
    result = await storage.put(name, _slow(data), size=size, sha256=sha256_hex(data))
    print(result.outcome, flush=True)
    await storage.close()


if __name__ == "__main__":
    kind, where, name, size, seed = sys.argv[1:]
    asyncio.run(main(kind, where, name, int(size), int(seed)))
