"""The aiobotocore client of an ``s3`` storage, and its answers and errors in storage terms.

:func:`open_client` makes the client of one storage. Credentials come from
the environment only, through botocore's chain (``AWS_ACCESS_KEY_ID``/
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the shared credentials file,
container or instance roles), never from the config. The client is
aiobotocore (see docs/benchmarks.md, *Storages and replication*, for the
measurement that chose it); it is imported when a storage is opened.

Library errors become :mod:`gateway.storage.errors`
(:func:`storage_error`): refused connections, timeouts, 5xx, throttling and
checksum mismatches in transit are
:class:`~gateway.storage.errors.StorageUnavailable` (retryable); missing
credentials, access denied and a missing bucket are
:class:`~gateway.storage.errors.StorageRefused`. Checksums are SHA-256
digests: hex here, base64 in S3's ``x-amz-checksum-sha256`` and
``ChecksumSHA256`` (AWS S3 user guide, *Checking object integrity*).
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any, Final

from gateway.storage.base import ObjectInfo
from gateway.storage.errors import (
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import HeadObjectOutputTypeDef

    from gateway.storage.s3_config import S3StorageConfig

__all__ = ["b64", "full_sha256", "http_status", "object_info", "open_client", "storage_error"]

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


async def open_client(name: str, config: S3StorageConfig) -> tuple[S3Client, AsyncExitStack]:
    """The client of storage ``name`` and the stack that closes it.

    Raises :class:`StorageRefused` without credentials in the environment.
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
    return client, stack


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


def object_info(name: str, head: HeadObjectOutputTypeDef) -> ObjectInfo:
    """An object as a ``HeadObject`` answer (with ``ChecksumMode``) describes it."""
    return ObjectInfo(
        name=name,
        size=head["ContentLength"],
        mtime=head["LastModified"].timestamp(),
        sha256=full_sha256(head.get("ChecksumSHA256")),
    )


def b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def full_sha256(checksum: str | None) -> str | None:
    """The hex SHA-256 of a full-object ``ChecksumSHA256`` (None for a composite ``...-N``)."""
    if not checksum or "-" in checksum:
        return None
    try:
        raw = base64.b64decode(checksum, validate=True)
    except binascii.Error:
        return None
    return raw.hex() if len(raw) == 32 else None


def storage_error(storage: str, name: str, exc: BaseException, doing: str) -> StorageError:
    """Translate a botocore/aiohttp exception raised while ``doing`` something to
    ``name`` in ``storage``."""
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
            return StorageRefused(storage, name, problem)
        if code in ("NoSuchKey", "NotFound") or status == 404:
            return ObjectNotFound(storage, name, "no such object")
        if code == "InvalidRange" or status == 416:
            return RangeNotSatisfiable(storage, name, problem)
        if code in _TRANSIENT_CODES or status >= 500 or status in (408, 429):
            return StorageUnavailable(storage, name, problem)
        return StorageRefused(storage, name, problem)
    if isinstance(exc, NoCredentialsError):
        return StorageRefused(storage, name, f"{doing}: {exc}")
    if isinstance(exc, ParamValidationError):
        raise exc  # a bug here, not a storage failure
    if isinstance(exc, BotoCoreError | OSError | TimeoutError):
        return StorageUnavailable(storage, name, f"{doing}: {type(exc).__name__}: {exc}")
    import aiohttp

    if isinstance(exc, aiohttp.ClientError):
        return StorageUnavailable(storage, name, f"{doing}: {type(exc).__name__}: {exc}")
    raise exc


def http_status(exc: BaseException) -> int:
    """The HTTP status in an exception's botocore ``response``; 0 without one."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return 0
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
