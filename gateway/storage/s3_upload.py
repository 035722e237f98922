"""The writes of an ``s3`` storage: create-only puts the server verifies, and their leftovers.

**Writes are create-only and verified by the server** (AWS S3 user guide,
*Checking object integrity* and *Conditional writes*):

- Up to ``single_put_max_bytes`` (5 GiB), one ``PutObject`` with
  ``If-None-Match: *`` and ``x-amz-checksum-sha256`` set to the **declared**
  SHA-256: the server refuses bytes with another digest (``BadDigest``) and
  refuses to replace an existing key (``412 Precondition Failed``), in the
  same request. The bytes are spooled (memory up to ``part_size_bytes``,
  then a temporary file) and checked against the declared size and SHA-256
  before anything is sent, and the declared SHA-256 is also the SigV4
  payload hash, so botocore does not hash the body again in the event loop.
- Past ``single_put_max_bytes``, a multipart upload under a **staging key**,
  ``{prefix}.partial/{name}.{32 hex}`` (hidden names are never object names),
  each part carrying its own ``x-amz-checksum-sha256``, at most
  ``parts_in_flight`` parts in flight; the whole stream's SHA-256 is checked
  before completing; the completed object's composite checksum (SHA-256 of
  the parts' SHA-256s, ``-N``) must be the one computed here; then a
  server-side ``CopyObject`` with ``If-None-Match: *`` gives it its final
  name and the staging object is deleted. SeaweedFS 4.48 evaluates
  ``If-None-Match`` on ``PutObject`` and ``CopyObject`` under its per-object
  write lock, but on ``CompleteMultipartUpload`` before taking it: several
  concurrent completions of one key all succeed there (measured: 2-4 of 8),
  so completing under the final name would not be create-only. Copying from
  a staging key is.
- A killed process can leave an incomplete multipart upload or a staging
  object under ``{prefix}.partial/``, never anything under a final name;
  :meth:`S3Uploads.remove_leftovers` aborts and deletes those.

Sizes are in bytes; digests are hex SHA-256 (base64 on the wire,
:mod:`gateway.storage.s3_client`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import secrets
import tempfile
import time
from collections.abc import AsyncIterable
from typing import IO, TYPE_CHECKING, Any, Final, cast

from gateway.storage.base import (
    Backend,
    Intake,
    ObjectInfo,
    PutOutcome,
    PutResult,
    Storage,
    check_name,
    hash_chunk,
    settle_taken,
    sha256_of,
)
from gateway.storage.errors import StorageUnavailable
from gateway.storage.s3_client import b64, full_sha256, http_status, object_info, storage_error

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef

    from gateway.storage.s3_config import S3StorageConfig

__all__ = ["STAGING_DIR", "S3Uploads"]

logger = logging.getLogger(__name__)

#: Staging keys (multipart uploads in progress) live under ``{prefix}.partial/``.
STAGING_DIR: Final = ".partial/"
#: Chunks at least this long are spooled and hashed in a worker thread.
THREAD_BYTES: Final = 256 * 1024
CLEANUP_TIMEOUT_S: Final = 30.0


async def _spool(spool: IO[bytes], digest: Any, chunk: bytes) -> None:
    """Hash ``chunk`` and append it to ``spool``, in a worker thread when it is large."""

    def write() -> None:
        digest.update(chunk)
        spool.write(chunk)

    if len(chunk) >= THREAD_BYTES:
        await asyncio.to_thread(write)
    else:
        write()


class S3Uploads(Backend):
    """The writing half of :class:`~gateway.storage.s3.S3Storage`: objects put under
    ``config``'s bucket and key prefix with ``client`` (see the module docstring)."""

    config: S3StorageConfig
    client: S3Client

    def _key(self, name: str) -> str:
        return self.config.prefix + check_name(self.name, name)

    async def _create(
        self, name: str, data: AsyncIterable[bytes], size: int, sha256: str, replacing: bool
    ) -> PutResult:
        key = self._key(name)
        condition: dict[str, str] = {} if replacing else {"IfNoneMatch": "*"}
        outcome: PutOutcome = "replaced" if replacing else "created"
        if size <= self.config.single_put_max_bytes:
            verified = await self._put_single(name, key, data, size, sha256, condition)
        else:
            verified = await self._put_multipart(name, key, data, size, sha256, condition)
        if verified is None:  # 412: another put created it first
            return await settle_taken(
                cast(Storage, self), await self._lookup(name), name, size, sha256
            )
        info, verified_by = verified
        return PutResult(outcome=outcome, info=info, verified_by=verified_by)

    async def _put_single(
        self,
        name: str,
        key: str,
        data: AsyncIterable[bytes],
        size: int,
        sha256: str,
        condition: dict[str, str],
    ) -> tuple[ObjectInfo, str] | None:
        # In memory up to a part's size, then in a temporary file: the body must be
        # seekable for botocore, and a WARC file does not belong in memory.
        with tempfile.SpooledTemporaryFile(max_size=self.config.part_size_bytes) as spool:
            intake = Intake(self.name, name, size, sha256)
            async for chunk in data:
                intake.count(chunk)
                await _spool(spool, intake.digest, chunk)
            intake.check()
            spool.seek(0)
            try:
                answer = await self.client.put_object(
                    Bucket=self.config.bucket,
                    Key=key,
                    Body=spool,
                    ContentLength=size,
                    ChecksumSHA256=b64(sha256),
                    **condition,  # type: ignore[arg-type]
                )
            except Exception as exc:
                if http_status(exc) == 412:
                    return None
                raise storage_error(self.name, name, exc, "put") from exc
        if full_sha256(answer.get("ChecksumSHA256")) == sha256:
            info = ObjectInfo(name=name, size=size, mtime=time.time(), sha256=sha256)
            return info, "the server's SHA-256 of the bytes received (x-amz-checksum-sha256)"
        return await self._read_back(name, sha256)

    async def _read_back(self, name: str, sha256: str) -> tuple[ObjectInfo, str]:
        """Verify by reading the object back (a server that ignores checksums)."""
        found = await sha256_of(cast(Storage, self), name)
        info = await self.stat(name)
        if found != sha256:
            raise StorageUnavailable(
                self.name,
                name,
                f"read back as sha256 {found}, not the {sha256} written; it is left as it is",
            )
        return info, "read back after the put"

    async def _put_multipart(
        self,
        name: str,
        key: str,
        data: AsyncIterable[bytes],
        size: int,
        sha256: str,
        condition: dict[str, str],
    ) -> tuple[ObjectInfo, str] | None:
        bucket = self.config.bucket
        staging = f"{self.config.prefix}{STAGING_DIR}{name}.{secrets.token_hex(16)}"
        try:
            upload = await self.client.create_multipart_upload(
                Bucket=bucket, Key=staging, ChecksumAlgorithm="SHA256"
            )
        except Exception as exc:
            raise storage_error(self.name, name, exc, "start a multipart upload") from exc
        upload_id = upload["UploadId"]
        completed = False
        try:
            parts = await self._upload_parts(name, staging, upload_id, data, size, sha256)
            composite = hashlib.sha256(
                b"".join(base64.b64decode(part["ChecksumSHA256"]) for part in parts)
            )
            composite_b64 = f"{base64.b64encode(composite.digest()).decode()}-{len(parts)}"
            try:
                done = await self.client.complete_multipart_upload(
                    Bucket=bucket,
                    Key=staging,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            except Exception as exc:
                raise storage_error(self.name, name, exc, "complete the multipart upload") from exc
            completed = True
            server_checksum = done.get("ChecksumSHA256")
            if server_checksum is not None and server_checksum != composite_b64:
                raise StorageUnavailable(
                    self.name,
                    name,
                    f"the server assembled the parts as {server_checksum}, "
                    f"not {composite_b64}; the upload is discarded",
                )
            try:
                await self.client.copy_object(
                    Bucket=bucket,
                    Key=key,
                    CopySource={"Bucket": bucket, "Key": staging},
                    **condition,  # type: ignore[arg-type]
                )
            except Exception as exc:
                if http_status(exc) == 412:
                    return None
                raise storage_error(
                    self.name, name, exc, "copy the staging object to its name"
                ) from exc
            try:
                head = await self.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            except Exception as exc:
                raise storage_error(self.name, name, exc, "head the copied object") from exc
            info = object_info(name, head)
            if head.get("ChecksumSHA256") == composite_b64 and info.size == size:
                return info, (
                    f"the server's SHA-256 of each of {len(parts)} parts, and the composite "
                    "checksum of the object under its name"
                )
            if info.sha256 == sha256:
                return info, "the server's SHA-256 of the object under its name"
            return await self._read_back(name, sha256)
        finally:
            await self._discard_staging(name, staging, upload_id, completed)

    async def _upload_parts(
        self,
        name: str,
        staging: str,
        upload_id: str,
        data: AsyncIterable[bytes],
        size: int,
        sha256: str,
    ) -> list[CompletedPartTypeDef]:
        """Upload ``data`` as parts (at most ``parts_in_flight`` at once); check its SHA-256."""
        part_size = self.config.part_size_bytes
        intake = Intake(self.name, name, size, sha256)
        done: dict[int, CompletedPartTypeDef] = {}
        pending: set[asyncio.Task[CompletedPartTypeDef]] = set()
        buffer = bytearray()
        number = 0

        async def upload(number: int, body: bytes) -> CompletedPartTypeDef:
            checksum = await asyncio.to_thread(
                lambda: base64.b64encode(hashlib.sha256(body).digest()).decode()
            )
            try:
                answer = await self.client.upload_part(
                    Bucket=self.config.bucket,
                    Key=staging,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                    ChecksumSHA256=checksum,
                )
            except Exception as exc:
                raise storage_error(self.name, name, exc, f"upload part {number}") from exc
            return {"ETag": answer["ETag"], "PartNumber": number, "ChecksumSHA256": checksum}

        async def send(body: bytes) -> None:
            nonlocal number, pending
            await hash_chunk(intake.digest, body)
            while len(pending) >= self.config.parts_in_flight:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    part = task.result()
                    done[part["PartNumber"]] = part
            number += 1
            pending.add(asyncio.create_task(upload(number, body)))

        try:
            async for chunk in data:
                intake.count(chunk)
                buffer += chunk
                while len(buffer) >= part_size:
                    body = bytes(buffer[:part_size])
                    del buffer[:part_size]
                    await send(body)
            if buffer or number == 0:
                await send(bytes(buffer))
            for task in asyncio.as_completed(pending):
                part = await task
                done[part["PartNumber"]] = part
            pending = set()
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        intake.check()
        return [done[n] for n in sorted(done)]

    async def _discard_staging(
        self, name: str, staging: str, upload_id: str, completed: bool
    ) -> None:
        """Abort the upload, or delete the staging object; log (never raise) a failure."""
        bucket = self.config.bucket
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT_S):
                if completed:
                    await self.client.delete_object(Bucket=bucket, Key=staging)
                else:
                    await self.client.abort_multipart_upload(
                        Bucket=bucket, Key=staging, UploadId=upload_id
                    )
        except Exception as exc:  # cleanup is best effort; remove_leftovers finishes it
            logger.warning(
                "storage %s: %s: could not remove staging key %s (%s: %s); remove_leftovers will",
                self.name,
                name,
                staging,
                type(exc).__name__,
                exc,
            )

    async def remove_leftovers(self, older_than_s: float) -> list[str]:
        bucket = self.config.bucket
        staging_prefix = self.config.prefix + STAGING_DIR
        cutoff = time.time() - older_than_s
        removed: list[str] = []
        try:
            uploads = self.client.get_paginator("list_multipart_uploads")
            async for page in uploads.paginate(Bucket=bucket, Prefix=staging_prefix):
                for upload in page.get("Uploads", ()):
                    if upload["Initiated"].timestamp() < cutoff:
                        with contextlib.suppress(self.client.exceptions.NoSuchUpload):
                            await self.client.abort_multipart_upload(
                                Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                            )
                        removed.append(upload["Key"])
            objects = self.client.get_paginator("list_objects_v2")
            async for listing in objects.paginate(Bucket=bucket, Prefix=staging_prefix):
                for item in listing.get("Contents", ()):
                    if item["LastModified"].timestamp() < cutoff:
                        await self.client.delete_object(Bucket=bucket, Key=item["Key"])
                        removed.append(item["Key"])
        except Exception as exc:
            raise storage_error(self.name, "", exc, "remove leftovers") from exc
        return removed
