"""Shards of a ZipNum cluster away from the local disk: HTTP(S) and S3 range reads, block cache.

A location (a path of the ``.loc`` file, :mod:`gateway.sources.zipnum`) may be

- ``http://`` or ``https://`` URL: read with ``GET`` and ``Range: bytes=a-b``
  through the app's ``ClientSession``; anything but ``206 Partial Content``
  with exactly the bytes asked for is a failure;
- ``s3://BUCKET/KEY``: one ``GetObject`` with ``Range`` through aiobotocore
  (:class:`~gateway.storage.s3.S3Storage`, opened once per bucket and
  endpoint by :meth:`SharedClients.s3_storage
  <gateway.clients.SharedClients.s3_storage>`); the endpoint is
  ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` when set (AWS otherwise),
  credentials come from the environment (botocore's chain);
- ``s3+http(s)://HOST:PORT/BUCKET/KEY``: the same, at that endpoint
  (the ``resource:`` shorthand of :mod:`gateway.loaders.s3_resolver`);
- ``storage:NAME/KEY``: the object ``KEY`` of the store's storage ``NAME``
  (``store.storages``: its endpoint, bucket, prefix and region; credentials
  from the environment as for the store), what ``gateway zipnum build
  --storage NAME`` writes (:mod:`gateway.loaders.storage_object`).

Adjacent blocks of one shard are read with one request. Each block read
is kept, as far as it was inflated, in a :class:`BlockCache`, an LRU
bounded by the bytes its blocks hold (``cache_bytes`` of the source); its hits and
misses and the range requests by shard are counted in :class:`ShardStats`
for ``/metrics``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from gateway.clients import SharedClients
from gateway.errors import SourceUnavailable
from gateway.storage.s3_config import S3StorageConfig

if TYPE_CHECKING:
    import aiohttp

    from gateway.sources.zipnum_blocks import Block

__all__ = ["BlockCache", "ShardStats", "is_remote", "parse_s3_location", "read_range"]

_S3_FORMS: Final = ("s3://", "s3+http://", "s3+https://")
_HTTP_FORMS: Final = ("http://", "https://")
#: An object of a storage of the store (:mod:`gateway.loaders.storage_object`).
_STORAGE_FORM: Final = "storage:"


def is_remote(location: str) -> bool:
    """True for an ``http(s)://``, ``s3://``, ``s3+http(s)://`` or ``storage:`` location."""
    return location.startswith((*_HTTP_FORMS, *_S3_FORMS, _STORAGE_FORM))


def parse_s3_location(location: str) -> tuple[S3StorageConfig, str] | None:
    """The storage settings and object key of an S3 location; None for another kind.

    >>> config, key = parse_s3_location("s3+http://127.0.0.1:8333/idx/c/gen-1/c-00000.cdx.gz")
    >>> (config.bucket, config.endpoint, key)
    ('idx', 'http://127.0.0.1:8333', 'c/gen-1/c-00000.cdx.gz')

    Raises :class:`ValueError` for a location with no bucket or key.
    """
    endpoint: str | None
    if location.startswith("s3://"):
        rest = location[len("s3://") :]
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    elif location.startswith(("s3+http://", "s3+https://")):
        scheme, _, after = location[len("s3+") :].partition("://")
        host, _, rest = after.partition("/")
        endpoint = f"{scheme}://{host}"
    else:
        return None
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise ValueError(f"{location!r}: expected s3://BUCKET/KEY or s3+http(s)://HOST/BUCKET/KEY")
    return S3StorageConfig(bucket=bucket, endpoint=endpoint or None), key


@dataclass(slots=True)
class ShardStats:
    """Counters of one source's remote reads (plain ints, read at scrape time)."""

    cache_hits: int = 0
    cache_misses: int = 0
    #: Range requests and bytes received, by part name.
    requests: dict[str, int] = field(default_factory=dict)
    bytes_read: dict[str, int] = field(default_factory=dict)

    def count_request(self, part: str, size: int) -> None:
        """One read of ``size`` bytes of ``part``, counted under its number within
        its generation (``gen-...-00003`` as ``00003``), so that the counters do not
        grow with every compaction."""
        shard = part.rsplit("-", 1)[-1] if part.startswith("gen-") else part
        self.requests[shard] = self.requests.get(shard, 0) + 1
        self.bytes_read[shard] = self.bytes_read.get(shard, 0) + size


class BlockCache:
    """An LRU of ZipNum blocks, ``(location, offset) ->``
    :class:`~gateway.sources.zipnum_blocks.Block`, bounded by ``max_bytes`` of
    what the blocks hold (:attr:`Block.size <gateway.sources.zipnum_blocks.Block.size>`:
    their text so far, and the rest of a block being inflated). A block
    larger than the bound is not kept; a block that grows past it as it is
    inflated pushes the oldest out, itself last. ``location`` is a remote
    shard's location, or a local shard file's identity (device, inode,
    mtime, size), so a file replaced by rename is read anew."""

    __slots__ = ("_blocks", "held_bytes", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._blocks: OrderedDict[tuple[Hashable, int], Block] = OrderedDict()

    def get(self, location: Hashable, offset: int) -> Block | None:
        block = self._blocks.get((location, offset))
        if block is None:
            return None
        self._blocks.move_to_end((location, offset))
        return block

    def put(self, location: Hashable, offset: int, block: Block) -> None:
        if block.size > self.max_bytes or (location, offset) in self._blocks:
            return
        self._blocks[(location, offset)] = block
        block.cache = self
        self.held_bytes += block.size
        self._evict()

    def grew(self, block: Block, added: int) -> None:
        """``block`` (held here) now holds ``added`` bytes more (or fewer)."""
        self.held_bytes += added
        self._evict()

    def _evict(self) -> None:
        while self.held_bytes > self.max_bytes and self._blocks:
            _, dropped = self._blocks.popitem(last=False)
            dropped.cache = None
            self.held_bytes -= dropped.size

    def clear(self) -> None:
        for block in self._blocks.values():
            block.cache = None
        self._blocks.clear()
        self.held_bytes = 0


async def read_range(
    clients: SharedClients, source: str, location: str, offset: int, length: int
) -> bytes:
    """``length`` bytes at ``offset`` of the shard at ``location`` (one request).

    Raises :class:`SourceUnavailable` naming the location when the request
    fails, answers with another status or fewer bytes, or the S3 storage
    cannot be opened (no credentials, no bucket).
    """
    from gateway.storage.errors import StorageError

    if location.startswith(_STORAGE_FORM):
        return await _storage_range(clients, source, location, offset, length)
    try:
        s3 = parse_s3_location(location)
    except ValueError as exc:
        raise SourceUnavailable(source, f"ZipNum shard {exc}") from exc
    if s3 is not None:
        config, key = s3
        try:
            storage = await clients.s3_storage(config)
            chunks = [chunk async for chunk in storage.get_range(key, offset, length)]
        except StorageError as exc:
            raise SourceUnavailable(source, f"ZipNum shard {location}: {exc}") from exc
        return b"".join(chunks)
    return await _http_range(clients, source, location, offset, length)


async def _storage_range(
    clients: SharedClients, source: str, location: str, offset: int, length: int
) -> bytes:
    """``length`` bytes at ``offset`` of ``storage:NAME/KEY``, read through the
    store's storage ``NAME`` (its endpoint, bucket, prefix and region)."""
    from gateway.errors import LoadError
    from gateway.loaders.storage_object import StorageObject
    from gateway.storage.errors import StorageError

    pieces = []
    try:
        reader = await StorageObject(location, clients).open_range(offset, length)
        try:
            while piece := await reader.read(1 << 20):
                pieces.append(piece)
        finally:
            reader.close()
    except (ValueError, LoadError) as exc:
        raise SourceUnavailable(source, f"ZipNum shard {exc}") from exc
    except StorageError as exc:
        raise SourceUnavailable(source, f"ZipNum shard {location}: {exc}") from exc
    data = b"".join(pieces)
    if len(data) != length:
        raise SourceUnavailable(
            source, f"ZipNum shard {location}: {len(data)} bytes at {offset}, expected {length}"
        )
    return data


async def _http_range(
    clients: SharedClients, source: str, url: str, offset: int, length: int
) -> bytes:
    import aiohttp

    headers = {"Range": f"bytes={offset}-{offset + length - 1}", "Accept-Encoding": "identity"}
    try:
        async with clients.session.get(url, headers=headers) as response:
            if response.status != 206:
                raise SourceUnavailable(
                    source,
                    f"ZipNum shard {url}: HTTP {response.status} to a range request; "
                    "expected 206 Partial Content",
                )
            data = await _read_at_most(response.content, length + 1)
    except (aiohttp.ClientError, OSError) as exc:
        raise SourceUnavailable(source, f"ZipNum shard {url}: {exc}") from exc
    if len(data) != length:
        raise SourceUnavailable(
            source, f"ZipNum shard {url}: {len(data)} bytes for a range of {length}"
        )
    return data


async def _read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body, up to ``limit`` bytes (a longer one is cut there and refused by the caller)."""
    chunks: list[bytes] = []
    held = 0
    while held < limit:
        chunk = await stream.read(limit - held)
        if not chunk:
            break
        chunks.append(chunk)
        held += len(chunk)
    return b"".join(chunks)
