"""Helpers for the snapshot store tests: captures to record, records read back with warcio.

Not a test module: imported by the ``test_store_*`` modules, ``conftest.py``
and the crash-test driver ``record_driver.py``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from gateway.cdx.cdxj import CdxRecord
from gateway.store.capture import CaptureInput, HttpRequest, HttpResponse
from gateway.store.settings import DedupPolicy

__all__ = [
    "WarcRecord",
    "make_capture",
    "read_all_records",
    "read_record",
    "store_path",
    "tree_snapshot",
    "warc_files",
]


def make_capture(
    url: str,
    body: bytes,
    *,
    status: int = 200,
    content_type: str = "text/html",
    when: datetime | None = None,
    dedup: DedupPolicy | None = None,
    method: str = "GET",
    request_body: bytes = b"",
) -> CaptureInput:
    """A capture of ``url`` answering ``status`` with ``body``."""
    request_headers: tuple[tuple[str, str], ...] = (("User-Agent", "store-tests"),)
    if request_body:
        request_headers += (("Content-Type", "application/x-www-form-urlencoded"),)
    return CaptureInput(
        url=url,
        request=HttpRequest(method=method, headers=request_headers, body=request_body),
        response=HttpResponse(
            status=status,
            reason="OK" if status == 200 else "Other",
            headers=(("Content-Type", content_type), ("Content-Length", str(len(body)))),
        ),
        payload=body,
        warc_date=when,
        dedup=dedup,
    )


@dataclass(frozen=True, slots=True)
class WarcRecord:
    """One record read back: WARC headers (name -> value), HTTP block, payload."""

    offset: int
    length: int
    rec_type: str
    headers: dict[str, str]
    http_block: bytes
    payload: bytes

    @property
    def record_id(self) -> str:
        return self.headers["WARC-Record-ID"]


def _view(record: Any, offset: int, length: int) -> WarcRecord:
    http = record.http_headers
    http_block = http.to_bytes() if http is not None else b""
    payload = record.raw_stream.read()
    return WarcRecord(
        offset=offset,
        length=length,
        rec_type=str(record.rec_type),
        headers={str(k): str(v) for k, v in record.rec_headers.headers},
        http_block=http_block,
        payload=payload,
    )


def read_all_records(path: Path) -> list[WarcRecord]:
    """Every record of a WARC file, with digests checked (raises AssertionError on failure)."""
    out = []
    with path.open("rb") as fh:
        iterator = ArchiveIterator(fh, check_digests=True)
        for record in iterator:
            view = _view(record, 0, 0)
            assert record.digest_checker.passed is not False, record.digest_checker.problems
            out.append(
                WarcRecord(
                    iterator.get_record_offset(),
                    iterator.get_record_length(),
                    view.rec_type,
                    view.headers,
                    view.http_block,
                    view.payload,
                )
            )
    return out


def warc_files(warc_dir: Path) -> list[Path]:
    """Every file under a store's ``warcs/`` (any layout's directory), sorted by name."""
    return sorted((p for p in warc_dir.rglob("*") if not p.is_dir()), key=lambda p: p.name)


def store_path(warc_dir: Path, filename: str) -> Path:
    """The one file named ``filename`` under ``warcs/``, whatever layout placed it."""
    [path] = [p for p in warc_files(warc_dir) if p.name == filename]
    return path


def read_record(warc_dir: Path, capture: CdxRecord) -> WarcRecord:
    """The single record a CDX entry points at (``filename``/``offset``/``length``).

    Reads exactly ``length`` bytes, as a WARC loader does, and asserts they
    hold one whole record whose digests pass. The file is found under
    ``warc_dir`` whatever layout placed it.
    """
    offset, length = capture.offset, capture.length
    assert offset is not None
    assert length is not None
    with store_path(warc_dir, capture.filename).open("rb") as fh:
        fh.seek(offset)
        data = fh.read(length)
    assert len(data) == length, f"{capture.filename}: short read at {offset}"
    records = []
    iterator = ArchiveIterator(BytesIO(data), check_digests=True)
    for record in iterator:
        view = _view(record, offset, length)
        assert record.digest_checker.passed is not False, record.digest_checker.problems
        records.append(view)
    assert len(records) == 1, f"expected one record at {offset}, found {len(records)}"
    return records[0]


def tree_snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: relative path -> (size, sha256); for "changed nothing"."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            data = path.read_bytes()
            out[str(path.relative_to(root))] = (len(data), hashlib.sha256(data).hexdigest())
    return out
