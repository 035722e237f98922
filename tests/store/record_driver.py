"""Crash-test driver: record captures into a store until killed.

Run as ``python -m tests.store.record_driver ROOT FIRST_INDEX`` from the
repository root. Opens the store (running recovery), prints ``{"ready": ...}``
and then, from four concurrent tasks, records capture ``i`` for ``i =
FIRST_INDEX, FIRST_INDEX + 1, ...``: URL :func:`url_for`, payload
:func:`body_for` (deterministic, so the test can verify what it reads back;
every third payload is shared, so revisits are written). After each ack it
prints one JSON line and flushes: a complete line on stdout is an
acknowledged capture. Small WARC files (``rollover_bytes`` 250 kB) make the
kills also land in closes and rollovers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sys
from typing import Final

from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture

SHARED: Final = b"<html>shared content, revisited often</html>" * 200
WORKERS: Final = 4


def url_for(index: int) -> str:
    return f"http://example.com/page{index % 7}"


def body_for(index: int) -> bytes:
    """The payload of capture ``index``: shared every third time, else 1-60 kB of noise."""
    if index % 3 == 0:
        return SHARED
    rng = random.Random(index)
    return rng.randbytes(rng.choice((1_000, 8_000, 30_000, 60_000)))


def settings_for(root: str) -> StoreSettings:
    return StoreSettings(root=root, rollover_bytes=250_000, fsync="always", dedup="revisit")


async def run(root: str, first: int) -> None:
    store = await Store.open(settings_for(root))
    print(json.dumps({"ready": True, "recovery": repr(store.recovery)}), flush=True)
    counter = itertools.count(first)

    async def worker() -> None:
        while True:
            index = next(counter)
            ack = await store.record(make_capture(url_for(index), body_for(index)))
            line = {
                "i": index,
                "outcome": ack.outcome,
                "record_id": ack.record_id,
                "timestamp": ack.capture.timestamp,
                "filename": ack.capture.filename,
                "offset": ack.capture.offset,
                "length": ack.capture.length,
            }
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    try:
        await asyncio.gather(*(worker() for _ in range(WORKERS)))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], int(sys.argv[2])))
