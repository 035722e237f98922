"""The WACZ writer: entries front to back into a stream that cannot seek, read back whole."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.index.wacz_writer import WaczWriter
from tests.wacz_support import entry_data_offset


def test_entries_written_in_pieces_read_back_with_their_hashes() -> None:
    writer = WaczWriter(datetime(2014, 1, 26, 20, 6, 24, tzinfo=UTC))
    out = io.BytesIO()
    pieces = [b"first member ", b"x" * 100_000, b" last"]
    writer.begin("archive/data.warc.gz")
    offsets = []
    for piece in pieces:
        offsets.append(writer.entry_bytes)
        writer.write(piece)
        out.write(writer.take())  # handed on as it goes: nothing is kept
        assert writer.pending_bytes == 0
    writer.end()
    writer.add("indexes/index.cdx", b"org,iana)/ 20140126200624 {}\n")
    writer.finish({"software": "test"})
    out.write(writer.take())
    assert offsets == [0, 13, 100_013]
    with zipfile.ZipFile(io.BytesIO(out.getvalue())) as archive:
        assert archive.testzip() is None  # every CRC holds
        warc = archive.getinfo("archive/data.warc.gz")
        assert warc.compress_type == zipfile.ZIP_STORED
        assert archive.getinfo("indexes/index.cdx").compress_type == zipfile.ZIP_DEFLATED
        package = json.loads(archive.read("datapackage.json"))
        digest = json.loads(archive.read("datapackage-digest.json"))
        for resource in package["resources"]:
            data = archive.read(resource["path"])
            assert resource["hash"] == f"sha256:{hashlib.sha256(data).hexdigest()}"
            assert resource["bytes"] == len(data)
        assert archive.read("archive/data.warc.gz") == b"".join(pieces)
        assert digest["hash"] == (
            f"sha256:{hashlib.sha256(archive.read('datapackage.json')).hexdigest()}"
        )
    assert package["created"] == "2014-01-26T20:06:24Z"
    assert (package["wacz_version"], package["software"]) == ("1.1.1", "test")
    assert [r["name"] for r in package["resources"]] == ["data.warc.gz", "index.cdx"]


def test_misuse_is_refused() -> None:
    writer = WaczWriter()
    with pytest.raises(ValueError, match="stored, not deflated"):
        writer.begin("archive/data.warc.gz", deflate=True)
    with pytest.raises(RuntimeError, match="no entry is open"):
        writer.write(b"x")
    writer.begin("archive/data.warc.gz")
    with pytest.raises(RuntimeError, match="still open"):
        writer.begin("indexes/index.cdx")


def test_a_discarded_writer_keeps_nothing() -> None:
    writer = WaczWriter()
    writer.begin("archive/data.warc.gz")
    writer.write(b"part of a record")
    writer.discard()
    assert writer.pending_bytes == 0
    writer.discard()  # twice is harmless


def test_every_entry_is_found_where_wabac_js_looks_for_it(tmp_path: Path) -> None:
    """wabac.js (ReplayWeb.page's reader, ZipRangeReader) takes an entry's data to
    start at ``header offset + 30 + name length`` whenever the central directory
    gives the entry no extra field, without reading its local header; where the
    central record has one, it reads the local header (APPNOTE 4.3.7). So an
    entry whose local header has extra fields must have some in the central
    directory too, or wabac.js reads the wrong bytes (found opening an export)."""
    writer = WaczWriter(datetime(2014, 1, 26, 20, 6, 24, tzinfo=UTC))
    path = tmp_path / "out.wacz"
    with path.open("wb") as out:
        writer.begin("archive/data.warc.gz")
        writer.write(b"record")
        writer.end()
        writer.add("indexes/index.cdx", b"org,iana)/ 20140126200624 {}\n")
        writer.finish({"software": "test"})
        out.write(writer.take())
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    assert len(infos) == 4
    for info in infos:
        start, _size = entry_data_offset(path, info.filename)  # from the local header
        if not info.extra:  # as wabac.js computes it
            assert start == info.header_offset + 30 + len(info.filename), info.filename
    with zipfile.ZipFile(path) as archive:
        assert archive.read("archive/data.warc.gz") == b"record"
