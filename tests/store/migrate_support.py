"""Helpers for the layout-migration tests: stores in an older layout, and what to check after.

Not a test module. :func:`layout_chain` sets the chain of layouts and steps
the code reads (``gateway.store.layout.LAYOUTS`` and
``gateway.store.migration.layout_steps.STEPS``, the two places a developer adds a
version), so a test can write a store as a release with fewer layouts would
(:func:`flat_store`: layout 1, the flat ``warcs/`` of the release at
af8b42d) or add a version the code does not have yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import random
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import gateway.store.layout as layout_module
import gateway.store.migration.layout_steps as migrations_module
from gateway.store.layout import Directory, Layout
from gateway.store.migration.layout_steps import Step
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture

__all__ = [
    "expected_payloads",
    "flat_store",
    "layout_chain",
    "payload_of",
    "placed_files",
    "url_of",
    "written_store",
]

#: Every ``BIG_EVERY``-th file of a :func:`flat_store` holds a payload of
#: several copy chunks (1 MiB each), so a kill can land in the middle of a copy.
BIG_EVERY: Final = 100


@contextmanager
def layout_chain(layouts: Sequence[Directory], steps: Sequence[Step]) -> Iterator[None]:
    """Run the block with these layouts and steps, as a release declaring them would."""
    saved = layout_module.LAYOUTS, migrations_module.STEPS
    layout_module.LAYOUTS = tuple(layouts)  # type: ignore[misc]
    migrations_module.STEPS = tuple(steps)  # type: ignore[misc]
    try:
        yield
    finally:
        layout_module.LAYOUTS, migrations_module.STEPS = saved  # type: ignore[misc]


def url_of(index: int) -> str:
    return f"http://migrate.example.org/page/{index}"


def payload_of(index: int) -> bytes:
    """The payload of capture ``index``: distinct for every index (no two files alike)."""
    rng = random.Random(index)
    size = 2_500_000 if index % BIG_EVERY == BIG_EVERY - 1 else rng.randrange(200, 2_000)
    return f"capture {index}\n".encode() + rng.randbytes(size)


def expected_payloads(count: int) -> dict[str, str]:
    """URL -> SHA-256 of its one payload, for the ``count`` captures of a :func:`flat_store`."""
    return {url_of(i): hashlib.sha256(payload_of(i)).hexdigest() for i in range(count)}


def flat_store(root: Path, count: int) -> None:
    """A store in layout 1 (flat ``warcs/``) with ``count`` files of one capture each.

    Written by the store itself with the chain of the release before layout
    2 (layout 1 only), one file per capture (``rollover_bytes=1``), without
    fsync (it is a fixture). Its rows are what that release leaves:
    ``fs_version`` 1, closed, SHA-256 and date recorded.
    """

    async def record() -> None:
        settings = StoreSettings(root=str(root), rollover_bytes=1, fsync="never", dedup="keep")
        async with await Store.open(settings) as store:
            for index in range(count):
                await store.record(make_capture(url_of(index), payload_of(index)))

    with layout_chain(layout_module.LAYOUTS[:1], ()):
        asyncio.run(record())


def written_store(
    root: Path, count: int, *, payload: Callable[[int], bytes] = payload_of, days: int = 7
) -> None:
    """A layout-1 store of ``count`` files of one capture each, made quickly.

    Capture ``i`` is :func:`url_of` ``(i)`` with ``payload(i)`` (distinct
    payloads: no two files alike, or they would be merged).

    Each file is what the store's writer makes (its warcinfo record naming
    it and this gateway's software, then the capture's response and
    request), named ``gateway-<date>-<serial>.warc.gz`` with dates spread
    over ``days`` days, written straight into the flat ``warcs/`` and
    indexed where it is by :func:`~gateway.store.migration.reconcile.adopt_file`: the
    state a store of the release before layout 2 is in, without the
    writer's fsyncs (:func:`flat_store` for the writer itself).
    """
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from gateway.store.db import IndexDB
    from gateway.store.migration.reconcile import adopt_file
    from gateway.store.warcfile import SOFTWARE

    layout = Layout(root)
    layout.create()
    db = IndexDB(layout.db_path, synchronous="OFF")
    try:
        for index in range(count):
            day = 1 + index * days // count
            date = f"202405{day:02d}{index % 24:02d}0000"
            path = layout.warcs / f"gateway-{date}-{index + 1:05d}.warc.gz"
            with path.open("wb") as out:
                writer = WARCWriter(out, gzip=True, warc_version="1.1")
                info = writer.create_warcinfo_record(path.name, {"software": SOFTWARE})
                writer.write_record(info)
                http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], "HTTP/1.1")
                body = payload(index)
                response = writer.create_warc_record(
                    url_of(index),
                    "response",
                    payload=io.BytesIO(body),
                    length=len(body),
                    http_headers=http,
                )
                writer.write_record(response)
            assert adopt_file(layout, db, path, owned=True, fs_version=1, date=date) is not None
    finally:
        db.close()


def placed_files(root: Path) -> tuple[dict[str, int], list[str]]:
    """Every row's name -> ``fs_version``, and what on disk is not at its row's place.

    The second list is empty when each file is exactly once under ``warcs/``,
    at the place its row gives, with no ``.moving`` copy left anywhere.
    """
    layout = Layout(root)
    db = sqlite3.connect(layout.db_path)
    try:
        rows = db.execute("SELECT name, fs_version, date FROM files").fetchall()
    finally:
        db.close()
    versions = {str(name): int(version) for name, version, _ in rows}
    places = {layout.path_of(name, fs_version=version, date=date) for name, version, date in rows}
    stray = []
    seen = set()
    for path in layout.walk():
        if path in places and path not in seen:
            seen.add(path)
        else:
            stray.append(str(path.relative_to(root)))
    stray.extend(str(p.relative_to(root)) + " (missing)" for p in places - seen)
    return versions, sorted(stray)
