"""Index rows and record framing: the two ways of indexing agree; torn records are never whole."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gateway.store.db import IndexDB
from gateway.store.framing import Frame, FramingError, scan_frames
from gateway.store.indexing import index_range
from gateway.store.layout import Layout
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_all_records, warc_files


async def test_rows_written_equal_rows_read_back_from_the_warc(store: Store) -> None:
    await store.record(make_capture("http://example.com/a?b=1&a=2", b"page a"))
    await store.record(make_capture("http://example.com/a?b=1&a=2", b"page a"))  # revisit
    await store.record(
        make_capture("http://example.com/form", b"posted", method="POST", request_body=b"q=x&r=y")
    )
    await store.record(
        make_capture(
            "http://example.com/404", b"gone", status=404, content_type="text/plain; charset=utf-8"
        )
    )
    await store.close()
    layout = Layout(store.root)
    db = IndexDB(layout.db_path)
    try:
        [file] = db.files()
        written = [stored.row for stored in db.rows_of_file(file.id)]
        path = layout.place(file, open_=file.open)
        with path.open("rb") as fh:
            reread = list(index_range(fh, 0, path.stat().st_size))
    finally:
        db.close()
    assert reread == written
    assert [r.rec_type for r in written] == ["response", "revisit", "response", "response"]
    post = written[2]
    assert post.urlkey == "com,example)/form?__wb_method=post&q=x&r=y"
    assert post.extra == {"requestBody": "q=x&r=y", "method": "POST"}
    assert written[3].mime == "text/plain"
    assert written[3].status == "404"


def _warc_bytes(path: Path) -> bytes:
    return path.read_bytes()


async def test_every_cut_of_a_record_is_reported_torn(store: Store) -> None:
    await store.record(make_capture("http://example.com/", b"x" * 3000))
    await store.close()
    [path] = list(warc_files(store.warc_dir))
    data = _warc_bytes(path)
    records = read_all_records(path)
    last = records[-1]
    whole_end = last.offset
    for cut in range(last.offset + 1, last.offset + last.length):
        fh = io.BytesIO(data[:cut])
        frames: list[Frame] = []
        with pytest.raises(FramingError) as info:
            frames.extend(scan_frames(fh))
        assert info.value.offset == last.offset
        assert info.value.at_eof
        assert frames[-1].end == whole_end
    frames = list(scan_frames(io.BytesIO(data)))
    assert [f.offset for f in frames] == [r.offset for r in records]
    assert frames[-1].end == len(data)


def test_plain_warc_framing(sample_dir: Path) -> None:
    data = (sample_dir / "warcs" / "example-wpull.warc.gz").read_bytes()
    assert list(scan_frames(io.BytesIO(data)))
    # An uncompressed WARC whose Content-Length is wrong (pywb's sample has one)
    with (
        (sample_dir / "warcs" / "example.warc").open("rb") as fh,
        pytest.raises(FramingError, match="CRLF"),
    ):
        list(scan_frames(fh))
