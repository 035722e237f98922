"""A storage in S3-compatible object storage (AWS S3, SeaweedFS, MinIO, ...).

``store.storages.<name>: {type: s3, endpoint: "http://127.0.0.1:8333", bucket:
warcs, prefix: "gateway/", region: us-east-1}``. An object ``name`` is the key
``prefix + name``. Credentials come from the environment only, through
botocore's chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE`` and the shared credentials file, container or instance
roles), never from the config. The client is aiobotocore (see the README,
*Storages*, for the measurement that chose it); it is imported when a
storage is opened.

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
  :meth:`S3Storage.remove_leftovers` aborts and deletes those.

Range reads are ``GetObject`` with ``Range: bytes=a-b``, streamed in chunks of
at most 1 MiB. Library errors become :mod:`gateway.storage.errors`: refused
connections, timeouts, 5xx, throttling and checksum mismatches in transit are
:class:`~gateway.storage.errors.StorageUnavailable` (retryable); missing
credentials, access denied and a missing bucket are
:class:`~gateway.storage.errors.StorageRefused`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import re
import secrets
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, ClassVar, Final, Self

from gateway.storage.base import (
    Backend,
    Intake,
    ObjectInfo,
    PutOutcome,
    PutResult,
    RangeReader,
    check_name,
    check_range,
    hash_chunk,
    settle_taken,
    sha256_of,
)
from gateway.storage.errors import (
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from gateway.storage.settings import SettingError

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef, HeadObjectOutputTypeDef

__all__ = ["STAGING_DIR", "S3Storage", "S3StorageConfig"]

logger = logging.getLogger(__name__)

MIB: Final = 1 << 20
#: Staging keys (multipart uploads in progress) live under ``{prefix}.partial/``.
STAGING_DIR: Final = ".partial/"
CHUNK_BYTES: Final = MIB
#: Chunks at least this long are spooled and hashed in a worker thread.
THREAD_BYTES: Final = 256 * 1024
#: S3's bounds on a part (every part but the last): 5 MiB to 5 GiB.
MIN_PART_BYTES: Final = 5 * MIB
MAX_PART_BYTES: Final = 5 * 1024 * MIB
CLEANUP_TIMEOUT_S: Final = 30.0
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_ENDPOINT = re.compile(r"https?://[^/?#\s]+/?")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: Error codes that mean "try again later" whatever their HTTP status.
_TRANSIENT_CODES: Final = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "BadDigest"}
)
#: botocore's loader of service models, shared by the sessions of every S3 storage:
#: each storage has a session of its own (credentials are read when it opens).
_data_loader: Any = None
_REFUSED_CODES: Final = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class S3StorageConfig:
    """``{type: s3, bucket, endpoint, prefix, region, ...}``.

    - ``bucket``: an existing bucket (3-63 lowercase letters, digits, '.', '-').
    - ``endpoint``: ``http(s)://host:port`` of an S3-compatible server
      (path-style requests); absent for AWS itself.
    - ``prefix``: prepended to every object name; empty or ending with '/'.
    - ``region``: the signing region (default ``us-east-1``).
    - ``single_put_max_bytes``: objects up to this size go up in one
      ``PutObject`` (default and most 5 GiB, S3's limit), held in memory up to
      ``part_size_bytes`` and in a temporary file (``$TMPDIR``) beyond;
      larger ones as multipart uploads.
    - ``part_size_bytes``: the parts of a multipart upload (5 MiB to 5 GiB;
      default 16 MiB). Memory per multipart put: about ``part_size_bytes *
      (parts_in_flight + 1)``.
    - ``parts_in_flight``: parts uploaded at once by one put (default 4).
    - ``connect_timeout_s``, ``read_timeout_s``: per request (10 and 60 s).
    """

    bucket: str
    endpoint: str | None = None
    prefix: str = ""
    region: str = "us-east-1"
    part_size_bytes: int = 16 * MIB
    single_put_max_bytes: int = MAX_PART_BYTES
    parts_in_flight: int = 4
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not _BUCKET.fullmatch(self.bucket):
            raise SettingError(
                "bucket",
                f"{self.bucket!r} is not a bucket name; expected 3-63 lowercase letters, "
                "digits, '.' or '-', starting and ending with a letter or digit",
            )
        if self.endpoint is not None and not _ENDPOINT.fullmatch(self.endpoint):
            raise SettingError(
                "endpoint",
                f"{self.endpoint!r} is not an endpoint; expected http(s)://host[:port], "
                "such as http://127.0.0.1:8333 (or no endpoint, for AWS)",
            )
        if self.prefix and (
            not self.prefix.endswith("/")
            or any(not part or part.startswith(".") for part in self.prefix[:-1].split("/"))
        ):
            raise SettingError(
                "prefix",
                f"{self.prefix!r}: expected empty or segments ending with '/', none empty "
                "or starting with '.', such as 'gateway/'",
            )
        if not self.region:
            raise SettingError("region", "empty; expected a region such as us-east-1")
        if not MIN_PART_BYTES <= self.part_size_bytes <= MAX_PART_BYTES:
            raise SettingError(
                "part_size_bytes",
                f"{self.part_size_bytes}: expected {MIN_PART_BYTES} (5 MiB) to "
                f"{MAX_PART_BYTES} (5 GiB), S3's bounds on a part",
            )
        if not self.part_size_bytes <= self.single_put_max_bytes <= MAX_PART_BYTES:
            raise SettingError(
                "single_put_max_bytes",
                f"{self.single_put_max_bytes}: expected part_size_bytes "
                f"({self.part_size_bytes}) to {MAX_PART_BYTES} (5 GiB, S3's largest PutObject)",
            )
        if not 1 <= self.parts_in_flight <= 64:
            raise SettingError("parts_in_flight", f"{self.parts_in_flight}: expected 1 to 64")
        for field in ("connect_timeout_s", "read_timeout_s"):
            if not getattr(self, field) > 0:
                raise SettingError(field, f"{getattr(self, field)}: expected a positive duration")


async def _spool(spool: IO[bytes], digest: Any, chunk: bytes) -> None:
    """Hash ``chunk`` and append it to ``spool``, in a worker thread when it is large."""

    def write() -> None:
        digest.update(chunk)
        spool.write(chunk)

    if len(chunk) >= THREAD_BYTES:
        await asyncio.to_thread(write)
    else:
        write()


def _sign_with_declared_sha256(request: Any, **_: Any) -> None:
    """botocore ``before-sign`` hook: the SigV4 payload hash is the body's SHA-256 in hex,
    which every upload here already declares in ``x-amz-checksum-sha256`` (base64).

    botocore would otherwise hash the whole body again, in the event loop, on every
    request over plain HTTP (its ``S3SigV4Auth.payload``); given the header it
    signs with it (``canonical_request``), and the server still checks it.
    """
    declared = request.headers.get("x-amz-checksum-sha256")
    if declared and "X-Amz-Content-SHA256" not in request.headers:
        request.headers["X-Amz-Content-SHA256"] = base64.b64decode(declared).hex()


def _info(name: str, head: HeadObjectOutputTypeDef) -> ObjectInfo:
    """An object as a ``HeadObject`` answer (with ``ChecksumMode``) describes it."""
    return ObjectInfo(
        name=name,
        size=head["ContentLength"],
        mtime=head["LastModified"].timestamp(),
        sha256=_full_sha256(head.get("ChecksumSHA256")),
    )


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def _full_sha256(checksum: str | None) -> str | None:
    """The hex SHA-256 of a full-object ``ChecksumSHA256`` (None for a composite ``...-N``)."""
    if not checksum or "-" in checksum:
        return None
    try:
        raw = base64.b64decode(checksum, validate=True)
    except binascii.Error:
        return None
    return raw.hex() if len(raw) == 32 else None


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
            raise self._storage._error(self._name, exc, f"read after {self._read} bytes") from exc
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


class S3Storage(Backend):
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
        from contextlib import AsyncExitStack

        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

        session = get_session()
        global _data_loader
        if _data_loader is None:
            _data_loader = session.get_component("data_loader")
        else:  # botocore's service models, parsed once per process (~0.3 s each time)
            session.register_component("data_loader", _data_loader)
        if await session.get_credentials() is None:
            raise StorageRefused(
                name,
                "",
                "no S3 credentials in the environment: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, for a profile in ~/.aws/credentials); "
                "the config never holds credentials",
            )
        aio_config = AioConfig(
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},  # the copier retries too
            s3={"addressing_style": "path"} if config.endpoint else {},
            max_pool_connections=max(10, 2 * config.parts_in_flight),
            # Checksums are set explicitly where they matter (SHA-256 of every upload).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            session.create_client(
                "s3", endpoint_url=config.endpoint, region_name=config.region, config=aio_config
            )
        )
        client.meta.events.register("before-sign.s3", _sign_with_declared_sha256)
        storage = cls(name, config, client, stack)
        try:
            try:
                await client.head_bucket(Bucket=config.bucket)
            except Exception as exc:
                error = storage._error("", exc, f"open bucket {config.bucket!r}")
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

    # -- errors and keys ----------------------------------------------------------------
    def _key(self, name: str) -> str:
        return self.config.prefix + check_name(self.name, name)

    def _error(self, name: str, exc: BaseException, doing: str) -> StorageError:
        """Translate a botocore/aiohttp exception raised while ``doing`` something."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            ParamValidationError,
        )

        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            problem = f"{doing}: HTTP {status} {code}: {error.get('Message', '')}".rstrip(": ")
            if code in _REFUSED_CODES or status == 403:
                return StorageRefused(self.name, name, problem)
            if code in ("NoSuchKey", "NotFound") or status == 404:
                return ObjectNotFound(self.name, name, "no such object")
            if code == "InvalidRange" or status == 416:
                return RangeNotSatisfiable(self.name, name, problem)
            if code in _TRANSIENT_CODES or status >= 500 or status in (408, 429):
                return StorageUnavailable(self.name, name, problem)
            return StorageRefused(self.name, name, problem)
        if isinstance(exc, NoCredentialsError):
            return StorageRefused(self.name, name, f"{doing}: {exc}")
        if isinstance(exc, ParamValidationError):
            raise exc  # a bug here, not a storage failure
        if isinstance(exc, BotoCoreError | OSError | TimeoutError):
            return StorageUnavailable(self.name, name, f"{doing}: {type(exc).__name__}: {exc}")
        import aiohttp

        if isinstance(exc, aiohttp.ClientError):
            return StorageUnavailable(self.name, name, f"{doing}: {type(exc).__name__}: {exc}")
        raise exc

    @staticmethod
    def _status(exc: BaseException) -> int:
        response = getattr(exc, "response", None)
        if not isinstance(response, dict):
            return 0
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))

    # -- reading ----------------------------------------------------------------------
    async def _lookup(self, name: str) -> ObjectInfo | None:
        key = self._key(name)
        try:
            head = await self.client.head_object(
                Bucket=self.config.bucket, Key=key, ChecksumMode="ENABLED"
            )
        except Exception as exc:
            error = self._error(name, exc, "head")
            if isinstance(error, ObjectNotFound):
                return None
            raise error from exc
        return _info(name, head)

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
            error = self._error(name, exc, f"read {extra.get('Range', 'whole object')}")
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
            raise self._error(prefix, exc, "list") from exc

    # -- writing ----------------------------------------------------------------------
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
            return await settle_taken(self, await self._lookup(name), name, size, sha256)
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
                    ChecksumSHA256=_b64(sha256),
                    **condition,  # type: ignore[arg-type]
                )
            except Exception as exc:
                if self._status(exc) == 412:
                    return None
                raise self._error(name, exc, "put") from exc
        if _full_sha256(answer.get("ChecksumSHA256")) == sha256:
            info = ObjectInfo(name=name, size=size, mtime=time.time(), sha256=sha256)
            return info, "the server's SHA-256 of the bytes received (x-amz-checksum-sha256)"
        return await self._read_back(name, sha256)

    async def _read_back(self, name: str, sha256: str) -> tuple[ObjectInfo, str]:
        """Verify by reading the object back (a server that ignores checksums)."""
        found = await sha256_of(self, name)
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
            raise self._error(name, exc, "start a multipart upload") from exc
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
                raise self._error(name, exc, "complete the multipart upload") from exc
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
                if self._status(exc) == 412:
                    return None
                raise self._error(name, exc, "copy the staging object to its name") from exc
            try:
                head = await self.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            except Exception as exc:
                raise self._error(name, exc, "head the copied object") from exc
            info = _info(name, head)
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
                raise self._error(name, exc, f"upload part {number}") from exc
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
            raise self._error("", exc, "remove leftovers") from exc
        return removed
