"""Helpers for tests that put index data into the real ``redis_server`` fixture.

Every helper talks to Redis through redis-py directly (the tests' own client,
never the gateway's pools). Keys are made unique per test with
:func:`unique_prefix` so tests sharing the session's server never collide;
:func:`delete_prefix` removes them afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import redis.asyncio

__all__ = ["command_calls", "delete_prefix", "redis_client", "unique_prefix", "zadd_lines"]


def unique_prefix(label: str) -> str:
    """``test:<label>:<random hex>``: a key prefix no other test uses."""
    return f"test:{label}:{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def redis_client(server_url: str, db: int = 0) -> AsyncIterator[redis.asyncio.Redis]:
    """A redis-py client for ``redis://host:port`` and database ``db``, closed on exit."""
    client = redis.asyncio.Redis.from_url(f"{server_url}/{db}")
    try:
        yield client
    finally:
        await client.aclose()


async def zadd_lines(client: redis.asyncio.Redis, key: str, lines: Iterable[bytes]) -> int:
    """``ZADD key 0 line`` for every line (in batches); returns how many were added."""
    added = 0
    batch: dict[bytes, float] = {}
    for line in lines:
        batch[line] = 0.0
        if len(batch) >= 500:
            added += await _zadd(client, key, batch)
            batch = {}
    if batch:
        added += await _zadd(client, key, batch)
    return added


async def _zadd(client: redis.asyncio.Redis, key: str, batch: dict[bytes, float]) -> int:
    count = await client.zadd(key, batch)
    assert isinstance(count, int)
    return count


async def delete_prefix(client: redis.asyncio.Redis, prefix: str) -> None:
    """Delete every key starting with ``prefix``."""
    keys = [key async for key in client.scan_iter(match=prefix + "*", count=1000)]
    if keys:
        await client.delete(*keys)


async def command_calls(client: redis.asyncio.Redis, command: str) -> int:
    """How many times the server has run ``command`` (``INFO commandstats``)."""
    stats = await client.info("commandstats")
    entry = stats.get(f"cmdstat_{command.lower()}")
    return int(entry["calls"]) if isinstance(entry, dict) else 0
