"""CaptureQuery: the Index and Resource API parameters, parsed and validated once.

Parameter semantics follow pywb's warcserver (``CDXQuery`` and
``calc_search_range``): ``url`` with ``*.host`` and ``prefix*`` wildcards,
``matchType`` exact|prefix|host|domain, ``closest`` (1 to 14 digits or
``now``), ``from``/``to`` padded to 14 digits down and up, ``limit``,
``sort=closest|reverse``, repeatable ``filter`` in pywb syntax
``[!][=|~]field:value``, ``fl``/``fields``, ``output``, ``allowFuzzy``
(pywb's boolean: empty, 0, false, f and off turn fuzzy matching off),
``resolveRevisits`` (the same boolean, default off) and ``collapseTime``.

Every problem raises :class:`~gateway.errors.BadRequest` naming the parameter.
The ``url`` is validated and normalised here, once
(:func:`~gateway.cdx.hosts.normalize_url`: its host in IDNA/UTS #46 ASCII
form): the query holds the normalised URL, and every source, loader and
link sees only it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

from warcio.timeutils import datetime_to_timestamp, timestamp_to_datetime

from gateway.cdx.cdxj import FIELD_ALIASES, CdxRecord, canonical_urlkey
from gateway.cdx.client_regex import ClientRegex, check_filter_count, compile_client_regex
from gateway.cdx.hosts import normalize_url
from gateway.errors import BadRequest

__all__ = [
    "MATCH_TYPES",
    "MAX_INT",
    "OUTPUTS",
    "TIMESTAMP_DIGITS",
    "CaptureQuery",
    "CdxFilter",
    "MatchType",
    "Output",
    "RecordFilter",
    "checked_url_range",
    "closest_timestamp",
    "key_range",
    "pad_timestamp",
    "parse_int",
    "parse_query",
]

MatchType = Literal["exact", "prefix", "host", "domain"]
Output = Literal["cdxj", "json", "text", "link"]
Sort = Literal["ascending", "closest", "reverse"]

MATCH_TYPES: Final[tuple[MatchType, ...]] = ("exact", "prefix", "host", "domain")
OUTPUTS: Final[tuple[Output, ...]] = ("cdxj", "json", "text", "link")

#: pywb's default limit when none is given (``CDXQuery.limit``).
DEFAULT_LIMIT: Final = 100_000

#: The largest integer a parameter may hold: a signed 64-bit integer, as the
#: IA CDX server's Java ``long`` (past it: a 400, never an overflow).
MAX_INT: Final = 2**63 - 1

_PAD_DOWN: Final = "10000101000000"
_PAD_UP: Final = "29991231235959"
#: 1 to 14 ASCII digits (``\d`` would take other scripts' digits, ``٢٠١٤``).
TIMESTAMP_DIGITS: Final = re.compile(r"[0-9]{1,14}")
_INTEGER: Final = re.compile(r"[+-]?[0-9]{1,20}")


def pad_timestamp(ts: str, up: bool) -> str:
    """Pad a 1-14 digit timestamp to 14 digits (warcio ``PAD_14_DOWN``/``PAD_14_UP``).

    >>> pad_timestamp("2014", up=False)
    '20140101000000'
    >>> pad_timestamp("2014", up=True)
    '20141231235959'
    """
    pad = _PAD_UP if up else _PAD_DOWN
    return ts + pad[len(ts) :] if len(ts) < 14 else ts[:14]


def closest_timestamp(ts: str) -> str:
    """A 1-14 digit ``closest`` as the 14-digit time pywb measures distances from.

    warcio's ``timestamp_to_datetime`` (what pywb's ``cdx_sort_closest``
    calls): a shorter timestamp stands for the *end* of the period it names,
    and out-of-range parts are clamped.

    >>> closest_timestamp("2014")
    '20141231235959'
    >>> closest_timestamp("201402")
    '20140228235959'
    >>> closest_timestamp("20140126200624")
    '20140126200624'
    """
    return str(datetime_to_timestamp(timestamp_to_datetime(ts)))


def parse_int(name: str, text: str, *, minimum: int | None = None) -> int:
    """``text`` as an integer of ASCII digits (an optional sign) within 64 bits.

    Raises :class:`BadRequest` naming ``name`` when ``text`` is not one, is
    past :data:`MAX_INT` (or below ``-MAX_INT``), or is below ``minimum``.

    >>> parse_int("limit", "10")
    10
    >>> parse_int("limit", "9223372036854775808")
    Traceback (most recent call last):
    gateway.errors.BadRequest: limit: 9223372036854775808 is too large; at most 9223372036854775807
    >>> parse_int("limit", "١٢")
    Traceback (most recent call last):
    gateway.errors.BadRequest: limit: '١٢' is not an integer; expected ASCII digits
    """
    if not _INTEGER.fullmatch(text):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise BadRequest(name, f"{shown!r} is not an integer; expected ASCII digits")
    value = int(text)
    if abs(value) > MAX_INT:
        raise BadRequest(name, f"{value} is too large; at most {MAX_INT}")
    if minimum is not None and value < minimum:
        raise BadRequest(name, f"{value} is less than {minimum}")
    return value


def now_timestamp() -> str:
    """The current UTC time as a 14-digit timestamp."""
    return datetime.now(UTC).strftime("%Y%m%d%H%M%S")


def key_range(url: str, match_type: MatchType, *, check: bool = True) -> tuple[str, str]:
    """The urlkey range ``[start, end)`` a query covers (pywb ``calc_search_range``).

    >>> key_range("http://example.com/path/file.html", "exact")
    ('com,example)/path/file.html', 'com,example)/path/file.html!')
    >>> key_range("http://example.com/path/", "prefix")
    ('com,example)/path/', 'com,example)/path0')
    >>> key_range("http://example.com/path/file.html", "host")
    ('com,example)/', 'com,example*')
    >>> key_range("http://example.com/path/file.html", "domain")
    ('com,example)/', 'com,example-')
    >>> key_range("com", "domain")
    ('com,', 'com-')

    Raises :class:`ValueError` when ``url`` cannot be parsed
    (:func:`~gateway.cdx.hosts.normalize_url`, unless ``check`` is false: a
    URL read from an archived record, or one normalised already, is looked
    up as it is) or canonicalized. The key is that of the normalised URL.
    """
    if check:
        url = normalize_url(url)
    start = canonical_urlkey(url)
    if match_type == "exact":
        return start, start + "!"
    if match_type == "prefix":
        if url.endswith("/") and not start.endswith("/"):
            start += "/"
        if url.endswith("?") and not start.endswith("?"):
            start += "?"
        return start, start[:-1] + chr(ord(start[-1]) + 1)
    host = start.split(")/")[0]
    if match_type == "host":
        return host + ")/", host + "*"
    # domain
    return (host + "," if "," not in host else host + ")/"), host + "-"


class RecordFilter(Protocol):
    """A capture predicate the engine applies before the time range and limit.

    :class:`CdxFilter` (pywb syntax) or the IA dialect's
    :class:`~gateway.cdx.ia_query.IaFilter`.
    """

    def __call__(self, record: CdxRecord, /) -> bool: ...


@dataclass(frozen=True, slots=True)
class CdxFilter:
    """One pywb filter: ``[!][=|~]field:value`` (``=`` exact, ``~`` regex, else contains).

    Without ``field:`` the whole CDXJ line is matched. IA filters
    (``[!]field:regex``, matching the whole field) are built by the IA dialect
    with ``mode="regex_full"``.
    """

    field: str
    mode: Literal["exact", "contains", "regex", "regex_full"]
    value: str
    invert: bool
    regex: ClientRegex | None = None

    @classmethod
    def parse(cls, text: str) -> CdxFilter:
        """Parse pywb syntax; raises :class:`BadRequest` on a regex RE2 does not accept
        (regexes are client input: :mod:`gateway.cdx.client_regex`).

        >>> f = CdxFilter.parse("!~mime:text/.*")
        >>> (f.field, f.mode, f.value, f.invert)
        ('mime', 'regex', 'text/.*', True)
        """
        original = text
        invert = text.startswith("!")
        if invert:
            text = text[1:]
        mode: Literal["exact", "contains", "regex"] = "contains"
        if text.startswith("="):
            mode, text = "exact", text[1:]
        elif text.startswith("~"):
            mode, text = "regex", text[1:]
        name, sep, value = text.partition(":")
        if not sep:
            name, value = "", text
        name = FIELD_ALIASES.get(name, name)
        regex = None
        if mode == "regex":
            regex = compile_client_regex(value, filter_text=original)
        return cls(name, mode, value, invert, regex)

    def __call__(self, record: CdxRecord) -> bool:
        """True when ``record`` passes this filter."""
        subject = record.get(self.field) if self.field else record.to_cdxj().rstrip("\n")
        if self.mode == "exact":
            matched = subject == self.value
        elif self.mode == "contains":
            matched = self.value in subject
        elif self.mode == "regex":
            assert self.regex is not None
            matched = self.regex.match(subject)
        else:
            assert self.regex is not None
            matched = self.regex.fullmatch(subject)
        return matched != self.invert


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureQuery:
    """A validated lookup.

    ``key``/``end_key`` bound the urlkey range ``[key, end_key)``; timestamps
    are 14-digit strings; ``limit`` counts output lines; ``sort`` is
    ``ascending`` (by urlkey then timestamp), ``closest`` (by distance to
    ``closest``) or ``reverse``.
    """

    url: str
    match_type: MatchType = "exact"
    key: str
    end_key: str
    closest: str | None = None
    from_ts: str | None = None
    to_ts: str | None = None
    limit: int = DEFAULT_LIMIT
    sort: Sort = "ascending"
    filters: tuple[RecordFilter, ...] = ()
    fields: tuple[str, ...] | None = None
    output: Output = "cdxj"
    #: ``sources=a,b`` selects group members, ``sources=!a`` excludes them.
    sources: tuple[str, ...] = ()
    exclude_sources: bool = False
    #: Extra parameters passed to remote sources untouched (e.g. the method key).
    extra: Mapping[str, str] = field(default_factory=dict)
    #: An empty exact answer may be widened by fuzzy matching (``allowFuzzy``,
    #: on for API requests; lookups built in code never are).
    allow_fuzzy: bool = False
    #: This lookup is a widened one (:mod:`gateway.index.fuzzy`): sources that cannot
    #: widen a lookup (Memento, live) answer it with nothing, as pywb's do.
    fuzzy: bool = False
    #: ``resolveRevisits``: revisit lines get their original's ``mime`` and
    #: ``status`` and ``orig.length``/``orig.offset``/``orig.filename``
    #: (pywb ``cdx_resolve_revisits``).
    resolve_revisits: bool = False
    #: ``collapseTime=N``: of adjacent lines with the same first N timestamp
    #: digits and status, only the first (pywb ``cdx_collapse_time_status``).
    collapse_time: int | None = None

    @classmethod
    def for_url(
        cls,
        url: str,
        *,
        match_type: MatchType = "exact",
        closest: str | None = None,
        filters: Sequence[CdxFilter] = (),
        limit: int = DEFAULT_LIMIT,
        check: bool = True,
    ) -> CaptureQuery:
        """Build a query from code (e.g. revisit resolution); raises ValueError on a bad URL.

        With ``check`` (the default) ``url`` is validated and normalised
        (:func:`~gateway.cdx.hosts.normalize_url`: the query holds the
        normalised URL); without, it is taken as it is (a URL read from an
        archived record, or one normalised at the edge already).
        """
        if check:
            url = normalize_url(url)
        key, end_key = key_range(url, match_type, check=False)
        return cls(
            url=url,
            match_type=match_type,
            key=key,
            end_key=end_key,
            closest=closest,
            sort="closest" if closest else "ascending",
            filters=tuple(filters),
            limit=limit,
        )

    def evolve(self, **changes: object) -> CaptureQuery:
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _flag(params: Mapping[str, Sequence[str]], name: str, *, default: bool) -> bool:
    """pywb ``to_bool``: absent is ``default``; empty, 0, false, f and off are false."""
    text = _one(params, name)
    if text is None:
        return default
    return text.lower() not in ("", "0", "false", "f", "off")


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(name, "given more than once; expected a single value")
    return values[0]


def _timestamp(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    value = _one(params, name)
    if value is None or value == "":
        return None
    if not TIMESTAMP_DIGITS.fullmatch(value):
        raise BadRequest(name, f"{_shown(value)} is not a timestamp; expected 1 to 14 digits")
    return value


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to 40 characters (never echo input at length)."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


def parse_query(params: Mapping[str, Sequence[str]], *, url: str | None = None) -> CaptureQuery:
    """Validate Index/Resource API parameters into a :class:`CaptureQuery`.

    ``params`` maps each name to all its values (e.g. from
    ``MultiDict.getall``). ``url`` overrides the ``url`` parameter (post-request
    routes). Raises :class:`BadRequest` naming the parameter on any problem.
    """
    url, match_type, key, end_key = _url_range(params, url)
    closest = _closest(params)
    from_ts, to_ts = _from_to(params)
    limit = _limit(params)
    sort = _sort(params, closest)
    filters = _filters(params)
    fields = _fields(params)
    output = _output(params)
    sources, exclude = _sources(params)
    return CaptureQuery(
        url=url,
        match_type=match_type,
        key=key,
        end_key=end_key,
        closest=closest,
        from_ts=from_ts,
        to_ts=to_ts,
        limit=limit,
        sort=sort,
        filters=filters,
        fields=fields,
        output=output,
        sources=sources,
        exclude_sources=exclude,
        allow_fuzzy=_flag(params, "allowFuzzy", default=True),
        resolve_revisits=_flag(params, "resolveRevisits", default=False),
        collapse_time=_collapse_time(params),
    )


def _url_range(
    params: Mapping[str, Sequence[str]], url: str | None
) -> tuple[str, MatchType, str, str]:
    """``url`` and ``matchType`` (wildcards resolved) and the key range they span."""
    if url is None:
        url = _one(params, "url")
    if not url:
        raise BadRequest("url", "missing; the url parameter is required")

    match_type_text = _one(params, "matchType")
    if match_type_text is None:
        if url.startswith("*."):
            url, match_type_text = url[2:], "domain"
        elif url.endswith("*"):
            url, match_type_text = url[:-1], "prefix"
        else:
            match_type_text = "exact"
    if match_type_text not in MATCH_TYPES:
        raise BadRequest("matchType", f"{match_type_text!r} is not one of {', '.join(MATCH_TYPES)}")
    match_type: MatchType = match_type_text
    if not url:
        raise BadRequest("url", "empty after removing the wildcard")
    url, key, end_key = checked_url_range(url, match_type)
    return url, match_type, key, end_key


def checked_url_range(url: str, match_type: MatchType) -> tuple[str, str, str]:
    """``(url, key, end_key)``: ``url`` validated and normalised once
    (:func:`gateway.cdx.hosts.normalize_url`) and the urlkey range it spans for
    ``match_type`` (:func:`key_range`), for both dialects. Raises
    :class:`BadRequest` naming ``url``."""
    try:
        url = normalize_url(url)
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc
    if not url:
        raise BadRequest("url", "empty; the url parameter is required")
    try:
        key, end_key = key_range(url, match_type, check=False)
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc
    return url, key, end_key


def _closest(params: Mapping[str, Sequence[str]]) -> str | None:
    """``closest``: ``now`` or 1 to 14 digits, as a 14-digit timestamp."""
    closest = _one(params, "closest")
    if closest == "now":
        closest = now_timestamp()
    elif closest is not None:
        if not TIMESTAMP_DIGITS.fullmatch(closest):
            raise BadRequest(
                "closest", f"{_shown(closest)} is not a timestamp; expected 1 to 14 digits or 'now'"
            )
        closest = closest_timestamp(closest)
    return closest


def _from_to(params: Mapping[str, Sequence[str]]) -> tuple[str | None, str | None]:
    """``from`` padded down and ``to`` padded up to 14 digits."""
    from_ts = _timestamp(params, "from")
    to_ts = _timestamp(params, "to")
    if from_ts:
        from_ts = pad_timestamp(from_ts, up=False)
    if to_ts:
        to_ts = pad_timestamp(to_ts, up=True)
    return from_ts, to_ts


def _limit(params: Mapping[str, Sequence[str]]) -> int:
    """``limit``: 0 or more, :data:`DEFAULT_LIMIT` when absent."""
    limit = DEFAULT_LIMIT
    limit_text = _one(params, "limit")
    if limit_text is not None:
        limit = parse_int("limit", limit_text)
        if limit < 0:
            raise BadRequest("limit", f"{limit} is negative; expected 0 or more")
    return limit


def _sort(params: Mapping[str, Sequence[str]], closest: str | None) -> Sort:
    """``sort`` (and pywb's ``reverse``): closest when ``closest`` is given."""
    sort_text = _one(params, "sort")
    reverse = (_one(params, "reverse") or "").lower() in ("1", "true")
    sort: Sort
    if closest:
        sort = "closest"
    elif sort_text == "reverse" or (reverse and not sort_text):
        sort = "reverse"
    elif sort_text in (None, "", "asc", "ascending"):
        sort = "ascending"
    elif sort_text == "closest":
        raise BadRequest("sort", "sort=closest needs a closest= timestamp")
    else:
        raise BadRequest("sort", f"{sort_text!r} is not one of closest, reverse")
    return sort


def _filters(params: Mapping[str, Sequence[str]]) -> tuple[CdxFilter, ...]:
    """The non-empty ``filter`` values, parsed (their number checked first)."""
    filter_texts = [text for text in params.get("filter", ()) if text]
    check_filter_count(len(filter_texts))
    return tuple(CdxFilter.parse(text) for text in filter_texts)


def _fields(params: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    """``fields`` (else ``fl``): the output fields, None for all."""
    fl = _one(params, "fields") or _one(params, "fl")
    return tuple(name.strip() for name in fl.split(",") if name.strip()) if fl else None


def _output(params: Mapping[str, Sequence[str]]) -> Output:
    """``output``: one of :data:`OUTPUTS`, cdxj when absent."""
    output_text = _one(params, "output") or "cdxj"
    if output_text not in OUTPUTS:
        raise BadRequest("output", f"{output_text!r} is not one of {', '.join(OUTPUTS)}")
    output: Output = output_text
    return output


def _sources(params: Mapping[str, Sequence[str]]) -> tuple[tuple[str, ...], bool]:
    """``sources``: the members named and whether they are excluded (``!a,b``)."""
    sources: tuple[str, ...] = ()
    exclude = False
    sources_text = _one(params, "sources")
    if sources_text and sources_text != "*":
        exclude = sources_text.startswith("!")
        sources = tuple(s for s in sources_text.lstrip("!").split(",") if s)
    return sources, exclude


def _collapse_time(params: Mapping[str, Sequence[str]]) -> int | None:
    text = _one(params, "collapseTime")
    if not text:
        return None
    return parse_int("collapseTime", text, minimum=0)
