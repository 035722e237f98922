"""A storage in S3-compatible object storage (AWS S3, SeaweedFS, MinIO, ...).

:class:`S3Storage` is the ``s3`` type of :data:`gateway.storage.STORAGE_TYPES`.
Its settings are :mod:`gateway.storage.s3_config`, its client and the
translation of the client's errors :mod:`gateway.storage.s3_client`, its
writes :mod:`gateway.storage.s3_upload`.

Range reads are ``GetObject`` with ``Range: bytes=a-b``, streamed in chunks of
at most 1 MiB.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from gateway.storage.base import (
    ObjectInfo,
    RangeReader,
    check_range,
)
from gateway.storage.errors import (
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from gateway.storage.s3_client import object_info, open_client, storage_error
from gateway.storage.s3_config import MIB, S3StorageConfig
from gateway.storage.s3_upload import S3Uploads

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from types_aiobotocore_s3 import S3Client

__all__ = ["S3Storage"]

CHUNK_BYTES: Final = MIB


class _S3Range:
    """:class:`~gateway.storage.base.RangeReader` over a ``GetObject`` answer's body."""

    __slots__ = ("_body", "_left", "_name", "_read", "_storage", "location", "read_blocking")

    def __init__(self, storage: S3Storage, name: str, body: Any, expected: int) -> None:
        self._storage = storage
        self._name = name
        self._body = body
        self._left = expected
        self._read = 0
        config = storage.config
        self.location = f"s3://{config.bucket}/{config.prefix}{name}"
        self.read_blocking: Callable[[int], bytes] | None = None

    async def read(self, size: int) -> bytes:
        body = self._body
        if body is None or self._left <= 0:
            return b""
        try:
            chunk: bytes = await body.read(min(size, self._left))
        except Exception as exc:
            self.close()
            raise storage_error(
                self._storage.name, self._name, exc, f"read after {self._read} bytes"
            ) from exc
        if not chunk:
            self.close()
            raise StorageUnavailable(
                self._storage.name,
                self._name,
                f"the answer ended after {self._read} bytes, {self._left} short",
            )
        self._left -= len(chunk)
        self._read += len(chunk)
        return chunk

    def close(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            body.close()  # a connection with unread bytes is dropped, not reused


class S3Storage(S3Uploads):
    """Objects under a key prefix of one bucket (see the module docstring)."""

    config_type: ClassVar[type[S3StorageConfig]] = S3StorageConfig
    #: Objects per ``ListObjectsV2`` page of :meth:`iter` (S3's maximum is 1000).
    page_size: int = 1000

    def __init__(
        self, name: str, config: S3StorageConfig, client: S3Client, stack: AsyncExitStack
    ) -> None:
        self.name = name
        self.config = config
        self.client = client
        self._stack = stack

    @classmethod
    async def open(cls, name: str, config: S3StorageConfig) -> Self:
        """Connect and check that the bucket answers.

        Raises :class:`StorageRefused` without credentials in the environment,
        for a missing bucket or denied access, :class:`StorageUnavailable`
        when the endpoint does not answer.
        """
        client, stack = await open_client(name, config)
        storage = cls(name, config, client, stack)
        try:
            try:
                await client.head_bucket(Bucket=config.bucket)
            except Exception as exc:
                error = storage_error(name, "", exc, f"open bucket {config.bucket!r}")
                if isinstance(error, ObjectNotFound):
                    where = config.endpoint or "AWS"
                    error = StorageRefused(
                        name, "", f"no bucket {config.bucket!r} at {where}; create it first"
                    )
                raise error from exc
        except BaseException:
            await stack.aclose()
            raise
        return storage

    @classmethod
    def describe_config(cls, config: S3StorageConfig) -> str:
        where = config.endpoint or "AWS"
        return f"S3 bucket {config.bucket!r}, prefix {config.prefix!r} at {where} ({config.region})"

    def describe(self) -> str:
        return self.describe_config(self.config)

    async def close(self) -> None:
        await self._stack.aclose()

    # -- reading ----------------------------------------------------------------------
    async def _lookup(self, name: str) -> ObjectInfo | None:
        key = self._key(name)
        try:
            head = await self.client.head_object(
                Bucket=self.config.bucket, Key=key, ChecksumMode="ENABLED"
            )
        except Exception as exc:
            error = storage_error(self.name, name, exc, "head")
            if isinstance(error, ObjectNotFound):
                return None
            raise error from exc
        return object_info(name, head)

    async def get_range(
        self, name: str, offset: int = 0, length: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        reader = await self.open_range(name, offset, length)
        try:
            while chunk := await reader.read(CHUNK_BYTES):
                yield chunk
        finally:
            reader.close()

    async def open_range(self, name: str, offset: int, length: int | None = None) -> RangeReader:
        """See :meth:`Storage.open_range`: one ``GetObject`` with ``Range``, its body
        read as it arrives (no thread), closed with the connection it holds."""
        check_range(offset, length)
        if length == 0:
            info = await self.stat(name)
            if offset > info.size:
                raise RangeNotSatisfiable(
                    self.name, name, f"holds {info.size} bytes; asked for offset {offset}"
                )
            return _S3Range(self, name, None, 0)
        extra: dict[str, Any] = {}
        if length is not None:
            extra["Range"] = f"bytes={offset}-{offset + length - 1}"
        elif offset:
            extra["Range"] = f"bytes={offset}-"
        try:
            answer = await self.client.get_object(
                Bucket=self.config.bucket, Key=self._key(name), **extra
            )
        except Exception as exc:
            error = storage_error(
                self.name, name, exc, f"read {extra.get('Range', 'whole object')}"
            )
            at_end = isinstance(error, RangeNotSatisfiable) and length is None
            if at_end and (await self.stat(name)).size == offset:
                return _S3Range(self, name, None, 0)
            raise error from exc
        body, expected = answer["Body"], answer["ContentLength"]
        if length is not None and expected < length:
            body.close()
            raise RangeNotSatisfiable(
                self.name,
                name,
                f"holds {answer.get('ContentRange', '?')}; asked for [{offset}, {offset + length})",
            )
        return _S3Range(self, name, body, expected)

    async def iter(self, prefix: str = "") -> AsyncGenerator[ObjectInfo, None]:
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.config.bucket,
            Prefix=self.config.prefix + prefix,
            PaginationConfig={"PageSize": self.page_size},
        )
        skip = len(self.config.prefix)
        try:
            async for page in pages:
                for item in page.get("Contents", ()):
                    name = item["Key"][skip:]
                    if any(not part or part.startswith(".") for part in name.split("/")):
                        continue  # staging keys and names this storage never writes
                    yield ObjectInfo(
                        name=name, size=item["Size"], mtime=item["LastModified"].timestamp()
                    )
        except StorageError:
            raise
        except Exception as exc:
            raise storage_error(self.name, prefix, exc, "list") from exc
