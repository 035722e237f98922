"""RFC 7089 / RFC 8288 helpers: datetime conversions and Link values.

Timestamps inside the gateway are 14-digit UTC strings (``YYYYMMDDhhmmss``);
HTTP dates (RFC 7231 IMF-fixdate, as RFC 7089 §2.1.1 requires for
Accept-Datetime and Memento-Datetime) appear only at the edge.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote

__all__ = [
    "LINK_FORMAT",
    "Link",
    "MementoRef",
    "TimeMapPage",
    "http_date_to_timestamp",
    "iso_to_timestamp",
    "link_uri",
    "link_value",
    "memento_links",
    "parse_link_format",
    "parse_link_header",
    "retry_after_seconds",
    "timemap_json",
    "timemap_link_format",
    "timemap_link_value",
    "timestamp_to_http_date",
    "timestamp_to_iso",
]


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_ISO_SEPARATORS = ("-", "-", "T", ":", ":")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@functools.lru_cache(maxsize=4096)
def timestamp_to_http_date(ts: str) -> str:
    """14-digit timestamp -> RFC 7231 HTTP date (IMF-fixdate).

    Parsed as ``datetime.strptime(ts[:14], "%Y%m%d%H%M%S")`` would (which also
    takes some shorter, odd forms) and formatted as
    ``email.utils.format_datetime(dt, usegmt=True)`` would; results are cached
    (one call per served record). Raises ValueError when ``ts`` is no date.

    >>> timestamp_to_http_date("20140126200624")
    'Sun, 26 Jan 2014 20:06:24 GMT'
    >>> timestamp_to_http_date("20000229235959999")
    'Tue, 29 Feb 2000 23:59:59 GMT'
    >>> timestamp_to_http_date("20140230000000")
    Traceback (most recent call last):
    ...
    ValueError: day is out of range for month
    """
    digits = ts[:14]
    dt: datetime | None = None
    if len(digits) == 14 and digits.isascii() and digits.isdigit():
        # The common case, without _strptime: with every field two digits and in
        # range, strptime's regex takes exactly this split.
        try:
            dt = datetime(
                int(digits[0:4]),
                int(digits[4:6]),
                int(digits[6:8]),
                int(digits[8:10]),
                int(digits[10:12]),
                int(digits[12:14]),
            )
        except ValueError:
            dt = None
    if dt is None:
        dt = datetime.strptime(digits, "%Y%m%d%H%M%S")
    return (
        f"{_WEEKDAYS[dt.weekday()]}, {dt.day:02d} {_MONTHS[dt.month - 1]} {dt.year:04d} "
        f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d} GMT"
    )


def timestamp_to_iso(ts: str) -> str:
    """14-digit timestamp -> WARC-Date (ISO 8601, UTC, second precision).

    >>> timestamp_to_iso("20140126200624")
    '2014-01-26T20:06:24Z'
    """
    return f"{ts[0:4]}-{ts[4:6]}-{ts[6:8]}T{ts[8:10]}:{ts[10:12]}:{ts[12:14]}Z"


def iso_to_timestamp(iso: str) -> str:
    """WARC-Date (``2014-01-26T20:06:24Z``, fractions allowed) -> 14-digit timestamp.

    The digits before any ``.``, the first 14 of them (a value in the usual
    ``YYYY-MM-DDThh:mm:ss`` form is sliced directly).

    >>> iso_to_timestamp("2014-01-26T20:06:24.123456Z")
    '20140126200624'
    >>> iso_to_timestamp("2014-01-26 20:06:24")
    '20140126200624'

    Raises ValueError when the value has fewer than 14 digits.
    """
    if len(iso) >= 19 and (iso[4], iso[7], iso[10], iso[13], iso[16]) == _ISO_SEPARATORS:
        digits = iso[0:4] + iso[5:7] + iso[8:10] + iso[11:13] + iso[14:16] + iso[17:19]
        if digits.isascii() and digits.isdigit():
            return digits
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


# --------------------------------------------------------------------------- RFC 8288 parsing
#: RFC 9110 ``tchar``: the characters of a parameter name.
_TOKEN_CHARS = r"!#$%&'*+\-.^_`|~0-9A-Za-z"
#: Whitespace and empty list elements before a link-value (RFC 9110 §5.6.1 ``#rule``).
_LINK_START = re.compile(r"[\s,]*")
#: ``< URI-Reference >``; the reference may hold ``,`` and ``;`` but not ``>``.
_LINK_TARGET = re.compile(r"<([^>]*)>")
_NAME = r"[" + _TOKEN_CHARS + r"]+"
#: A bare (token) value never starts with ``"``: an unterminated quoted string
#: is an error, not a token.
_BARE = r'[^\s,;"][^\s,;]*'
#: ``OWS ; OWS name BWS [ = BWS ( quoted-string / token ) ]``. Groups: name,
#: quoted value (escapes still in), bare value.
_LINK_PARAM = re.compile(
    rf'\s*;\s*({_NAME})\s*(?:=\s*(?:"((?:[^"\\]|\\.)*)"|({_BARE})?))?', re.DOTALL
)
#: A whole well-formed link-value and the separator after it, in one match
#: (the common case; anything else goes through the step-by-step parser).
_FAST_LINK = re.compile(
    rf'<([^>]*)>((?:\s*;\s*{_NAME}\s*(?:=\s*(?:"(?:[^"\\]|\\.)*"|(?:{_BARE})?))?)*)\s*(?:,|$)',
    re.DOTALL,
)
#: A ``;`` followed by nothing, another ``;`` or the end of the link.
_EMPTY_PARAM = re.compile(r"\s*;(?=\s*(?:[;,]|$))")
_LINK_END = re.compile(r"\s*(?:,|$)")
_QUOTED_PAIR = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Link:
    """One RFC 8288 link-value.

    ``url`` is the target URI-Reference as written (not resolved against a
    base); ``rels`` are the space-separated relation types of the first
    ``rel`` parameter, lower-cased unless they are extension URIs (RFC 8288
    §2.1: registered types compare case-insensitively); ``params`` maps every
    other parameter name (lower-cased) to its value with quoted-string escapes
    removed, the first occurrence winning (RFC 8288 §3). A parameter without
    ``=`` has the value ``""``.
    """

    url: str
    rels: tuple[str, ...] = ()
    params: dict[str, str] = field(default_factory=dict, hash=False)

    def has_rel(self, rel: str) -> bool:
        """True when ``rel`` (lower-case) is one of the link's relation types.

        >>> parse_link_header('<http://a/>; rel="first memento"')[0].has_rel("memento")
        True
        """
        return rel in self.rels


def _excerpt(text: str, pos: int) -> str:
    return repr(text[max(0, pos - 20) : pos + 40])


def _parse_links(text: str, what: str) -> list[Link]:
    """The tokenizer behind :func:`parse_link_header` and :func:`parse_link_format`."""
    links: list[Link] = []
    size = len(text)
    pos = _skip_separators(text, 0)
    while pos < size:
        fast = _FAST_LINK.match(text, pos)
        if fast is not None:
            links.append(_make_link(fast.group(1), _LINK_PARAM.finditer(fast.group(2))))
            pos = _skip_separators(text, fast.end())
            continue
        target = _LINK_TARGET.match(text, pos)
        if target is None:
            if text[pos] == "<":
                raise ValueError(f"{what}: unterminated '<' at offset {pos}: {_excerpt(text, pos)}")
            raise ValueError(
                f"{what}: expected '<' starting a link at offset {pos}, "
                f"found {text[pos]!r}: {_excerpt(text, pos)}"
            )
        url = target.group(1)
        pos = target.end()
        matches: list[re.Match[str]] = []
        while True:
            param = _LINK_PARAM.match(text, pos)
            if param is None:
                end = _LINK_END.match(text, pos)
                if end is not None:
                    pos = end.end()
                    break
                empty = _EMPTY_PARAM.match(text, pos)
                if empty is None:
                    raise ValueError(_param_problem(text, pos, url.strip(), what))
                pos = empty.end()  # "<a>;;rel=x" or "<a>;": tolerated
                continue
            matches.append(param)
            pos = param.end()
        links.append(_make_link(url, matches))
        pos = _skip_separators(text, pos)
    return links


def _make_link(url: str, params: Iterable[re.Match[str]]) -> Link:
    """A Link from its target and its ``_LINK_PARAM`` matches, in order."""
    rels: tuple[str, ...] | None = None
    values: dict[str, str] = {}
    for param in params:
        name, quoted, bare = param.groups()
        name = name.lower()
        if quoted is None:
            value = bare or ""
        else:
            value = _QUOTED_PAIR.sub(r"\1", quoted) if "\\" in quoted else quoted
        if name != "rel":
            values.setdefault(name, value)
        elif rels is None:
            rels = tuple(r if ":" in r else r.lower() for r in value.split())
    return Link(url.strip(), rels or (), values)


def _skip_separators(text: str, pos: int) -> int:
    match = _LINK_START.match(text, pos)
    return match.end() if match is not None else pos


def _param_problem(text: str, pos: int, url: str, what: str) -> str:
    """The message for junk at ``pos`` where ``;``, ``,`` or a parameter was expected."""
    rest = text[pos:].lstrip()
    at = len(text) - len(rest)
    if rest.startswith('"'):
        problem = "unterminated quoted string"
    elif rest.startswith(";"):
        problem = "expected a parameter name after ';'"
    else:
        problem = f"expected ';' or ',' after the link, found {rest[:1]!r}"
    return f"{what}: {problem} in <{url}> at offset {at}: {_excerpt(text, at)}"


def parse_link_header(value: str) -> list[Link]:
    """Parse an HTTP ``Link`` header field value (RFC 8288 §3) into links, in order.

    A real tokenizer: ``,`` and ``;`` inside ``<...>`` or inside a quoted
    string (``\\"`` and ``\\\\`` escapes included) do not split; whitespace,
    newlines and empty list elements between links are tolerated. Several
    ``Link`` header lines are parsed by joining them with ``", "`` first.

    >>> [(l.url, l.rels) for l in parse_link_header(
    ...     '<http://a/x,y;z>; rel="first memento"; datetime="Sun, 26 Jan 2014 20:06:24 GMT", '
    ...     '<http://a/>; rel=original')]
    [('http://a/x,y;z', ('first', 'memento')), ('http://a/', ('original',))]
    >>> parse_link_header('<http://a/>; title="say \\\\"hi\\\\", then; go"')[0].params
    {'title': 'say "hi", then; go'}
    >>> parse_link_header("")
    []

    Raises :class:`ValueError` naming the offset when the value is not a
    ``#link-value`` list (no ``<``, unterminated ``<`` or quoted string,
    junk between parameters).
    """
    return _parse_links(value, "Link header")


def parse_link_format(body: str) -> list[Link]:
    """Parse an ``application/link-format`` body (RFC 6690 §2), e.g. a TimeMap.

    Same grammar as :func:`parse_link_header` (RFC 7089 §5 TimeMaps use the
    RFC 6690 serialisation, links separated by ``",\\n"``); a leading byte
    order mark and a trailing comma are tolerated.

    >>> body = '''<http://a/>; rel="original",
    ... <http://arc/20140126200624/http://a/>; rel="memento";
    ...   datetime="Sun, 26 Jan 2014 20:06:24 GMT",
    ... '''
    >>> memento = parse_link_format(body)[1]
    >>> memento.url, memento.rels
    ('http://arc/20140126200624/http://a/', ('memento',))
    >>> memento.params
    {'datetime': 'Sun, 26 Jan 2014 20:06:24 GMT'}

    Raises :class:`ValueError` naming the offset when the body is not link-format.
    """
    return _parse_links(body.removeprefix("\ufeff"), "link-format body")


# ------------------------------------------------------------ RFC 7089 links and TimeMaps
#: Media type of link-format TimeMaps (RFC 7089 §5, RFC 6690).
LINK_FORMAT = "application/link-format"

#: Navigation relation types, in the order they precede ``memento`` in a
#: combined ``rel`` (``rel="first prev memento"``, RFC 7089 §2.2.4).
_NAV_RELS = ("first", "last", "prev", "next")
#: Kept as they are inside ``<...>``: RFC 3986 reserved characters and ``%``
#: (letters, digits and ``-._~`` are always kept by ``quote``).
_URI_SAFE = "!#$%&'()*+,/:;=?@[]"


def link_uri(url: str) -> str:
    """``url`` made safe between ``<`` and ``>`` of a link-value (RFC 8288 §3).

    Characters outside RFC 3986 (spaces, ``<``, ``>``, ``"``, non-ASCII) are
    percent-encoded as UTF-8; existing ``%XX`` escapes are kept.

    >>> link_uri('http://a/b c>"é?q=1&r=%2F')
    'http://a/b%20c%3E%22%C3%A9?q=1&r=%2F'
    """
    return quote(url, safe=_URI_SAFE)


@dataclass(frozen=True, slots=True)
class MementoRef:
    """One memento: its 14-digit UTC ``timestamp`` and its URI-M."""

    timestamp: str
    uri: str


@dataclass(frozen=True, slots=True)
class TimeMapPage:
    """A TimeMap or one page of one: its URI and the 14-digit timestamps of
    its first (``from_ts``) and last (``until_ts``) mementos."""

    uri: str
    from_ts: str
    until_ts: str


def memento_links(
    navigation: Mapping[str, MementoRef | None], selected: MementoRef | None = None
) -> list[str]:
    """Link values for a memento and its neighbours (RFC 7089 §2.2.4).

    ``navigation`` maps ``first``, ``last``, ``prev`` and ``next`` to
    mementos (None or absent: no such link); ``selected`` is the memento the
    response is about (the TimeGate's choice, or the memento itself). One
    link-value per URI-M, in ascending datetime order, its relation types
    combined as in RFC 7089's examples (``first``, ``last``, ``prev``,
    ``next``, then ``memento``), each with its ``datetime``:

    >>> a = MementoRef("20140126200625", "http://gw/m1")
    >>> b = MementoRef("20140126200653", "http://gw/m2")
    >>> for value in memento_links({"first": a, "prev": a, "last": b}, selected=b):
    ...     print(value)
    <http://gw/m1>; rel="first prev memento"; datetime="Sun, 26 Jan 2014 20:06:25 GMT"
    <http://gw/m2>; rel="last memento"; datetime="Sun, 26 Jan 2014 20:06:53 GMT"

    Raises :class:`ValueError` for a key other than the four above.
    """
    unknown = set(navigation) - set(_NAV_RELS)
    if unknown:
        raise ValueError(f"unknown navigation relation {sorted(unknown)[0]!r}")
    rels: dict[MementoRef, list[str]] = {}
    for rel in _NAV_RELS:
        memento = navigation.get(rel)
        if memento is not None:
            rels.setdefault(memento, []).append(rel)
    if selected is not None:
        rels.setdefault(selected, [])
    return [
        link_value(
            link_uri(memento.uri),
            " ".join([*tokens, "memento"]),
            datetime=timestamp_to_http_date(memento.timestamp),
        )
        for memento, tokens in sorted(rels.items(), key=lambda item: item[0].timestamp)
    ]


def timemap_link_value(page: TimeMapPage, rel: str, media_type: str = LINK_FORMAT) -> str:
    """A link to a TimeMap (page) with its ``type`` and ``from``/``until`` (RFC 7089 §5).

    >>> page = TimeMapPage("http://gw/tm", "20140126200625", "20140126200653")
    >>> print(timemap_link_value(page, "self").replace("; ", ";\\n "))
    <http://gw/tm>;
     rel="self";
     type="application/link-format";
     from="Sun, 26 Jan 2014 20:06:25 GMT";
     until="Sun, 26 Jan 2014 20:06:53 GMT"
    """
    return link_value(
        link_uri(page.uri),
        rel,
        type=media_type,
        **{
            "from": timestamp_to_http_date(page.from_ts),
            "until": timestamp_to_http_date(page.until_ts),
        },
    )


def timemap_link_format(
    *,
    original: str,
    timegate: str,
    page: TimeMapPage,
    mementos: Sequence[MementoRef],
    first_ts: str,
    last_ts: str,
    pages: Mapping[str, TimeMapPage],
) -> str:
    """An ``application/link-format`` TimeMap (RFC 7089 §5.1, RFC 6690).

    Links in this order, separated by ``",\\n"``, the last ending in ``"\\n"``:
    ``original``; ``self`` (``page``, typed, with ``from``/``until``);
    ``timegate``; the other pages as ``prev timemap`` / ``next timemap``
    (``pages`` maps ``prev``/``next`` to them; typed, with ``from``/``until``);
    then one ``memento`` link per entry of ``mementos`` (ascending), the
    mementos at ``first_ts`` and ``last_ts`` of the whole TimeMap marked
    ``first``/``last``.

    >>> ts = "20140126200625"
    >>> print(timemap_link_format(  # doctest: +NORMALIZE_WHITESPACE
    ...     original="http://a/", timegate="http://gw/tg", page=TimeMapPage("http://gw/tm", ts, ts),
    ...     mementos=[MementoRef(ts, "http://gw/m1")], first_ts=ts, last_ts=ts, pages={},
    ... ), end="")
    <http://a/>; rel="original",
    <http://gw/tm>; rel="self"; type="application/link-format";
        from="Sun, 26 Jan 2014 20:06:25 GMT"; until="Sun, 26 Jan 2014 20:06:25 GMT",
    <http://gw/tg>; rel="timegate",
    <http://gw/m1>; rel="first last memento"; datetime="Sun, 26 Jan 2014 20:06:25 GMT"
    """
    lines = [
        link_value(link_uri(original), "original"),
        timemap_link_value(page, "self"),
        link_value(link_uri(timegate), "timegate"),
    ]
    lines.extend(timemap_link_value(other, f"{rel} timemap") for rel, other in pages.items())
    for memento in mementos:
        tokens = [
            rel for rel, ts in (("first", first_ts), ("last", last_ts)) if memento.timestamp == ts
        ]
        lines.append(
            link_value(
                link_uri(memento.uri),
                " ".join([*tokens, "memento"]),
                datetime=timestamp_to_http_date(memento.timestamp),
            )
        )
    return ",\n".join(lines) + "\n"


def _json_memento(memento: MementoRef) -> dict[str, str]:
    return {"datetime": timestamp_to_iso(memento.timestamp), "uri": memento.uri}


def timemap_json(
    *,
    original: str,
    timegate: str,
    timemaps: Mapping[str, str],
    mementos: Sequence[MementoRef],
    first: MementoRef,
    last: MementoRef,
    pages: Mapping[str, TimeMapPage],
) -> dict[str, object]:
    """A JSON TimeMap in the mementoweb.org format (``guide/timemap-json``).

    Shape: ``{"original_uri", "timegate_uri", "timemap_uri": timemaps (e.g.
    ``{"link_format": ..., "json_format": ..., "cdxj_format": ...}``),
    "mementos": {"first", "last", "list": [{"datetime", "uri"}...]},
    "pages": {"prev"|"next": {"uri", "from", "until"}}}``; datetimes are ISO
    8601 UTC (``2014-01-26T20:06:25Z``), ``list`` ascending. ``first`` and
    ``last`` are those of the whole TimeMap, also when ``mementos`` is one
    page of it; ``pages`` is ``{}`` for an unpaged TimeMap.
    """
    return {
        "original_uri": original,
        "timegate_uri": timegate,
        "timemap_uri": dict(timemaps),
        "mementos": {
            "first": _json_memento(first),
            "last": _json_memento(last),
            "list": [_json_memento(memento) for memento in mementos],
        },
        "pages": {
            rel: {
                "uri": page.uri,
                "from": timestamp_to_iso(page.from_ts),
                "until": timestamp_to_iso(page.until_ts),
            }
            for rel, page in pages.items()
        },
    }


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` (RFC 9110 §10.2.3: delta-seconds or an HTTP date) in
    seconds from now; None when absent or malformed.

    >>> retry_after_seconds("120"), retry_after_seconds(None), retry_after_seconds("soon")
    (120.0, None, None)
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
