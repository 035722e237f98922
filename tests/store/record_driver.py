"""Crash-test driver: record captures (and import files) into a store until killed.

Run as ``python -m tests.store.record_driver ROOT FIRST_INDEX [COUNT]
[--imports DIR]`` from the repository root. With ``--imports`` a fifth task
imports the files of ``DIR`` one after the other (``Store.add_warc``, as
``store add`` does beside the writer) and prints ``{"imported": name}`` once
each import returns. With ``COUNT`` it records that many captures one after
the other and then ends without closing the store (``os._exit``), which is
what a kill leaves: the WARC file still ``.open``, its row ``open``
(:func:`record_then_die` runs it). Without, it runs until killed: it opens
the store (running recovery), prints ``{"ready": ...}`` and then, from
four concurrent tasks, records capture ``i`` for ``i = FIRST_INDEX,
FIRST_INDEX + 1, ...``: URL :func:`url_for`, payload
:func:`body_for` (deterministic, so the test can verify what it reads back;
every third payload is shared, so revisits are written). After each ack it
prints one JSON line and flushes: a complete line on stdout is an
acknowledged capture. Small WARC files (``rollover_bytes`` 250 kB) make the
kills also land in closes and rollovers.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
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


def import_url(name: str) -> str:
    """The URL of the one capture in the import file ``name`` (see :func:`write_import`)."""
    return f"http://imports.example.org/{name}"


def import_body(name: str) -> bytes:
    return random.Random(name).randbytes(120_000)


def write_import(path: Path) -> None:
    """A WARC file holding one response record of :func:`import_body` (for ``--imports``)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    body = import_body(path.name)
    with path.open("wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        headers = [("Content-Type", "application/octet-stream")]
        http = StatusAndHeaders("200 OK", headers, protocol="HTTP/1.1")
        record = writer.create_warc_record(
            import_url(path.name),
            "response",
            payload=io.BytesIO(body),
            length=len(body),
            http_headers=http,
        )
        writer.write_record(record)


async def run(root: str, first: int, imports: Path | None = None) -> None:
    store = await Store.open(settings_for(root))
    print(json.dumps({"ready": True, "recovery": repr(store.recovery)}), flush=True)
    counter = itertools.count(first)

    async def importer(directory: Path) -> None:
        for path in await asyncio.to_thread(lambda: sorted(directory.iterdir())):
            result = await store.add_warc(path)
            sys.stdout.write(json.dumps({"imported": path.name, "as": result.name}) + "\n")
            sys.stdout.flush()

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

    tasks = [worker() for _ in range(WORKERS)]
    if imports is not None:
        tasks.append(importer(imports))
    try:
        await asyncio.gather(*tasks)
    finally:
        await store.close()


async def run_then_die(root: str, first: int, count: int) -> None:
    store = await Store.open(settings_for(root))
    for index in range(first, first + count):
        ack = await store.record(make_capture(url_for(index), body_for(index)))
        sys.stdout.write(json.dumps({"i": index, "filename": ack.capture.filename}) + "\n")
    sys.stdout.flush()
    os._exit(0)


def record_then_die(root: Path, count: int, first: int = 0) -> list[str]:
    """Record captures ``first .. first+count-1`` in a process that then dies; their filenames."""
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "tests.store.record_driver", str(root), str(first), str(count)],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line)["filename"] for line in done.stdout.decode().splitlines()]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="record_driver")
    parser.add_argument("root")
    parser.add_argument("first", type=int)
    parser.add_argument("count", type=int, nargs="?")
    parser.add_argument("--imports", type=Path)
    args = parser.parse_args(argv)
    if args.count is not None:
        asyncio.run(run_then_die(args.root, args.first, args.count))
    else:
        asyncio.run(run(args.root, args.first, args.imports))


if __name__ == "__main__":
    main(sys.argv[1:])
