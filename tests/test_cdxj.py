"""CdxRecord parsing and serialization against pywb's CDXObject output."""

from __future__ import annotations

import json

import pytest

from gateway.cdx.cdxj import CdxFormatError, CdxRecord

LINE = (
    'org,iana)/ 20140126200624 {"url": "http://www.iana.org/", "mime": "text/html", '
    '"status": "200", "digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB", "length": "2258", '
    '"offset": "334", "filename": "iana.warc.gz"}'
)


def test_cdxj_round_trip_is_byte_identical() -> None:
    assert CdxRecord.parse(LINE + "\n").to_cdxj() == LINE + "\n"


def test_outputs_match_pywb() -> None:
    record = CdxRecord.parse(LINE)
    # pywb: output=json, fl=url,status
    assert record.to_json(["url", "status"]) == (
        '{"url": "http://www.iana.org/", "status": "200"}\n'
    )
    # pywb: output=text, fl=url,status,foo
    assert record.to_text(["url", "status", "foo"]) == "http://www.iana.org/ 200 -\n"
    assert record.to_text() == (
        "org,iana)/ 20140126200624 http://www.iana.org/ text/html 200 "
        "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB 2258 334 iana.warc.gz\n"
    )
    assert record.to_json().startswith('{"urlkey": "org,iana)/", "timestamp": "20140126200624", ')


def test_legacy_11_field_cdx() -> None:
    record = CdxRecord.parse(
        "org,iana)/ 20140126200624 http://www.iana.org/ text/html 200 "
        "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB - - 2258 334 iana.warc.gz"
    )
    assert (record.length, record.offset, record.filename) == (2258, 334, "iana.warc.gz")
    assert record.fields["redirect"] == "-"


def test_integer_status_becomes_a_string() -> None:
    record = CdxRecord.parse('com,example)/ 20140101000000 {"status": 200, "url": "x"}')
    assert record.status == "200"


@pytest.mark.parametrize(
    "line",
    ["", "com,example)/", "a b c d", "com,example)/ 2014 {not json", "com,example)/ 2014 [1]"],
)
def test_bad_lines_raise(line: str) -> None:
    with pytest.raises(CdxFormatError):
        CdxRecord.parse(line)


def test_reused_text_tracks_changes() -> None:
    """to_cdxj reuses the parsed block only while its fields are unchanged."""
    record = CdxRecord.parse(LINE)
    record.fields["source"] = "pywb:iana.cdxj"
    assert record.to_cdxj() == LINE[:-1] + ', "source": "pywb:iana.cdxj"}\n'
    record.fields["mime"] = "text/plain"  # a changed value: serialized afresh
    assert '"mime": "text/plain"' in record.to_cdxj()
    del record.fields["digest"]
    assert '"digest"' not in record.to_cdxj()
    spaced = CdxRecord.parse('com,a)/ 2014 {"url":"http://a.com/","_x":"1"}')
    assert spaced.to_cdxj() == 'com,a)/ 2014 {"url": "http://a.com/"}\n'
    unicode = CdxRecord.parse('com,a)/ 2014 {"url": "http://a.com/é"}')
    assert unicode.to_cdxj() == 'com,a)/ 2014 {"url": "http://a.com/\\u00e9"}\n'


@pytest.mark.parametrize(
    ("block", "plain"),
    [
        ('{"a": "b"}', True),
        ('{"a": "b", "c": ""}', True),
        ('{"_a": "b"}', False),  # hidden keys: decoded, left out of the output
        ('{"a": "b\\"c"}', False),  # escapes
        ('{"a": 1}', False),  # not a string
        ('{"a": "b\x01"}', False),  # a control character: invalid JSON
        ('{"a": "é"}', False),  # json.dumps escapes non-ASCII
        ('{"a":"b"}', False),  # other spacing
        ('{"source": "x"}', False),  # replaced by the aggregator's tag
        ("{}", False),
    ],
)
def test_plain_blocks_are_kept_as_text_until_a_field_is_read(block: str, plain: bool) -> None:
    line = f"com,a)/ 20140101000000 {block}"
    try:
        record = CdxRecord.parse(line)
    except CdxFormatError:
        assert not plain
        return
    assert (record._fields is None) == plain
    # The same answers either way, as json.loads/json.dumps would give.
    decoded = CdxRecord.parse(line)
    assert decoded.fields == {
        k: v if isinstance(v, str) else json.dumps(v) for k, v in json.loads(block).items()
    }
    decoded.tag("web")
    record.tag("web")
    assert record.to_cdxj() == decoded.to_cdxj()
    assert record.fields == decoded.fields


def test_tags_on_an_undecoded_record_match_pywb() -> None:
    record = CdxRecord.parse(LINE)
    record.set_source("iana.cdxj")  # what a directory source sets
    record.tag("pywb")
    assert record.source == "pywb:iana.cdxj"
    assert record.to_cdxj() == (
        LINE[:-1] + ', "source": "pywb:iana.cdxj", "source-coll": "pywb"}\n'
    )
    copy = record.copy()
    assert copy.fields["source-coll"] == "pywb"  # decoded with its tags
    copy.fields["mime"] = "text/plain"
    assert '"mime": "text/html"' in record.to_cdxj()  # the copy is independent
    assert record.to_cdxj() == json_line(record)


def json_line(record: CdxRecord) -> str:
    """What pywb writes: json.dumps of the decoded block."""
    return f"{record.urlkey} {record.timestamp} {json.dumps(record.fields)}\n"


def test_fields_can_be_replaced_whole() -> None:
    record = CdxRecord.parse(LINE)
    record.tag("pywb")
    record.fields |= {"mime": "text/plain"}  # decodes (tags included), then replaces
    assert record.fields["mime"] == "text/plain"
    assert record.fields["source-coll"] == "pywb"
    assert '"mime": "text/plain"' in record.to_cdxj()


@pytest.mark.parametrize(
    "line",
    [
        'org,iana)/ 20140126200624 {"url": "http://www.iana.org/", "mime": "text/html"}',
        'org,iana)/ 20140126200624 {"url": "http://www.iana.org/caf\\u00e9", "status": 200}',
        "org,iana)/ 20140126200624 http://www.iana.org/ text/html 200 AAAA - - 10 20 a.warc.gz",
    ],
)
def test_a_snapshot_is_untouched_by_what_is_done_to_the_record(line: str) -> None:
    record = CdxRecord.parse(line)
    expected = (record.to_cdxj(), record.to_json())
    image = record.snapshot()
    # What consumers do to the records a lookup gives them: tag, gate, decode, replace.
    record.tag("member")
    record.set_access("block")
    record.fields["mime"] = "changed"
    again = CdxRecord.from_snapshot(image)
    assert (again.to_cdxj(), again.to_json()) == expected
    again.tag("other")
    assert "other" not in CdxRecord.from_snapshot(image).to_cdxj()
    record.fields = {"url": "replaced"}
    assert CdxRecord.from_snapshot(image).to_cdxj() == expected[0]
    assert (again.url, record.url) == (CdxRecord.parse(line).url, "replaced")


def test_copy_and_snapshot_know_every_slot() -> None:
    # CdxRecord.copy() and .snapshot() list the slots they carry over: a new
    # slot must be added to both (an undecoded record's tags live in slots).
    assert set(CdxRecord.__slots__) == {
        "_access",
        "_coll",
        "_fields",
        "_plain",
        "_raw",
        "_source",
        "timestamp",
        "urlkey",
    }
