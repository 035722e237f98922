"""RFC 7089 / RFC 8288 helpers: datetime conversions and Link values.

Timestamps inside the gateway are 14-digit UTC strings (``YYYYMMDDhhmmss``);
HTTP dates (RFC 7231 IMF-fixdate, as RFC 7089 §2.1.1 requires for
Accept-Datetime and Memento-Datetime) appear only at the edge.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

__all__ = [
    "http_date_to_timestamp",
    "iso_to_timestamp",
    "link_value",
    "timestamp_to_http_date",
    "timestamp_to_iso",
]


def timestamp_to_http_date(ts: str) -> str:
    """14-digit timestamp -> RFC 7231 HTTP date.

    >>> timestamp_to_http_date("20140126200624")
    'Sun, 26 Jan 2014 20:06:24 GMT'
    """
    dt = datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return format_datetime(dt, usegmt=True)


def timestamp_to_iso(ts: str) -> str:
    """14-digit timestamp -> WARC-Date (ISO 8601, UTC, second precision).

    >>> timestamp_to_iso("20140126200624")
    '2014-01-26T20:06:24Z'
    """
    return f"{ts[0:4]}-{ts[4:6]}-{ts[6:8]}T{ts[8:10]}:{ts[10:12]}:{ts[12:14]}Z"


def iso_to_timestamp(iso: str) -> str:
    """WARC-Date (``2014-01-26T20:06:24Z``, fractions allowed) -> 14-digit timestamp.

    >>> iso_to_timestamp("2014-01-26T20:06:24.123456Z")
    '20140126200624'

    Raises ValueError when the value has fewer than 14 digits.
    """
    digits = "".join(ch for ch in iso.split(".")[0] if ch.isdigit())
    if len(digits) < 14:
        raise ValueError(f"not a WARC-Date: {iso!r}")
    return digits[:14]


def http_date_to_timestamp(value: str) -> str:
    """RFC 7231 HTTP date -> 14-digit timestamp; raises ValueError when malformed.

    >>> http_date_to_timestamp("Sun, 26 Jan 2014 20:06:24 GMT")
    '20140126200624'
    """
    try:
        dt = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not an HTTP date: {value!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y%m%d%H%M%S")


def link_value(url: str, rel: str, **params: str) -> str:
    """One RFC 8288 link-value: ``<url>; rel="rel"; key="value"...``.

    >>> link_value("http://example.com/", "original")
    '<http://example.com/>; rel="original"'
    """
    parts = [f"<{url}>", f'rel="{rel}"']
    parts.extend(f'{key}="{value}"' for key, value in params.items())
    return "; ".join(parts)
