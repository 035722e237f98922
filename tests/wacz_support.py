"""WACZ files for tests, built at test time by py-wacz (``wacz create``) from real WARCs.

:func:`build_wacz` runs py-wacz's own command (the ``wacz`` PyPI package) in a
subprocess, as a user builds one; :func:`flip_byte` copies a WACZ with one
byte of one entry's data changed (an entry of the ZIP, found by its local
header), the damage a bad disk or a bad transfer does. :func:`export_wacz`
builds the other kind the suites read: the gateway's own export
(:class:`~gateway.index.export.WaczExport`) of every capture of a collection.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

__all__ = ["build_wacz", "entry_data_offset", "export_wacz", "flip_byte", "upload"]


def build_wacz(warcs: Sequence[Path], out: Path) -> Path:
    """``wacz create --detect-pages -o OUT WARC...`` (py-wacz: ZipNum index, a page
    per HTML capture in ``pages/pages.jsonl``, datapackage, datapackage digest)."""
    command = [sys.executable, "-m", "wacz", "create", "--detect-pages", "-o", str(out)]
    command += [str(warc) for warc in warcs]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"wacz create failed: {done.stderr}"
    assert out.is_file(), f"wacz create wrote no {out}: {done.stdout}"
    return out


async def export_wacz(indexes: Path, warcs: Path, out: Path) -> Path:
    """The gateway's own export (:class:`~gateway.index.export.WaczExport`) of every
    capture of a collection whose index is the directory of CDXJ files ``indexes``
    and whose resource is the directory ``warcs``, written to ``out``; every
    capture must load."""
    from gateway.cdx.query import CaptureQuery
    from gateway.clients import SharedClients
    from gateway.config import parse_config
    from gateway.index.export import WaczExport
    from gateway.server.collection_builder import build_collections

    yaml = f"collections:\n  sample:\n    index: {indexes}/\n    resource: {warcs}/\n"
    clients = SharedClients()
    await clients.start()
    collection = build_collections(parse_config(yaml), clients)["sample"]
    try:
        everything = CaptureQuery(url="-", key="", end_key="~")
        export = await WaczExport.start(collection, everything)
        try:
            with out.open("wb") as file:

                async def send(data: bytes) -> None:
                    file.write(data)

                report = await export.write(send)
        finally:
            await export.aclose()
    finally:
        await collection.aclose()
        await clients.close()
    assert not report.skipped, report.skipped
    assert not report.unresolved, report.unresolved
    return out


def entry_data_offset(wacz: Path, name: str) -> tuple[int, int]:
    """(offset of entry ``name``'s data in the file, its stored size)."""
    with zipfile.ZipFile(wacz) as zf:
        info = zf.getinfo(name)
    with wacz.open("rb") as fh:
        fh.seek(info.header_offset)
        header = fh.read(30)
    name_length, extra_length = struct.unpack("<2H", header[26:30])
    return info.header_offset + 30 + name_length + extra_length, info.compress_size


def flip_byte(wacz: Path, entry: str, out: Path) -> Path:
    """A copy of ``wacz`` with the middle byte of ``entry``'s data inverted."""
    shutil.copyfile(wacz, out)
    offset, size = entry_data_offset(out, entry)
    with out.open("r+b") as fh:
        fh.seek(offset + size // 2)
        byte = fh.read(1)
        fh.seek(offset + size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return out


async def upload(endpoint: str, bucket: str, prefix: str, files: Sequence[Path]) -> None:
    """Put ``files`` into ``bucket`` under ``prefix`` (the gateway's S3 storage client)."""
    import hashlib

    from gateway.storage.s3 import S3Storage
    from gateway.storage.s3_config import S3StorageConfig

    config = S3StorageConfig(bucket=bucket, endpoint=endpoint, prefix=prefix)
    storage = await S3Storage.open("upload", config)
    try:
        for path in files:
            data = path.read_bytes()
            await storage.put(
                path.name, _one(data), size=len(data), sha256=hashlib.sha256(data).hexdigest()
            )
    finally:
        await storage.close()


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data
