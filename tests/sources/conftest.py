"""Fixtures and helpers for index source tests.

``big_cdxj``
    :class:`~pathlib.Path` of a sorted ~10 MB CDXJ made from the sample's
    ``iana.cdxj`` (session-scoped): the 171 captures repeated under 120 host
    names ``org,iana000)/`` .. ``org,iana119)/``, every 37th line padded with
    a 10 kB ``"extra"`` field, so lookups need many binary-search probes and
    meet lines longer than a probe and a block.

:func:`collect` runs a lookup to the end; :func:`linear_scan` is the oracle
for sorted files (every line ``key <= line < end``, header and blank lines
excluded), parsed with :meth:`CdxRecord.parse`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.sources.base import IndexSource

BIG_HOSTS = 120
LONG_LINE_EVERY = 37


async def collect(source: IndexSource, query: CaptureQuery) -> list[CdxRecord]:
    """Every record of ``source.lookup(query)``, closing the iterator."""
    return [record async for record in source.lookup(query)]


def read_lines(path: Path) -> list[bytes]:
    """The lines of a plain or gzip index file, without line ends (cached while unchanged)."""
    st = path.stat()
    version = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    lines = _lines_cache.get(version)
    if lines is None:
        data = path.read_bytes()
        if data.startswith(b"\x1f\x8b"):
            data = gzip.decompress(data)
        lines = _lines_cache[version] = data.splitlines()
    return lines


_lines_cache: dict[tuple[str, int, int, int], list[bytes]] = {}


def linear_scan(path: Path, query: CaptureQuery) -> list[CdxRecord]:
    """Records of every line in ``[query.key, query.end_key)``, by reading the whole file."""
    key, end = query.key.encode(), query.end_key.encode()
    return [
        CdxRecord.parse(line)
        for line in read_lines(path)
        if key <= line.rstrip() < end and line.strip() and not line.startswith((b" CDX", b"CDX "))
    ]


def signature(records: list[CdxRecord]) -> list[tuple[str, str, str, str, str]]:
    """What identifies a capture across CDXJ and legacy CDX: key, time, URL, file, offset."""
    return [(r.urlkey, r.timestamp, r.url, r.filename, r.fields.get("offset", "")) for r in records]


@pytest.fixture(scope="session")
def big_cdxj(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sorted multi-megabyte CDXJ derived from iana.cdxj (see module docstring)."""
    lines = (sample_dir / "cdxj" / "iana.cdxj").read_bytes().splitlines()
    out: list[bytes] = []
    for host in range(BIG_HOSTS):
        for line in lines:
            urlkey, timestamp, block = line.split(b" ", 2)
            assert urlkey.startswith(b"org,iana)")
            new_key = b"org,iana%03d" % host + urlkey[len(b"org,iana") :]
            if len(out) % LONG_LINE_EVERY == 0:
                fields = json.loads(block)
                fields["extra"] = "x" * 10_000
                block = json.dumps(fields).encode()
            out.append(b" ".join((new_key, timestamp, block)))
    assert out == sorted(out)
    path = tmp_path_factory.mktemp("big") / "big.cdxj"
    path.write_bytes(b"\n".join(out) + b"\n")
    return path
