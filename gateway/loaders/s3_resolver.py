"""Where a WARC filename lives: an S3 bucket and key prefix (range reads through aiobotocore).

The key of a CDX ``filename`` is ``prefix + filename``; a record is read
with one ``GetObject`` carrying ``Range: bytes=offset-end`` and streamed as
it arrives (:meth:`S3Storage.open_range <gateway.storage.s3.S3Storage.open_range>`),
as pywb reads WARC files from ``s3://`` paths. This is how a fleet of
gateways serves a store's replicas without a shared disk (issue 13 §5):
``resource:`` names the bucket and prefix the store replicates to.

Configuration (``resource:`` entries)::

    resource: s3://warcs/gateway/                              # AWS S3: bucket, prefix
    resource: s3+http://127.0.0.1:8333/warcs/gateway/          # an S3-compatible endpoint
    resource: {type: s3, bucket: warcs, prefix: gateway/, endpoint: "http://127.0.0.1:8333",
               region: us-east-1}

Credentials come from the environment (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``), never from the config. The
client is opened on the first read and shared by every resolver of the app
reading the same bucket and prefix (:meth:`SharedClients.s3_storage
<gateway.clients.SharedClients.s3_storage>`), closed with the app. A
filename is checked as for a directory prefix (no ``..``, no absolute path,
no scheme: :func:`~gateway.loaders.resolvers.check_filename`). Failures are
load errors: an object that is not there :class:`~gateway.errors.ArchiveFileNotFound`,
the endpoint down, no credentials or no bucket :class:`~gateway.errors.ArchiveUnavailable`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Self

from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound
from gateway.loaders.warc_sources import Location, RangeLocationWithSize
from gateway.storage.base import RangeReader
from gateway.storage.errors import ObjectNotFound, StorageError
from gateway.storage.ranges import open_storage_range, storage_load_error
from gateway.storage.s3_config import S3StorageConfig

if TYPE_CHECKING:
    from gateway.loaders.resolvers import ResolverConfig

__all__ = ["S3Resolver", "S3ResolverConfig"]

_AWS: Final = "s3://"
_ENDPOINT_FORM = re.compile(r"s3\+(?P<scheme>https?)://(?P<host>[^/]+)/(?P<rest>.*)")
_FORMS: Final = (
    "expected s3://BUCKET/PREFIX/ (AWS) or s3+http(s)://HOST:PORT/BUCKET/PREFIX/ "
    "(an S3-compatible endpoint)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class S3ResolverConfig:
    """``{type: s3, bucket, prefix, endpoint, region}``: as an ``s3`` storage's settings
    (:class:`~gateway.storage.s3_config.S3StorageConfig` checks them), read-only.

    Raises :class:`ValueError` naming the field.
    """

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str = "us-east-1"
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        self.storage_config()  # raises SettingError (a ValueError) naming the field

    def storage_config(self) -> S3StorageConfig:
        """The storage these settings open."""
        return S3StorageConfig(
            bucket=self.bucket,
            prefix=self.prefix,
            endpoint=self.endpoint,
            region=self.region,
            connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s,
        )

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``s3://BUCKET/PREFIX/`` or ``s3+http(s)://HOST:PORT/BUCKET/PREFIX/``.

        >>> S3ResolverConfig.from_shorthand("s3+http://127.0.0.1:8333/warcs/gateway/")
        S3ResolverConfig(bucket='warcs', prefix='gateway/', endpoint='http://127.0.0.1:8333', ...)
        >>> S3ResolverConfig.from_shorthand("s3://warcs").prefix
        ''
        """
        endpoint: str | None = None
        if text.startswith(_AWS):
            rest = text[len(_AWS) :]
        else:
            match = _ENDPOINT_FORM.fullmatch(text)
            if match is None:
                raise ValueError(f"{text!r} is not an S3 location; {_FORMS}")
            endpoint, rest = f"{match['scheme']}://{match['host']}", match["rest"]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ValueError(f"{text!r} names no bucket; {_FORMS}")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return cls(bucket=bucket, prefix=prefix, endpoint=endpoint)


class S3Resolver:
    """``prefix + filename`` in one bucket, read with range requests (see the module docstring)."""

    config_type: ClassVar[type[ResolverConfig]] = S3ResolverConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (_AWS, "s3+http://", "s3+https://")

    def __init__(self, config: S3ResolverConfig, *, clients: SharedClients) -> None:
        self.config = config
        self._storage_config = config.storage_config()
        self._clients = clients

    @classmethod
    def from_config(cls, config: ResolverConfig, *, clients: SharedClients) -> S3Resolver:
        if not isinstance(config, S3ResolverConfig):
            raise TypeError(f"expected S3ResolverConfig, got {type(config).__name__}")
        return cls(config, clients=clients)

    async def locate(self, filename: str) -> list[Location]:
        """One location: the object ``prefix + filename``; raises UnsafeFilename."""
        from gateway.loaders.resolvers import check_filename

        check_filename(filename)
        return [_S3Object(self, filename)]

    async def open_range(self, name: str, offset: int, length: int | None) -> RangeReader:
        """The bytes ``[offset, offset + length)`` of object ``name``; load errors."""
        where = f"s3://{self.config.bucket}/{self.config.prefix}{name}"
        try:
            storage = await self._clients.s3_storage(self._storage_config)
        except StorageError as exc:
            raise storage_load_error(exc, where) from exc
        return await open_storage_range(storage, name, offset, length, where=where)

    def object(self, name: str) -> RangeLocationWithSize:
        """The object ``prefix + name`` as a range location that knows its size
        (a WACZ read in place: :mod:`gateway.sources.wacz`)."""
        return _S3Object(self, name)

    async def size(self, name: str) -> int:
        """The size in bytes of object ``name``; load errors."""
        where = f"s3://{self.config.bucket}/{self.config.prefix}{name}"
        try:
            storage = await self._clients.s3_storage(self._storage_config)
            return (await storage.stat(name)).size
        except ObjectNotFound as exc:
            raise ArchiveFileNotFound(f"{where}: {exc.problem}", {where: exc.problem}) from exc
        except StorageError as exc:
            raise storage_load_error(exc, where) from exc

    def describe(self) -> str:
        config = self.config
        at = config.endpoint or "AWS"
        return f"S3 bucket {config.bucket!r}, prefix {config.prefix!r} at {at} (range reads)"

    def __repr__(self) -> str:
        return f"S3Resolver({self.config.bucket!r}, {self.config.prefix!r})"


class _S3Object:
    """One object of an :class:`S3Resolver`, as a
    :class:`~gateway.loaders.warc_sources.RangeLocation`."""

    __slots__ = ("_resolver", "name")

    def __init__(self, resolver: S3Resolver, name: str) -> None:
        self._resolver = resolver
        self.name = name

    def __str__(self) -> str:
        config = self._resolver.config
        return f"s3://{config.bucket}/{config.prefix}{self.name}"

    async def open_range(self, offset: int, length: int | None) -> RangeReader:
        return await self._resolver.open_range(self.name, offset, length)

    async def size(self) -> int:
        return await self._resolver.size(self.name)
