"""IaQuery: the IA wayback CDX server's parameters (``/{coll}/cdx``), parsed once.

The dialect is the Internet Archive's ``wayback-cdx-server`` (its README,
"Wayback CDX Server API"); the engine is the same as the pywb dialect's
(:mod:`gateway.cdx.query`, :meth:`gateway.index.collection.Collection.lookup`).

Fields have IA names. :data:`IA_FIELDS` is the default output, in order::

    urlkey timestamp original mimetype statuscode digest length

``original``, ``mimetype`` and ``statuscode`` read the CDXJ ``url``, ``mime``
and ``status``; ``digest`` is shown as the IA shows it, bare base32 SHA-1 (a
``sha1:`` prefix written by cdxj-indexer is dropped; other algorithms keep
theirs); a missing value is ``-``. ``redirect``, ``robotflags``, ``offset``
and ``filename`` may be asked for too, and the pywb names (``url``, ``mime``,
``status``, ``u``, ``m``, ``s``, ...) are accepted everywhere a field is.

Parameters (every problem raises :class:`~gateway.errors.BadRequest` naming
the parameter):

- ``url`` (required), ``matchType`` exact|prefix|host|domain; ``url=a.org/*``
  means prefix and ``url=*.a.org`` domain (a wildcard that contradicts an
  explicit ``matchType`` is a 400);
- ``from``, ``to``: 1 to 14 digits, inclusive, padded down and up;
- ``filter=[!][~]field:regex``, repeatable, ANDed: the regex (RE2,
  :mod:`gateway.cdx.client_regex`) must match
  the WHOLE value (Java ``matches``); ``~`` tests "contains" instead, ``!``
  negates; ``field`` may be a name or a 0-based index into :data:`IA_FIELDS`;
  without ``field:`` the regex matches the whole default text line;
- ``collapse=field`` or ``collapse=field:N`` (first N characters), repeatable,
  applied in order over adjacent lines: a line whose value equals the previous
  kept line's is dropped;
- ``fl=a,b``: output fields; ``output=json`` (else text);
- ``limit=N`` first N, ``limit=-N`` last N (at most :data:`MAX_LIMIT`; a
  larger one is cut to it, as the IA's "absolute maximum"); ``offset=M`` skips
  M lines first; ``fastLatest=true`` returns the latest ``|limit|`` (default 1)
  through a reverse index scan;
- ``showResumeKey=true`` and ``resumeKey=`` (see :class:`ResumeKey`);
- ``page``, ``pageSize`` (captures per page, 1 to :data:`MAX_LIMIT`, default
  :data:`DEFAULT_PAGE_SIZE`) and ``showNumPages=true``, on every index;
- ``gzip`` is accepted and ignored (answers are never compressed).

``sort``, ``closest`` and the experimental counters (``showDupeCount``,
``showSkipCount``, ``lastSkipTimestamp``, ``showPagedIndex``) are refused with
a 400 instead of being silently ignored: the pywb dialect at ``/{coll}/index``
has ``closest`` and ``sort``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import quote_plus, unquote_plus

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.client_regex import ClientRegex, check_filter_count, compile_client_regex
from gateway.cdx.query import (
    DEFAULT_LIMIT,
    MATCH_TYPES,
    TIMESTAMP_DIGITS,
    CaptureQuery,
    MatchType,
    checked_url_range,
    parse_int,
)
from gateway.cdx.query import pad_timestamp as _pad
from gateway.errors import BadRequest

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "IA_FIELDS",
    "MAX_LIMIT",
    "Collapse",
    "IaFilter",
    "IaQuery",
    "ResumeKey",
    "ia_line",
    "ia_value",
    "parse_ia_query",
]

#: The IA's public CDX fields, the default output order.
IA_FIELDS: Final[tuple[str, ...]] = (
    "urlkey",
    "timestamp",
    "original",
    "mimetype",
    "statuscode",
    "digest",
    "length",
)
#: Further fields that may be asked for with ``fl``, ``filter`` or ``collapse``.
EXTRA_FIELDS: Final[tuple[str, ...]] = ("redirect", "robotflags", "offset", "filename")
#: Lines per answer at most (pywb's default limit; the IA's is 150000).
MAX_LIMIT: Final = DEFAULT_LIMIT
#: Captures per page when ``pageSize`` is not given (one ZipNum block).
DEFAULT_PAGE_SIZE: Final = 3000

#: Accepted field name -> IA name.
_NAMES: Final[dict[str, str]] = {
    **{name: name for name in (*IA_FIELDS, *EXTRA_FIELDS)},
    "url": "original",
    "u": "original",
    "mime": "mimetype",
    "m": "mimetype",
    "status": "statuscode",
    "s": "statuscode",
    "d": "digest",
    "l": "length",
    "k": "urlkey",
    "t": "timestamp",
    "o": "offset",
    "f": "filename",
}
#: IA name -> CDXJ JSON key (urlkey and timestamp are the record's own).
_CDXJ_KEYS: Final[dict[str, str]] = {
    "original": "url",
    "mimetype": "mime",
    "statuscode": "status",
    "digest": "digest",
    "length": "length",
    "redirect": "redirect",
    "robotflags": "robotflags",
    "offset": "offset",
    "filename": "filename",
}
_UNSUPPORTED: Final = ("showDupeCount", "showSkipCount", "lastSkipTimestamp", "showPagedIndex")


def ia_value(record: CdxRecord, field: str) -> str:
    """The value of IA field ``field`` (an IA name) of ``record``; ``-`` when missing.

    >>> r = CdxRecord.parse('org,iana)/ 20140126200624 {"url": "http://www.iana.org/", '
    ...                     '"digest": "sha1:OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB"}')
    >>> [ia_value(r, f) for f in ("original", "digest", "statuscode")]
    ['http://www.iana.org/', 'OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB', '-']
    """
    if field == "urlkey":
        return record.urlkey
    if field == "timestamp":
        return record.timestamp
    value = record.fields.get(_CDXJ_KEYS.get(field, field), "")
    if field == "digest" and value[:5].lower() == "sha1:":
        value = value[5:]
    return value or "-"


def ia_line(record: CdxRecord, fields: Sequence[str]) -> list[str]:
    """The values of ``fields`` (IA names) of ``record``, in that order."""
    return [ia_value(record, field) for field in fields]


def _field(param: str, name: str) -> str:
    canonical = _NAMES.get(name)
    if canonical is None:
        raise BadRequest(
            param,
            f"unknown field {name!r}; expected one of {', '.join((*IA_FIELDS, *EXTRA_FIELDS))}",
        )
    return canonical


@dataclass(frozen=True, slots=True)
class IaFilter:
    """One IA filter ``[!][~]field:regex`` over IA field values.

    ``field`` None matches the whole default text line. ``regex`` must match
    the whole value; with ``contains`` the ``text`` is a substring instead.
    """

    field: str | None
    text: str
    contains: bool
    invert: bool
    regex: ClientRegex | None

    @classmethod
    def parse(cls, text: str) -> IaFilter:
        """Parse IA syntax; raises :class:`BadRequest` (param ``filter``).

        >>> f = IaFilter.parse("!statuscode:2..")
        >>> (f.field, f.text, f.contains, f.invert)
        ('statuscode', '2..', False, True)
        >>> IaFilter.parse("~4:json").field
        'statuscode'
        """
        raw = text
        invert = text.startswith("!")
        if invert:
            text = text[1:]
        contains = text.startswith("~")
        if contains:
            text = text[1:]
        name, sep, value = text.partition(":")
        field: str | None
        if not sep:
            field, value = None, text
        elif name.isascii() and name.isdigit():
            index = int(name)
            if index >= len(IA_FIELDS):
                raise BadRequest(
                    "filter",
                    f"{raw!r}: field index {index} out of range; expected 0 to "
                    f"{len(IA_FIELDS) - 1} ({', '.join(IA_FIELDS)})",
                )
            field = IA_FIELDS[index]
        else:
            field = _field("filter", name)
        regex = None if contains else compile_client_regex(value, filter_text=raw)
        return cls(field, value, contains, invert, regex)

    def __call__(self, record: CdxRecord) -> bool:
        """True when ``record`` passes this filter."""
        if self.field is None:
            subject = " ".join(ia_line(record, IA_FIELDS))
        else:
            subject = ia_value(record, self.field)
        if self.contains:
            matched = self.text in subject
        else:
            assert self.regex is not None
            matched = self.regex.fullmatch(subject)
        return matched != self.invert


@dataclass(frozen=True, slots=True)
class Collapse:
    """``collapse=field[:N]``: adjacent lines equal in ``field`` (first N chars) collapse."""

    field: str
    chars: int | None

    @classmethod
    def parse(cls, text: str) -> Collapse:
        """Parse ``field`` or ``field:N``; raises :class:`BadRequest` (param ``collapse``).

        >>> Collapse.parse("timestamp:10")
        Collapse(field='timestamp', chars=10)
        """
        name, sep, count = text.partition(":")
        field = _field("collapse", name)
        if not sep:
            return cls(field, None)
        if not (count.isascii() and count.isdigit()) or len(count) > 18 or int(count) < 1:
            raise BadRequest("collapse", f"{text!r}: {count!r} is not a positive character count")
        return cls(field, int(count))

    def value(self, record: CdxRecord) -> str:
        """The part of the record's value compared with the previous line's."""
        value = ia_value(record, self.field)
        return value if self.chars is None else value[: self.chars]


@dataclass(frozen=True, slots=True)
class ResumeKey:
    """Where a resumed query continues: after the ``skip``-th line whose
    (urlkey, timestamp) is (``urlkey``, ``timestamp``), in the order of the
    answer; ``skip`` None skips every such line (the IA's own keys).

    Encoded as the IA encodes its keys, ``quote_plus("urlkey timestamp!N")``
    (the IA writes ``urlkey timestamp!``): ``org%2Ciana%29%2F+20140127171238%211``.
    ``N`` is the tie-break position, counting lines with the same urlkey and
    timestamp from 1, so that identical keys from several index files resume
    without a duplicate or a gap.
    """

    urlkey: str
    timestamp: str
    skip: int | None

    def encode(self) -> str:
        """The key as printed after the answer.

        >>> ResumeKey("org,iana)/", "20140127171238", 1).encode()
        'org%2Ciana%29%2F+20140127171238%211'
        """
        count = "" if self.skip is None else str(self.skip)
        return quote_plus(f"{self.urlkey} {self.timestamp}!{count}")

    @classmethod
    def decode(cls, text: str) -> ResumeKey:
        """Parse a key, URL-decoded once by the server or still encoded as printed.

        >>> ResumeKey.decode("org%2Ciana%29%2F+20140127171238%211")
        ResumeKey(urlkey='org,iana)/', timestamp='20140127171238', skip=1)
        >>> ResumeKey.decode("org,iana)/ 20140127171238!")
        ResumeKey(urlkey='org,iana)/', timestamp='20140127171238', skip=None)

        Raises :class:`BadRequest` (param ``resumeKey``).
        """
        if " " not in text:
            text = unquote_plus(text)
        urlkey, sep, rest = text.rpartition(" ")
        timestamp, bang, count = rest.partition("!")
        if not sep or not urlkey or not TIMESTAMP_DIGITS.fullmatch(timestamp):
            raise BadRequest(
                "resumeKey",
                f"{text!r} is not a resume key; expected 'urlkey timestamp!N' as printed "
                "by showResumeKey=true",
            )
        if not bang:
            return cls(urlkey, timestamp, 0)
        if count and not (count.isascii() and count.isdigit() and len(count) <= 18):
            raise BadRequest("resumeKey", f"{text!r}: {count!r} after '!' is not a count")
        return cls(urlkey, timestamp, int(count) if count else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class IaQuery:
    """A validated IA CDX query; ``base`` carries url, match type, key range, from/to.

    ``limit`` is None when not given (then at most :data:`MAX_LIMIT` lines),
    negative for "the last ``-limit``"; ``page`` is None when not paging.
    """

    base: CaptureQuery
    filters: tuple[IaFilter, ...] = ()
    collapse: tuple[Collapse, ...] = ()
    fields: tuple[str, ...] = IA_FIELDS
    output: Literal["text", "json"] = "text"
    limit: int | None = None
    offset: int = 0
    fast_latest: bool = False
    show_resume_key: bool = False
    resume_key: ResumeKey | None = None
    page: int | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    show_num_pages: bool = False


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1 and len(set(values)) > 1:
        raise BadRequest(name, "given more than once with different values")
    return values[0]


def _bool(params: Mapping[str, Sequence[str]], name: str) -> bool:
    text = _one(params, name)
    if text is None or text == "":
        return False
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise BadRequest(name, f"{text!r} is not a boolean; expected true or false")


def _int(params: Mapping[str, Sequence[str]], name: str, minimum: int | None) -> int | None:
    text = _one(params, name)
    if text is None or text == "":
        return None
    return parse_int(name, text, minimum=minimum)


def _timestamp(params: Mapping[str, Sequence[str]], name: str, up: bool) -> str | None:
    value = _one(params, name)
    if value is None or value == "":
        return None
    if not TIMESTAMP_DIGITS.fullmatch(value):
        raise BadRequest(name, f"{value!r} is not a timestamp; expected 1 to 14 digits")
    return _pad(value, up=up)


def _url_and_match_type(params: Mapping[str, Sequence[str]]) -> tuple[str, MatchType]:
    url = _one(params, "url")
    if not url:
        raise BadRequest("url", "missing; the url parameter is required")
    wildcard: MatchType | None = None
    if url.startswith("*."):
        url, wildcard = url[2:], "domain"
    elif url.endswith("*"):
        url, wildcard = url[:-1], "prefix"
    if not url:
        raise BadRequest("url", "empty after removing the wildcard")
    text = _one(params, "matchType")
    if text is None or text == "":
        return url, wildcard or "exact"
    for match_type in MATCH_TYPES:
        if text == match_type:
            if wildcard is not None and wildcard != match_type:
                raise BadRequest(
                    "matchType",
                    f"{text!r} contradicts the {wildcard} wildcard in url; drop one of them",
                )
            return url, match_type
    raise BadRequest("matchType", f"{text!r} is not one of {', '.join(MATCH_TYPES)}")


def parse_ia_query(params: Mapping[str, Sequence[str]]) -> IaQuery:
    """Validate ``/{coll}/cdx`` parameters (IA wayback CDX server) into an :class:`IaQuery`.

    ``params`` maps each name to all its values in order (``filter`` and
    ``collapse`` repeat). Raises :class:`BadRequest` naming the parameter.
    Unknown parameters are ignored, as the IA server ignores them.
    """
    for name in ("sort", "closest"):
        if _one(params, name):
            raise BadRequest(
                name,
                "not supported by the IA dialect, whose answers are in (urlkey, timestamp) "
                "order; use /{coll}/index?closest=...&sort=... (pywb dialect)",
            )
    for name in _UNSUPPORTED:
        if _bool(params, name):
            raise BadRequest(name, "this experimental IA counter is not supported")

    url, match_type = _url_and_match_type(params)
    url, key, end_key = checked_url_range(url, match_type)
    base = CaptureQuery(
        url=url,
        match_type=match_type,
        key=key,
        end_key=end_key,
        from_ts=_timestamp(params, "from", up=False),
        to_ts=_timestamp(params, "to", up=True),
    )

    filter_texts = [text for text in params.get("filter", ()) if text]
    check_filter_count(len(filter_texts))
    filters = tuple(IaFilter.parse(text) for text in filter_texts)
    collapse = tuple(Collapse.parse(text) for text in params.get("collapse", ()) if text)

    fl = _one(params, "fl")
    fields = IA_FIELDS
    if fl:
        fields = tuple(_field("fl", name.strip()) for name in fl.split(",") if name.strip())

    output_text = (_one(params, "output") or "text").lower()
    if output_text not in ("text", "json"):
        raise BadRequest("output", f"{output_text!r} is not one of json, text")
    output: Literal["text", "json"] = "json" if output_text == "json" else "text"

    limit = _int(params, "limit", None)
    if limit is not None:
        limit = max(-MAX_LIMIT, min(MAX_LIMIT, limit))
    fast_latest = _bool(params, "fastLatest")
    if fast_latest:
        limit = -abs(limit) if limit is not None else -1

    resume_text = _one(params, "resumeKey")
    resume_key = ResumeKey.decode(resume_text) if resume_text else None

    page = _int(params, "page", None)
    if page is not None and page < 0:
        page = None  # IA: "If i<0, pages are not used"
    page_size = _int(params, "pageSize", 1)
    if page_size is not None and page_size > MAX_LIMIT:
        raise BadRequest("pageSize", f"{page_size} is more than the largest, {MAX_LIMIT}")
    _bool(params, "gzip")

    return IaQuery(
        base=base,
        filters=filters,
        collapse=collapse,
        fields=fields,
        output=output,
        limit=limit,
        offset=_int(params, "offset", 0) or 0,
        fast_latest=fast_latest,
        show_resume_key=_bool(params, "showResumeKey"),
        resume_key=resume_key,
        page=page,
        page_size=page_size or DEFAULT_PAGE_SIZE,
        show_num_pages=_bool(params, "showNumPages"),
    )
