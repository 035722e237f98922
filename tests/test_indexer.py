"""gateway.index.indexer: sorted CDXJ from the sample archive's WARC/ARC files.

The reference is the sample archive's own index, ``cdxj/iana.cdxj``, written by
an older pywb indexer. cdxj-indexer differs from it in two known ways, and the
comparison allows exactly these and nothing else:

- the payload digest keeps its algorithm prefix (``sha1:OSSAP...`` where the
  sample has ``OSSAP...``), as FIELD-NOTES records;
- revisit records (``mime: warc/revisit``) carry ``status``, the status line of
  the revisit's own HTTP header block; the sample index has no ``status`` there.

Urlkeys, timestamps, line order, the other keys, their values and their order
must be identical.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gateway.index.indexer import write_cdxj_index

Line = tuple[str, str, list[tuple[str, str]]]


def index_text(inputs: list[Path], *, post_append: bool = True) -> list[str]:
    out = io.StringIO()
    count = write_cdxj_index(inputs, out, post_append=post_append)
    lines = out.getvalue().splitlines()
    assert count == len(lines)
    return lines


def parse(line: str) -> Line:
    urlkey, timestamp, block = line.split(" ", 2)
    return urlkey, timestamp, list(json.loads(block).items())


def as_sample_writes(line: str) -> Line:
    """One of our lines with the two known differences from the sample index undone."""
    urlkey, timestamp, fields = parse(line)
    fields_dict = dict(fields)
    assert fields_dict["digest"].startswith("sha1:"), line
    revisit = fields_dict.get("mime") == "warc/revisit"
    normalized = [
        (key, value.removeprefix("sha1:") if key == "digest" else value)
        for key, value in fields
        if not (revisit and key == "status")
    ]
    return urlkey, timestamp, normalized


def test_iana_matches_the_sample_index(sample_dir: Path) -> None:
    ours = index_text([sample_dir / "warcs" / "iana.warc.gz"])
    reference = (sample_dir / "cdxj" / "iana.cdxj").read_text("utf-8").splitlines()

    assert len(ours) == len(reference) == 171
    for our_line, reference_line in zip(ours, reference, strict=True):
        assert as_sample_writes(our_line) == parse(reference_line)


def test_lines_have_cdxj_indexer_keys_and_basename(sample_dir: Path) -> None:
    first = parse(index_text([sample_dir / "warcs" / "iana.warc.gz"])[0])
    assert first == (
        "org,iana)/",
        "20140126200624",
        [
            ("url", "http://www.iana.org/"),
            ("mime", "text/html"),
            ("status", "200"),
            ("digest", "sha1:OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB"),
            ("length", "2258"),
            ("offset", "334"),
            ("filename", "iana.warc.gz"),
        ],
    )


def test_several_files_make_one_sorted_index(sample_dir: Path) -> None:
    names = ["iana.warc.gz", "example.warc.gz", "dupes.warc.gz", "example.arc.gz"]
    warcs = [sample_dir / "warcs" / name for name in names]

    merged = index_text(warcs)

    assert merged == sorted(merged)
    assert len(merged) == sum(len(index_text([warc])) for warc in warcs)
    assert {dict(parse(line)[2])["filename"] for line in merged} == set(names)
    assert index_text(list(reversed(warcs))) == merged
    keys = [(urlkey, timestamp) for urlkey, timestamp, _ in map(parse, merged)]
    assert keys == sorted(keys)


def test_binary_output_is_utf8_of_the_same_lines(sample_dir: Path) -> None:
    warc = sample_dir / "warcs" / "example.warc.gz"
    out = io.BytesIO()
    count = write_cdxj_index([warc], out)
    assert out.getvalue().decode("utf-8").splitlines() == index_text([warc])
    assert count == 3


def test_directory_inputs_index_their_archive_files(sample_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "nested").mkdir()
    (tmp_path / "example.warc.gz").symlink_to(sample_dir / "warcs" / "example.warc.gz")
    (tmp_path / "nested" / "dupes.warc.gz").symlink_to(sample_dir / "warcs" / "dupes.warc.gz")
    (tmp_path / "notes.txt").write_text("not an archive, and not indexed\n")

    lines = index_text([tmp_path])

    warcs = [sample_dir / "warcs" / "example.warc.gz", sample_dir / "warcs" / "dupes.warc.gz"]
    assert lines == index_text(warcs)


def test_post_requests_get_method_and_body_in_the_urlkey(sample_dir: Path) -> None:
    warc = sample_dir / "warcs" / "post-test.warc.gz"
    lines = [parse(line) for line in index_text([warc])]
    reference = [
        parse(line)
        for line in (sample_dir / "cdxj" / "post-test.cdxj").read_text("utf-8").splitlines()
    ]

    post_keys = [urlkey for urlkey, _, _ in lines if "__wb_method=post" in urlkey]
    assert post_keys == [
        "org,httpbin)/post?__wb_method=post&a=1&b=[]&c=3",
        "org,httpbin)/post?__wb_method=post&data=^&foo=bar",
        "org,httpbin)/post?__wb_method=post&foo=bar&test=abc",
    ]
    # The sample's post-test.cdxj has the same captures, unsorted (FIELD-NOTES).
    assert sorted((u, t) for u, t, _ in lines) == sorted((u, t) for u, t, _ in reference)
    by_key = {(u, t): dict(fields) for u, t, fields in lines}
    assert by_key["org,httpbin)/post?__wb_method=post&foo=bar&test=abc", "20140610000859"] == {
        "url": "http://httpbin.org/post",
        "mime": "application/json",
        "status": "200",
        "digest": "sha1:M532K5WS4GY2H4OVZO6HRPOP47A7KDWU",
        "length": "720",
        "offset": "0",
        "filename": "post-test.warc.gz",
        "requestBody": "foo=bar&test=abc",
        "method": "POST",
    }


def test_without_post_append_urlkeys_are_plain(sample_dir: Path) -> None:
    lines = index_text([sample_dir / "warcs" / "post-test.warc.gz"], post_append=False)
    assert lines
    assert not [line for line in lines if "__wb_method" in line]


@pytest.mark.parametrize("post_append", [True, False])
def test_arc_records_get_their_payload_digest(sample_dir: Path, post_append: bool) -> None:
    """ARC records have no digest header: it is computed from the payload.

    The reference is the sample's legacy CDX of the same two files. (cdxj-indexer
    1.5.0 alone, with post_append, writes the digest of an empty payload here.)
    """
    warcs = [sample_dir / "warcs" / "example.arc", sample_dir / "warcs" / "example.arc.gz"]
    ours = [dict(parse(line)[2]) for line in index_text(warcs, post_append=post_append)]
    # CDX N b a m s k r M S V g: the last four are digest ... length offset filename.
    reference = [
        line.split()
        for line in (sample_dir / "cdx" / "example-arc-test.cdx").read_text("utf-8").splitlines()
        if not line.startswith(" CDX")
    ]
    assert [(f["digest"], f["length"], f["offset"], f["filename"]) for f in ours] == [
        ("sha1:" + fields[5], fields[8], fields[9], fields[10]) for fields in reference
    ]


def test_an_empty_file_is_an_archive_without_records(tmp_path: Path) -> None:
    empty = tmp_path / "empty.warc"
    empty.write_bytes(b"")
    assert index_text([empty]) == []


def test_missing_input_is_a_value_error(sample_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.warc.gz"
    out = io.StringIO()
    with pytest.raises(ValueError, match="no such file or directory") as raised:
        write_cdxj_index([sample_dir / "warcs" / "example.warc.gz", missing], out)
    assert str(missing) in str(raised.value)
    assert out.getvalue() == ""


def test_single_gzip_warc_is_a_value_error_advising_recompress(sample_dir: Path) -> None:
    bad = sample_dir / "warcs" / "example-bad.warc.gz.bad"
    out = io.StringIO()
    with pytest.raises(ValueError, match="warcio recompress") as raised:
        write_cdxj_index([sample_dir / "warcs" / "example.warc.gz", bad], out)
    message = str(raised.value)
    assert message.startswith(f"{bad}: cannot index this WARC/ARC file: ")
    assert "non-chunked gzip file" in message
    assert out.getvalue() == "", "nothing is written when an input fails"


@pytest.mark.parametrize(
    ("name", "start"),
    [
        ("cdxj/iana.cdxj", "it starts with b'org,iana)/"),
        ("cdxj/example.cdx.gz", "its first gzip member starts with b'com,example)/"),
    ],
)
def test_a_file_that_is_not_warc_or_arc_is_a_value_error(
    sample_dir: Path, name: str, start: str
) -> None:
    path = sample_dir / name
    with pytest.raises(ValueError, match="not a WARC or ARC file") as raised:
        write_cdxj_index([path], io.StringIO())
    message = str(raised.value)
    assert message.startswith(f"{path}: not a WARC or ARC file: {start}")
    assert "expected b'WARC/' (WARC) or b'filedesc://' (ARC)" in message


def test_corrupt_gzip_is_a_value_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.warc.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    with pytest.raises(ValueError, match="starts like a gzip file but does not decompress"):
        write_cdxj_index([broken], io.StringIO())


# -- gateway index: failing cleanly ------------------------------------------------------


def _run_index(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from gateway.cli import main

    status = main(["index", *args])
    return status, capsys.readouterr().err


def _bad_and_good(sample_dir: Path) -> tuple[Path, Path]:
    """A WARC gzipped whole (unreadable by record) and a good one, from the sample."""
    return (
        sample_dir / "warcs" / "example-bad.warc.gz.bad",
        sample_dir / "warcs" / "example.warc.gz",
    )


def test_an_unreadable_file_is_reported_and_skipped_and_the_run_fails(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, good = _bad_and_good(sample_dir)
    out = tmp_path / "out.cdxj"
    status, err = _run_index([str(bad), str(good), "-o", str(out)], capsys)
    assert status == 1
    assert f"{bad}: cannot read this WARC/ARC file" in err
    assert "warcio recompress" in err
    assert "skipped" in err
    assert len(out.read_text().splitlines()) == 3  # the good file's captures
    assert not list(tmp_path.glob("*.tmp"))


def test_strict_stops_at_the_first_problem_and_writes_nothing(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, good = _bad_and_good(sample_dir)
    out = tmp_path / "out.cdxj"
    status, err = _run_index(["--strict", str(good), str(bad), "-o", str(out)], capsys)
    assert status == 1
    assert str(bad) in err
    assert not out.exists()
    assert not list(tmp_path.iterdir())  # no out.cdxj.tmp either


@pytest.mark.parametrize("name", ["example.warc", "example.warc.gz"])
def test_a_torn_last_record_is_reported_and_not_indexed(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    whole = (sample_dir / "warcs" / name).read_bytes()
    cut = tmp_path / name
    cut.write_bytes(whole[: len(whole) - 40])  # a crash in the middle of the last record
    out = tmp_path / "out.cdxj"
    status, err = _run_index([str(cut), "-o", str(out)], capsys)
    assert status == 1
    assert "is torn" in err or "cannot read" in err
    entire = io.StringIO()
    write_cdxj_index([sample_dir / "warcs" / name], entire)
    last_offset = max(
        int(json.loads(line.split(" ", 2)[2])["offset"]) for line in entire.getvalue().splitlines()
    )
    offsets = [json.loads(line.split(" ", 2)[2])["offset"] for line in out.read_text().splitlines()]
    assert str(last_offset) not in offsets
    assert offsets  # the records before it are indexed


def test_a_failed_write_leaves_no_tmp_file(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A missing directory is made (a26f2d2): a file where it should be cannot be.
    (tmp_path / "not-a-dir").write_text("")
    out = tmp_path / "not-a-dir" / "out.cdxj"
    status, err = _run_index(
        [str(sample_dir / "warcs" / "example.warc.gz"), "-o", str(out)], capsys
    )
    assert status == 1
    assert "not-a-dir" in err
    missing = tmp_path / "nope.warc.gz"
    out = tmp_path / "out.cdxj"
    status, err = _run_index([str(missing), "-o", str(out)], capsys)
    assert status == 1
    assert "no such file" in err
    assert not list(tmp_path.glob("*.tmp"))


def test_records_whose_length_is_no_number_are_reported_and_left_out(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pywb's (and warcio's) ``bad.arc``: lengths ``-1`` and ``abc``, which warcio
    reads as empty blocks and ``warcio check`` accepts (issue 21 §4)."""
    out = tmp_path / "bad.cdxj"
    status, err = _run_index([str(sample_dir / "warcs" / "bad.arc"), "-o", str(out)], capsys)
    assert status == 1
    reported = [line for line in err.splitlines() if "not a number of bytes" in line]
    assert [line.split("record at offset ")[1].split(" ")[0] for line in reported] == [
        "0",
        "134",
        "262",
    ]
    assert "has a length of 'abc'" in reported[2]
    assert all(line.endswith("; not indexed") for line in reported)
    (line,) = out.read_text().splitlines()  # the one record with a length
    assert json.loads(line.split(" ", 2)[2])["offset"] == "202"
