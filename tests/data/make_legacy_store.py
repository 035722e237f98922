"""Make ``legacy-store-af8b42d.tar.gz``: stores written by the release at commit af8b42d.

The new code must open a store left by that release and serve every capture
in it (``tests/store/test_store_legacy.py``). This script records those stores
*with the old code*, through the API it had (``Store.open``, ``record``,
``add_warc``, ``close``), and was run once, from a checkout of that commit::

    git archive af8b42d | tar -x -C /tmp/gateway-af8b42d
    PYTHONPATH=/tmp/gateway-af8b42d python tests/data/make_legacy_store.py \\
        ../shared/data/pywb-sample tests/data/legacy-store-af8b42d.tar.gz

The archive holds two stores and a manifest:

- ``clean/``: 12 recorded captures with fixed, distinct WARC-Dates (full
  records, revisits of them, a POST, a 404) over several WARC files (rollover),
  the sample's ``example.warc.gz`` imported with ``store add`` (origin
  ``imported``) and ``example-wget-1-14.warc.gz`` dropped into ``warcs/`` by
  hand, which that release's start-up recovery adopted (origin ``found``);
  closed cleanly.
- ``crashed/``: 5 recorded captures, then the process ended without closing
  (``os._exit``, as a kill does): the WARC file is still ``.open`` and its
  index rows say so; half a record was appended after the last whole one, as
  a write cut short leaves it.
- ``manifest.json``: per store, every index row as that release wrote it
  (``urlkey timestamp url filename offset length rec_type digest``) and, per
  recorded capture, the URL, its 14-digit timestamp and the SHA-256 of its
  payload.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.store.capture import CaptureInput, HttpRequest, HttpResponse
from gateway.store.settings import StoreSettings
from gateway.store.store import Store

_START = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def _capture(index: int, url: str, body: bytes, **kwargs: Any) -> CaptureInput:
    status = kwargs.pop("status", 200)
    return CaptureInput(
        url=url,
        request=kwargs.pop("request", HttpRequest(headers=(("User-Agent", "legacy-fixture"),))),
        response=HttpResponse(
            status=status,
            reason="OK" if status == 200 else "Not Found",
            headers=(("Content-Type", "text/html"), ("Content-Length", str(len(body)))),
        ),
        payload=body,
        warc_date=_START + timedelta(minutes=index),
        **kwargs,
    )


def _captures(count: int) -> list[CaptureInput]:
    shared = b"<html>" + b"the same page, captured again " * 40 + b"</html>"
    out = []
    for i in range(count):
        if i % 3 == 1:
            body = shared  # every third capture repeats a payload: revisits
        else:
            body = f"<html>page {i} ".encode() + bytes(range(256)) * (i + 1) + b"</html>"
        url = f"http://legacy.example.org/page{i % 4}"
        if i == 5:
            form = (("Content-Type", "application/x-www-form-urlencoded"),)
            out.append(
                _capture(
                    i,
                    "http://legacy.example.org/form",
                    body,
                    request=HttpRequest(method="POST", headers=form, body=b"q=archive&n=5"),
                )
            )
        elif i == 7:
            out.append(_capture(i, "http://legacy.example.org/missing", b"gone", status=404))
        else:
            out.append(_capture(i, url, body))
    return out


def _expected(captures: list[CaptureInput]) -> list[dict[str, str]]:
    rows = []
    for capture in captures:
        assert isinstance(capture.payload, bytes)
        assert capture.warc_date is not None
        rows.append(
            {
                "url": capture.url,
                "method": capture.request.method,
                "timestamp": capture.warc_date.strftime("%Y%m%d%H%M%S"),
                "payload_sha256": hashlib.sha256(capture.payload).hexdigest(),
            }
        )
    return rows


def _index_rows(root: Path) -> list[dict[str, object]]:
    """The index rows, read from a copy (reading the store itself would checkpoint its WAL)."""
    scratch = Path(tempfile.mkdtemp())
    for path in root.glob("index.sqlite3*"):
        shutil.copy(path, scratch / path.name)
    db = sqlite3.connect(scratch / "index.sqlite3")
    try:
        rows = db.execute(
            "SELECT c.urlkey, c.timestamp, c.url, f.name, f.open, c.offset, c.length,"
            " c.rec_type, c.digest, f.origin FROM captures c JOIN files f ON f.id = c.file_id"
            " ORDER BY c.id"
        ).fetchall()
    finally:
        db.close()
        shutil.rmtree(scratch)
    keys = (
        *("urlkey", "timestamp", "url", "filename", "open", "offset", "length"),
        *("rec_type", "digest", "origin"),
    )
    return [dict(zip(keys, row, strict=True)) for row in rows]


async def _make_clean(root: Path, sample: Path) -> list[dict[str, str]]:
    settings = StoreSettings(root=str(root), rollover_bytes=3_000, fsync="always")
    captures = _captures(12)
    async with await Store.open(settings) as store:
        for capture in captures:
            await store.record(capture)
        await store.add_warc(sample / "warcs" / "example.warc.gz")
    shutil.copy(sample / "warcs" / "example-wget-1-14.warc.gz", root / "warcs")
    async with await Store.open(settings) as store:  # recovery adopts it as "found"
        assert "indexed=['example-wget-1-14.warc.gz']" in repr(store.recovery), store.recovery
    return _expected(captures)


async def _record_and_die(root: str) -> None:
    store = await Store.open(StoreSettings(root=root, fsync="always"))
    for capture in _captures(5):
        await store.record(capture)
    os._exit(0)  # no close: the file stays .open, as after a kill


def _make_crashed(root: Path) -> list[dict[str, str]]:
    done = subprocess.run(
        [sys.executable, __file__, "--record-and-die", str(root)], check=False, timeout=120
    )
    assert done.returncode == 0, done
    [open_file] = [p for p in (root / "warcs").iterdir() if p.name.endswith(".open")]
    last = _index_rows(root)[-1]
    offset, length = int(str(last["offset"])), int(str(last["length"]))
    member = open_file.read_bytes()[offset : offset + length]
    with open_file.open("ab") as fh:  # a write cut short: the first half of a gzip member
        fh.write(member[: length // 2])
    return _expected(_captures(5))


def main(sample: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        stores: dict[str, dict[str, Any]] = {
            "clean": {"captures": asyncio.run(_make_clean(base / "clean", sample))},
            "crashed": {"captures": _make_crashed(base / "crashed")},
        }
        for name, store in stores.items():
            store["index"] = _index_rows(base / name)
        manifest = {
            "made_by": "archive gateway at commit af8b42d (tests/data/make_legacy_store.py)",
            **stores,
        }
        assert not list((base / "clean").glob("index.sqlite3-*"))
        assert (base / "crashed" / "index.sqlite3-wal").stat().st_size > 0
        with tarfile.open(out, "w:gz") as tar:
            for name in ("clean", "crashed"):
                tar.add(base / name, arcname=name)
            data = json.dumps(manifest, indent=1, sort_keys=True).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            info.mtime = int(datetime.now(UTC).timestamp())
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    if sys.argv[1] == "--record-and-die":
        asyncio.run(_record_and_die(sys.argv[2]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
