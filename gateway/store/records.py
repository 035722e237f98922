"""The WARC/1.1 records of one capture, written with warcio.

A capture becomes two records, each in its own gzip member (WARC 1.1 Annex
D.2), response (or revisit) first, as warcio's own request/response writer
orders them:

- ``response`` (WARC 1.1 §6.4): block = HTTP status line and headers +
  payload; ``WARC-Payload-Digest`` and ``WARC-Block-Digest`` are computed
  here in one pass over the payload;
- or ``revisit`` (WARC 1.1 §6.7.2, profile ``identical-payload-digest``):
  block = status line and HTTP headers only, ``WARC-Truncated: length``,
  ``WARC-Payload-Digest`` of the original (the same digest),
  ``WARC-Refers-To`` (its record ID), ``WARC-Refers-To-Target-URI`` and
  ``WARC-Refers-To-Date`` (its target URI and WARC-Date);
- ``request`` (WARC 1.1 §6.5) with ``WARC-Concurrent-To`` the first record.

All records of a capture share its WARC-Date.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from typing import IO, Any
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser
from warcio.timeutils import iso_date_to_timestamp
from warcio.warcwriter import WARCWriter

from gateway.store.capture import CaptureInput, capture_urlkey, request_target, sha1_digest
from gateway.store.indexing import IndexRow, mime_of
from gateway.store.warcfile import RecordSink

__all__ = ["PreparedCapture", "prepare_capture", "write_capture"]


@dataclass(slots=True)
class PreparedCapture:
    """A capture with its digests, urlkey and HTTP header block computed."""

    capture: CaptureInput
    http: StatusAndHeaders
    payload: IO[bytes]
    payload_digest: str
    block_digest: str
    length: int
    urlkey: str
    extra: dict[str, str]


def prepare_capture(capture: CaptureInput) -> PreparedCapture:
    """Digest the payload (one pass) and compute the urlkey.

    Raises OSError when a payload file cannot be read, ValueError on a URL
    that cannot be canonicalized.
    """
    response = capture.response
    http = StatusAndHeaders(
        f"{response.status} {response.reason}".rstrip(),
        list(response.headers),
        protocol=response.version,
    )
    http.compute_headers_buffer()
    payload: IO[bytes] = (
        BytesIO(capture.payload) if isinstance(capture.payload, bytes) else capture.payload
    )
    payload_digest, block_digest, length = sha1_digest(payload, http.headers_buff)
    urlkey, extra = capture_urlkey(capture.url, capture.request)
    return PreparedCapture(
        capture, http, payload, payload_digest, block_digest, length, urlkey, extra
    )


def _request_record(
    writer: WARCWriter, capture: CaptureInput, warc_date: str, concurrent_to: str
) -> Any:
    request = capture.request
    headers = list(request.headers)
    if not any(name.lower() == "host" for name, _ in headers):
        headers.insert(0, ("Host", urlsplit(capture.url).netloc))
    target = request.target or request_target(capture.url)
    http = StatusAndHeaders(f"{target} {request.version}", headers, protocol=request.method.upper())
    return writer.create_warc_record(
        capture.url,
        "request",
        payload=BytesIO(request.body),
        length=len(request.body),
        http_headers=http,
        warc_headers_dict={
            "WARC-Type": "request",
            "WARC-Record-ID": StatusAndHeadersParser.make_warc_id(),
            "WARC-Date": warc_date,
            "WARC-Target-URI": capture.url,
            "WARC-Concurrent-To": concurrent_to,
        },
    )


def write_capture(
    sink: RecordSink, prepared: PreparedCapture, warc_date: str, original: IndexRow | None
) -> IndexRow:
    """Write the capture's records into ``sink``; return the index row of the first one.

    ``original`` (a full record) makes the first record a revisit of it.
    The sink is drained before returning; any exception leaves bytes the
    caller must truncate away.
    """
    capture = prepared.capture
    writer = WARCWriter(sink, gzip=True, warc_version="1.1")
    record_id = StatusAndHeadersParser.make_warc_id()
    base = {
        "WARC-Record-ID": record_id,
        "WARC-Date": warc_date,
        "WARC-Target-URI": capture.url,
    }
    if capture.ip_address:
        base["WARC-IP-Address"] = capture.ip_address
    if original is not None:
        record = writer.create_revisit_record(
            capture.url,
            digest=prepared.payload_digest,
            refers_to_uri=original.url,
            refers_to_date=original.warc_date,
            http_headers=prepared.http,
            warc_headers_dict={
                "WARC-Type": "revisit",
                **base,
                "WARC-Refers-To": original.record_id,
                "WARC-Truncated": "length",
            },
        )
    else:
        prepared.payload.seek(0)
        record = writer.create_warc_record(
            capture.url,
            "response",
            payload=prepared.payload,
            length=prepared.length,
            http_headers=prepared.http,
            warc_headers_dict={
                "WARC-Type": "response",
                **base,
                "WARC-Payload-Digest": prepared.payload_digest,
                "WARC-Block-Digest": prepared.block_digest,
            },
        )
    start = sink.position
    writer.write_record(record)
    end = sink.position
    writer.write_record(_request_record(writer, capture, warc_date, record_id))
    sink.drain()
    rec_type = "revisit" if original is not None else "response"
    return IndexRow(
        urlkey=prepared.urlkey,
        timestamp=iso_date_to_timestamp(warc_date),
        rec_type=rec_type,
        url=capture.url,
        mime=mime_of(rec_type, prepared.http.get_header("Content-Type"), None),
        status=str(capture.response.status),
        digest=prepared.payload_digest,
        offset=start,
        length=end - start,
        warc_date=warc_date,
        record_id=record_id,
        extra=prepared.extra,
    )
