"""The fast paths of the record-loading path give the slow paths' results.

- plain header blocks (:meth:`_FastHeadersParser._plain`) parse exactly as
  warcio's ``StatusAndHeadersParser`` does, on crafted and random blocks, and
  :func:`~gateway.loaders.warc_headers.block_bytes` writes every parsed block
  as warcio's ``to_bytes`` does, also after its headers are changed;
- :func:`gateway.cdx.memento.timestamp_to_http_date` and
  :func:`~gateway.cdx.memento.iso_to_timestamp` answer as the ``strptime`` /
  ``email.utils`` versions they replace, errors included;
- a record read and inflated at once is offered whole
  (:meth:`LoadedRecord.body_in_memory`), others stream, with the same bytes;
- the Resource API sends the same bytes and headers whichever way the record
  goes out (one response, two writes, or streamed), HEAD included, a
  truncated record aborts the response, and a client leaving mid-record is
  not an error.
"""

from __future__ import annotations

import io
import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import aiohttp
import pytest
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.memento import iso_to_timestamp, timestamp_to_http_date
from gateway.clients import SharedClients
from gateway.index.indexer import write_cdxj_index
from gateway.loaders.base import FindOriginal
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.loaders.warc_headers import RECORD_LOADER, HeaderWindow, block_bytes
from tests.conftest import MakeClient, leave_mid_answer, write_big_warc
from tests.loaders.conftest import capture, context, load_all

_PARSERS = {
    "warc": RECORD_LOADER.warc_parser,
    "http": RECORD_LOADER.http_parser,
    "request": RECORD_LOADER.http_req_parser,
}
_STATUS_LINES = {
    "warc": "WARC/1.0",
    "http": "HTTP/1.1 200 OK",
    "request": "GET /path HTTP/1.1",
}

#: Header lines that must keep their exact warcio meaning (or leave the fast path).
_LINES = [
    "Name: value",
    "Content-Type: text/html; charset=UTF-8",
    "Name : spaced name",
    "Name:  two spaces",
    "Name:no space",
    "Empty:",
    "Empty: ",
    "no colon at all",
    ": no name",
    "Tab:\tvalue",
    "Trailing: value  ",
    "Colons: a: b: c",
    "Url: http://example.com/a?b=c",
    " continued",
    "\tcontinued by tab",
    "Utf8: caf\u00e9",
    "Form\x0cfeed: x",
    "Nbsp: a\u00a0",
]


def _warcio(kind: str, block: bytes) -> tuple[object, int]:
    stream = io.BytesIO(block + b"BODY")
    parser = StatusAndHeadersParser(_PARSERS[kind].statuslist, _PARSERS[kind].verify)
    try:
        result = parser.parse(stream)
    except Exception as exc:  # warcio's error type is the answer
        return type(exc).__name__, stream.tell()
    return _shape(result), stream.tell()


def _window(block: bytes) -> HeaderWindow:
    window = HeaderWindow()
    window.buf = block + b"BODY"
    window.final = True
    return window


def _ours(kind: str, block: bytes) -> tuple[object, int]:
    window = _window(block)
    try:
        result = _PARSERS[kind].parse(window)
    except Exception as exc:  # compared with warcio's error type
        return type(exc).__name__, window.pos
    assert block_bytes(result) == result.to_bytes(), block
    return _shape(result), window.pos


def _shape(result: object) -> tuple[object, ...]:
    return (
        result.protocol,  # type: ignore[attr-defined]
        result.statusline,  # type: ignore[attr-defined]
        result.headers,  # type: ignore[attr-defined]
        result.total_len,  # type: ignore[attr-defined]
    )


def _block(status: str, lines: list[str], end: str = "\r\n") -> bytes:
    return (status + end + "".join(line + end for line in lines) + end).encode("utf-8")


@pytest.mark.parametrize("kind", sorted(_PARSERS))
def test_plain_blocks_take_the_fast_path(kind: str) -> None:
    """A crawler's usual block is parsed at once, and as warcio parses it."""
    lines = [*_LINES[:5], "Empty:", "no colon at all", ": no name", *_LINES[11:13]]
    block = _block(_STATUS_LINES[kind], lines)
    parser = _PARSERS[kind]
    plain = parser._plain(block, 0, len(block))
    assert plain is not None
    assert _shape(plain) == _warcio(kind, block)[0]
    assert _ours(kind, block) == _warcio(kind, block)


@pytest.mark.parametrize("kind", sorted(_PARSERS))
def test_every_crafted_line_parses_as_warcio(kind: str) -> None:
    status = _STATUS_LINES[kind]
    for line in _LINES:
        for end in ("\r\n", "\n"):
            for lines in ([line], ["A: 1", line, "B: 2"], [line, line]):
                block = _block(status, lines, end)
                assert _ours(kind, block) == _warcio(kind, block), (kind, lines, end)
    for status_line in ("http/1.1 200 OK", "HTTP/1.1  200  OK ", "WARC/1.1", "garbage", " "):
        block = _block(status_line, ["A: 1"])
        assert _ours(kind, block) == _warcio(kind, block), (kind, status_line)


def test_random_blocks_parse_as_warcio() -> None:
    rng = random.Random(7)
    alphabet = ["a", "B", "-", ":", " ", "\t", "\r", "\x0b", "\x1c", "\u00e9", "\x85", "1"]
    taken = 0
    for _ in range(3000):
        kind = rng.choice(sorted(_PARSERS))
        lines = []
        for _ in range(rng.randint(0, 5)):
            if rng.random() < 0.5:
                lines.append(rng.choice(_LINES))
            else:
                lines.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))))
        block = _block(_STATUS_LINES[kind], lines, rng.choice(["\r\n", "\n"]))
        assert _ours(kind, block) == _warcio(kind, block), (kind, block)
        taken += _PARSERS[kind]._plain(block, 0, len(block)) is not None
    assert taken > 100  # the fast path was exercised, not only the fallback


def test_changed_blocks_are_written_as_warcio_writes_them() -> None:
    block = _block("HTTP/1.1 200 OK", ["Content-Type: text/html", "Content-Length: 5"])
    assert block_bytes(_PARSERS["http"].parse(_window(block))) == block
    changes: list[Callable[[StatusAndHeaders], object]] = [
        lambda h: h.replace_header("Content-Length", "0"),
        lambda h: h.add_header("X-Added", "caf\u00e9"),
        lambda h: h.remove_header("Content-Type"),
        lambda h: setattr(h, "headers", []),
        lambda h: setattr(h, "statusline", ""),
        lambda h: setattr(h, "protocol", ""),
    ]
    for count in range(1, len(changes) + 1):
        parsed = _PARSERS["http"].parse(_window(block))
        for change in changes[:count]:
            change(parsed)
        assert block_bytes(parsed) == parsed.to_bytes(), count


# ----------------------------------------------------------------- memento dates
def _reference_http_date(ts: str) -> str:
    dt = datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return format_datetime(dt, usegmt=True)


def _reference_iso_to_timestamp(iso: str) -> str:
    digits = "".join(ch for ch in iso.split(".")[0] if ch.isdigit())
    if len(digits) < 14:
        raise ValueError(iso)
    return digits[:14]


def _outcome(function: Callable[[str], str], value: str) -> str:
    try:
        return function(value)
    except ValueError:
        return "ValueError"


def test_date_helpers_answer_as_the_reference_versions() -> None:
    rng = random.Random(11)
    values = ["20140126200624", "2014012620062", "201401262006", "19991231235959999"]
    values += ["20000229120000", "19000229120000", "20141301000000", "20140100000000"]
    values += ["00000101000000", "20140126246000", "20140126235960", "2014-01-26", ""]
    for _ in range(20000):
        if rng.random() < 0.6:
            fields = (9999, 13, 32, 24, 60, 61)
            values.append(
                "".join(f"{rng.randint(0, top):0{2 if top < 100 else 4}d}" for top in fields)
            )
        else:
            values.append(
                "".join(rng.choice("0123456789 -T:.Z\u0663") for _ in range(rng.randint(8, 20)))
            )
    answered = 0
    for value in values:
        expected = _outcome(_reference_http_date, value)
        assert _outcome(timestamp_to_http_date, value) == expected, value
        answered += expected != "ValueError"
        iso = f"{value[:4]}-{value[4:6]}-{value[6:8]}T{value[8:10]}:{value[10:12]}:{value[12:14]}Z"
        for text in (value, iso, iso[:-1] + ".123Z", iso.replace("T", " ")):
            expected = _outcome(_reference_iso_to_timestamp, text)
            assert _outcome(iso_to_timestamp, text) == expected, text
    assert answered > 1000


# ------------------------------------------------------------ bodies in memory
SMALL = ("iana.warc.gz", 334)  # the iana.org home page: 2,258 bytes -> 6 KB
FONT = ("iana.warc.gz", 198285)  # OpenSans-Bold.ttf: 117 KB -> 225 KB
PROTOCOLS = ("iana.warc.gz", 496277)  # 64 KB -> 656 KB: more than one inflate piece


@pytest.mark.parametrize("where", [SMALL, FONT, PROTOCOLS])
async def test_whole_bodies_are_the_streamed_bytes(
    clients: SharedClients,
    warcs_dir: Path,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
    where: tuple[str, int],
) -> None:
    record = capture(sample_index, *where)
    resolvers = WarcLoaderConfig.from_shorthand(str(warcs_dir)).resolvers
    fast = WarcLoader(WarcLoaderConfig(resolvers=resolvers), clients=clients)
    slow = WarcLoader(WarcLoaderConfig(resolvers=resolvers, chunk_bytes=1024), clients=clients)
    _, expected = await load_all(slow, record.copy(), finder)
    loaded = await fast.load(record.copy(), context(finder, record.url))
    whole = loaded.body_in_memory()
    if where == PROTOCOLS:
        assert whole is None  # inflates past one 256 KiB piece: streams
        _, data = await load_all(fast, record.copy(), finder)
    else:
        assert whole is not None
        data = loaded.warc_headers + loaded.http_headers + bytes(whole)
    await loaded.aclose()
    assert data == expected
    assert len(data) == loaded.content_length


async def test_a_replaced_body_is_not_offered_whole(
    clients: SharedClients,
    warcs_dir: Path,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
) -> None:
    """A wrapper that replaces ``body`` (the recorder) is what gets sent."""
    record = capture(sample_index, *SMALL)
    loader = WarcLoader(WarcLoaderConfig.from_shorthand(str(warcs_dir)), clients=clients)
    loaded = await loader.load(record, context(finder, record.url))
    source = loaded.body

    async def tee() -> AsyncIterator[bytes]:
        async for chunk in source:
            yield chunk

    loaded.body = tee()
    assert loaded.body_in_memory() is None
    await loaded.aclose()


# ---------------------------------------------------------------- the Resource API
def _config(index: Path, warcs: Path) -> str:
    return f"collections:\n  iana:\n    index: {index}\n    resource: {warcs}/\n"


@pytest.mark.parametrize(
    "query",
    [
        "url=http://www.iana.org/&closest=20140126200624",
        "url=http://www.iana.org/_css/2013.1/fonts/OpenSans-Bold.ttf&closest=20140126200625",
        "url=http://www.iana.org/protocols&closest=20140126200715",
    ],
)
async def test_resource_answers_get_and_head_alike(
    make_client: MakeClient,
    sample_dir: Path,
    clients: SharedClients,
    finder: FindOriginal,
    sample_index: list[CdxRecord],
    query: str,
) -> None:
    client = await make_client(_config(sample_dir / "cdxj" / "iana.cdxj", sample_dir / "warcs"))
    got = await client.get(f"/iana/resource?{query}")
    assert got.status == 200
    body = await got.read()
    head = await client.head(f"/iana/resource?{query}")
    assert head.status == 200
    assert await head.read() == b""
    assert int(got.headers["Content-Length"]) == len(body)
    assert head.headers["Content-Length"] == got.headers["Content-Length"]
    for name in ("Warcserver-Cdx", "Memento-Datetime", "Link", "Content-Type"):
        assert head.headers[name] == got.headers[name]
    offset = int(CdxRecord.parse(got.headers["Warcserver-Cdx"]).offset or 0)
    loader = WarcLoader(
        WarcLoaderConfig(
            resolvers=WarcLoaderConfig.from_shorthand(str(sample_dir / "warcs")).resolvers,
            chunk_bytes=1024,
        ),
        clients=clients,
    )
    _, expected = await load_all(loader, capture(sample_index, "iana.warc.gz", offset), finder)
    assert body == expected


async def test_a_truncated_record_aborts_the_response(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    data = (sample_dir / "warcs" / "iana.warc.gz").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(data[: 334 + 1500])
    line = (sample_dir / "cdxj" / "iana.cdxj").read_text("utf-8").splitlines()[0]
    assert '"offset": "334"' in line
    (tmp_path / "cut.cdxj").write_text(line.replace("iana.warc.gz", "cut.warc.gz") + "\n")
    client = await make_client(_config(tmp_path / "cut.cdxj", tmp_path))
    response = await client.get(
        "/iana/resource?url=http://www.iana.org/", timeout=aiohttp.ClientTimeout(total=5)
    )
    assert response.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()


async def test_a_client_leaving_mid_record_is_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A 32 MB record (40 KB of gzip): more than the socket buffers hold, so the
    # server is still writing when the client goes away.
    warc = write_big_warc(tmp_path / "big.warc.gz")
    with (tmp_path / "big.cdxj").open("w") as index:
        write_cdxj_index([warc], index)
    await leave_mid_answer(
        _config(tmp_path / "big.cdxj", tmp_path),
        "/iana/resource?url=http://example.com/big",
        caplog,
        expect_log="client left during GET /iana/resource",
    )
