"""Connections shared by every source and loader of one app.

One ``aiohttp.ClientSession`` per app (per-host connection limit, descriptive
User-Agent), one Redis connection pool per server URL, and one open S3
storage (its aiobotocore client) per bucket and prefix read by S3 resolvers
(:meth:`SharedClients.s3_storage`). Created in the
app's ``cleanup_ctx`` by :meth:`SharedClients.start`, closed by
:meth:`SharedClients.close`; sources reach them through this object at lookup
time, so sources can be built before the event loop runs (and without
importing aiohttp or redis-py: ``gateway check-config`` builds them too).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp
    import redis.asyncio

    from gateway.storage.base import Storage
    from gateway.storage.s3_config import S3StorageConfig
    from gateway.store import Store
    from gateway.store.integrity.status import CachedSafety

__all__ = ["ClientSettings", "SharedClients"]

_DEFAULT_AGENT = "archive-gateway/0.1 (+https://github.com/; web archive aggregator)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """The ``client:`` section of collections.yaml.

    ``user_agent`` is sent on every upstream request; ``contact`` (an e-mail or
    URL) is appended to it as ``contact: ...`` so archives know whom to ask.
    ``limit_per_host`` caps the connections open to one upstream host (and so
    the lookups in flight to it: at 50 ms per answer, 64 connections carry at
    most 1,280 lookups/s); ``total_limit`` caps them all.
    """

    user_agent: str = _DEFAULT_AGENT
    contact: str = ""
    limit_per_host: int = 64
    total_limit: int = 256

    def header_value(self) -> str:
        """The User-Agent header value."""
        if self.contact:
            return f"{self.user_agent} (contact: {self.contact})"
        return self.user_agent


class SharedClients:
    """The app's upstream clients; ``session`` exists between start() and close()."""

    def __init__(self, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings()
        self._session: aiohttp.ClientSession | None = None
        self._redis: dict[str, redis.asyncio.Redis] = {}
        self._s3: dict[S3StorageConfig, Storage] = {}
        self._s3_lock: asyncio.Lock | None = None
        #: The snapshot store, opened by the app when a collection uses it, and
        #: its safety report (``/_status``, ``/metrics``, the page).
        self.store: Store | None = None
        self.store_safety: CachedSafety | None = None

    async def start(self) -> None:
        """Create the ClientSession (call from a running event loop)."""
        if self._session is None:
            import aiohttp  # here, not at the top: check-config never starts clients

            connector = aiohttp.TCPConnector(
                limit=self.settings.total_limit,
                limit_per_host=self.settings.limit_per_host,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self.settings.header_value()},
                auto_decompress=False,
            )

    @property
    def session(self) -> aiohttp.ClientSession:
        """The shared session; raises RuntimeError before start()."""
        if self._session is None:
            raise RuntimeError("SharedClients.start() was not awaited before use")
        return self._session

    def redis(self, server_url: str) -> redis.asyncio.Redis:
        """The connection pool for ``redis://host:port/db`` (created on first use)."""
        client = self._redis.get(server_url)
        if client is None:
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(server_url)
            self._redis[server_url] = client
        return client

    async def s3_storage(self, config: S3StorageConfig) -> Storage:
        """The S3 storage of ``config``, opened on first use and kept until :meth:`close`.

        Raises :class:`~gateway.storage.errors.StorageError` when it cannot be
        opened (no credentials in the environment, no bucket, the endpoint
        down); the next call tries again.
        """
        opened = self._s3.get(config)
        if opened is not None:
            return opened
        if self._s3_lock is None:
            self._s3_lock = asyncio.Lock()
        async with self._s3_lock:
            opened = self._s3.get(config)
            if opened is None:
                from gateway.storage.s3 import S3Storage

                opened = self._s3[config] = await S3Storage.open("resource", config)
        return opened

    async def close(self) -> None:
        """Close the session, every Redis pool and every S3 storage."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        pools: list[Any] = list(self._redis.values())
        self._redis.clear()
        for client in pools:
            await client.aclose()
        storages, self._s3 = list(self._s3.values()), {}
        for storage in storages:
            await storage.close()
