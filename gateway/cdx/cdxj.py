"""CDXJ and legacy CDX lines: parsing, serializing, urlkeys.

A capture is one :class:`CdxRecord`: ``urlkey``, 14-digit ``timestamp`` and an
ordered mapping of the CDXJ JSON block, with the keys cdxj-indexer writes
(``url mime status digest length offset filename``) plus what the gateway
adds (``source``, ``source-coll``, ``load_url``).

Formats read (pywb ``CDXObject``):

- CDXJ: ``urlkey timestamp {json}``
- legacy CDX with 9, 10 or 11 space-separated fields (and the 7-field public
  format), mapped to the same names as pywb maps them.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = [
    "FIELD_ALIASES",
    "CdxFormatError",
    "CdxRecord",
    "canonical_urlkey",
]

URLKEY: Final = "urlkey"
TIMESTAMP: Final = "timestamp"

#: Legacy CDX layouts by field count (pywb ``CDXObject.CDX_FORMATS``).
_CDX_FORMATS: Final[dict[int, tuple[str, ...]]] = {
    7: ("url", "mime", "status", "digest", "length"),
    9: ("url", "mime", "status", "digest", "redirect", "offset", "filename"),
    10: ("url", "mime", "status", "digest", "redirect", "robotflags", "offset", "filename"),
    11: (
        "url",
        "mime",
        "status",
        "digest",
        "redirect",
        "robotflags",
        "length",
        "offset",
        "filename",
    ),
}

#: Alternative field names accepted in ``filter`` and ``fl`` (pywb and IA names).
#: pywb maps ``s`` to length by accident of a duplicate dict key; here ``s`` is
#: the status code, as in the IA CDX server.
FIELD_ALIASES: Final[dict[str, str]] = {
    "u": "url",
    "original": "url",
    "statuscode": "status",
    "s": "status",
    "mimetype": "mime",
    "m": "mime",
    "l": "length",
    "o": "offset",
    "d": "digest",
    "t": "timestamp",
    "k": "urlkey",
    "f": "filename",
}


#: A CDXJ block ``json.dumps`` writes back byte for byte: one or more string
#: fields of printable ASCII without quotes or backslashes, in its spacing
#: (``{"a": "b", "c": "d"}``), no key starting with ``_`` (hidden on output).
#: (Positive character ranges: faster in ``re`` than the negated class.)
_PLAIN_CHAR: Final = r"[ !#-\[\]-~]"
_PLAIN_KEY: Final = r"[ !#-\[\]-^`-~]" + _PLAIN_CHAR + "*"
_PLAIN_BLOCK: Final = re.compile(
    rf'\{{"{_PLAIN_KEY}": "{_PLAIN_CHAR}*"(?:, "{_PLAIN_KEY}": "{_PLAIN_CHAR}*")*\}}'
)


#: Appended key sequences :func:`_source_suffix` writes.
_TAG_KEYS: Final = (
    ("source",),
    ("source-coll",),
    ("source", "source-coll"),
    ("access",),
    ("source", "access"),
    ("source-coll", "access"),
    ("source", "source-coll", "access"),
)


#: Placeholder passed to ``__init__`` by records whose block is still text.
_NO_FIELDS: Final[dict[str, str]] = {}


@functools.lru_cache(maxsize=4096)
def _source_suffix(source: str | None, coll: str | None, access: str | None = None) -> str:
    """``, "source": ..., "source-coll": ..., "access": ...}``: what closes a tagged
    plain block.

    >>> _source_suffix("web:iana.cdxj", "web")
    ', "source": "web:iana.cdxj", "source-coll": "web"}'
    >>> _source_suffix("web", "web", "allow")
    ', "source": "web", "source-coll": "web", "access": "allow"}'
    """
    pieces = []
    if source is not None:
        pieces.append(f', "source": {json.dumps(source)}')
    if coll is not None:
        pieces.append(f', "source-coll": {json.dumps(coll)}')
    if access is not None:
        pieces.append(_ACCESS_SUFFIXES.get(access) or f', "access": {json.dumps(access)}')
    return "".join(pieces) + "}"


#: The ``access`` values access control lists, written once.
_ACCESS_SUFFIXES: Final = {value: f', "access": "{value}"' for value in ("allow", "block")}


class CdxFormatError(ValueError):
    """A line is neither CDXJ nor a known legacy CDX layout."""


@functools.lru_cache(maxsize=65536)
def canonical_urlkey(url: str) -> str:
    """Return the SURT urlkey of ``url`` with pywb's canonicalization (cached).

    Scheme, ``www.``, default port, case and query-parameter order do not
    change the key (``surt`` package defaults, as pywb and cdxj-indexer use).

    >>> canonical_urlkey("http://www.Example.com:80/a?b=2&a=1")
    'com,example)/a?a=1&b=2'
    >>> canonical_urlkey("https://example.com/a?a=1&b=2")
    'com,example)/a?a=1&b=2'

    Raises :class:`ValueError` when the URL cannot be canonicalized. ``surt``
    (with tldextract and requests, a tenth of a second) is imported on the
    first call, not with this module: ``gateway check-config`` never needs it.
    """
    import surt

    try:
        key = surt.surt(url)
    except Exception as exc:  # surt raises assorted errors on junk input
        if url.startswith("urn:"):
            return url
        raise ValueError(f"cannot canonicalize URL {url!r}: {exc}") from exc
    return str(key)


class CdxRecord:
    """One capture from an index.

    ``fields`` preserves the order of the source line's JSON block; values are
    strings as pywb keeps them (an integer ``status`` is converted). Records
    order by ``(urlkey, timestamp)``; ties are broken by the aggregator, never
    by the text of the line.

    A CDXJ block of plain string fields (what cdxj-indexer writes) is kept as
    text and split into ``fields`` only when a field is read: a record that is
    only merged, sorted by time and written out again is never decoded, and
    :meth:`to_cdxj` writes the block back as read, with ``source`` and
    ``source-coll`` (:meth:`set_source`) appended as ``json.dumps`` would.
    """

    __slots__ = ("_access", "_coll", "_fields", "_plain", "_raw", "_source", "timestamp", "urlkey")

    def __init__(self, urlkey: str, timestamp: str, fields: dict[str, str]) -> None:
        self.urlkey = urlkey
        self.timestamp = timestamp
        self._fields: dict[str, str] | None = fields
        #: The undecoded block (see :data:`_PLAIN_BLOCK`) while ``_fields`` is None.
        self._plain: str | None = None
        #: The parsed JSON block's text, keys and values: :meth:`to_cdxj` reuses
        #: the text while those fields are unchanged (fields appended later,
        #: such as ``source``, are serialized and spliced in).
        self._raw: tuple[str, tuple[str, ...], tuple[str, ...]] | None = None
        #: ``source`` and ``source-coll`` set while the block is undecoded.
        self._source: str | None = None
        self._coll: str | None = None
        #: ``access`` set while the block is undecoded (:meth:`set_access`).
        self._access: str | None = None

    @classmethod
    def _undecoded(cls, urlkey: str, timestamp: str, plain: str) -> CdxRecord:
        record = cls(urlkey, timestamp, _NO_FIELDS)
        record._fields = None
        record._plain = plain
        return record

    @property
    def fields(self) -> dict[str, str]:
        """The JSON block as an ordered ``{name: value}`` mapping (decoded on first use)."""
        fields = self._fields
        if fields is None:
            fields = self._decode()
        return fields

    @fields.setter
    def fields(self, fields: dict[str, str]) -> None:
        """Replace the whole block (tags included: ``fields`` is the record's truth)."""
        self._fields = fields
        self._plain = None
        self._raw = None
        self._source = None
        self._coll = None
        self._access = None

    def _decode(self) -> dict[str, str]:
        plain = self._plain
        assert plain is not None
        fields: dict[str, str] = {}
        # Plain blocks hold no quotes inside keys or values: the separators are exact.
        for item in plain[2:-2].split('", "'):
            name, _, value = item.partition('": "')
            fields[name] = value
        self._raw = (plain, tuple(fields), tuple(fields.values()))
        if self._source is not None:
            fields["source"] = self._source
        if self._coll is not None:
            fields["source-coll"] = self._coll
        if self._access is not None:
            fields["access"] = self._access
        self._fields = fields
        self._plain = None
        return fields

    def set_source(self, source: str, coll: str | None = None) -> None:
        """Set ``source`` (and ``source-coll`` when given), as pywb tags captures.

        New fields are appended after the block's own; an existing one keeps
        its place. The block is not decoded for this.
        """
        fields = self._fields
        if fields is None:
            self._source = source
            if coll is not None:
                self._coll = coll
            return
        fields["source"] = source
        if coll is not None:
            fields["source-coll"] = coll

    def set_access(self, access: str) -> None:
        """Set ``access`` (access control's listing: ``allow`` or ``block``, as pywb
        lists it), appended after the tags; the block is not decoded for this."""
        if self._fields is None:
            self._access = access
        else:
            self._fields["access"] = access

    def tag(self, name: str) -> None:
        """Tag the capture as found through member ``name``, as pywb does.

        ``source`` becomes ``name``, or ``name:sub`` when the source set a
        sub-name (a directory member's file name); ``source-coll`` is ``name``.
        """
        if self._fields is None:
            sub = self._source
            self._source = f"{name}:{sub}" if sub else name
            self._coll = name
            return
        sub = self._fields.get("source")
        self._fields["source"] = f"{name}:{sub}" if sub else name
        self._fields["source-coll"] = name

    # ------------------------------------------------------------------ parse
    @classmethod
    def parse(cls, line: bytes | str) -> CdxRecord:
        """Parse one CDXJ or legacy CDX line (trailing newline allowed).

        >>> r = CdxRecord.parse('com,example)/ 20140127171200 {"url": "http://example.com"}')
        >>> (r.urlkey, r.timestamp, r.url)
        ('com,example)/', '20140127171200', 'http://example.com')
        >>> CdxRecord.parse("com,example)/ 20140127171251 http://example.com "
        ...                 "warc/revisit - B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A - - 553 11875 "
        ...                 "dupes.warc.gz").filename
        'dupes.warc.gz'

        Raises :class:`CdxFormatError` on anything else.
        """
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        text = text.rstrip("\r\n")
        parts = text.split(" ", 2)
        if len(parts) < 3:
            raise CdxFormatError(f"not a CDX line (fewer than 3 fields): {text[:200]!r}")
        urlkey, timestamp, rest = parts
        if rest.startswith("{"):
            if rest.isascii() and '"source' not in rest and _PLAIN_BLOCK.fullmatch(rest):
                return cls._undecoded(urlkey, timestamp, rest)
            try:
                block = json.loads(rest)
            except ValueError as exc:
                raise CdxFormatError(f"bad CDXJ JSON block: {exc}: {text[:200]!r}") from exc
            if not isinstance(block, dict):
                raise CdxFormatError(f"CDXJ block is not a JSON object: {text[:200]!r}")
            values = tuple(block.values())
            if set(map(type, values)) <= {str}:
                record = cls(urlkey, timestamp, block)
                # reusable text: ASCII (json.dumps escapes the rest), no "_" keys
                if rest.isascii() and rest[-1] == "}" and '"_' not in rest:
                    record._raw = (rest, tuple(block), values)
                return record
            fields = {
                str(k): (v if isinstance(v, str) else json.dumps(v) if v is not None else "")
                for k, v in block.items()
            }
            status = block.get("status")
            if isinstance(status, int):
                fields["status"] = str(status)
            return cls(urlkey, timestamp, fields)
        columns = rest.split(" ")
        layout = _CDX_FORMATS.get(len(columns) + 2)
        if layout is None:
            raise CdxFormatError(
                f"unknown {len(columns) + 2}-field CDX line; expected CDXJ or "
                f"7, 9, 10 or 11 fields: {text[:200]!r}"
            )
        return cls(urlkey, timestamp, dict(zip(layout, columns, strict=True)))

    # ---------------------------------------------------------------- access
    def get(self, name: str, default: str = "") -> str:
        """Field value by name or alias (``urlkey`` and ``timestamp`` included)."""
        name = FIELD_ALIASES.get(name, name)
        if name == URLKEY:
            return self.urlkey
        if name == TIMESTAMP:
            return self.timestamp
        return self.fields.get(name, default)

    @property
    def url(self) -> str:
        """The original URL (``url`` field)."""
        return self.fields.get("url", "")

    @property
    def mime(self) -> str:
        return self.fields.get("mime", "")

    @property
    def status(self) -> str:
        return self.fields.get("status", "")

    @property
    def digest(self) -> str:
        """Payload digest as indexed (with or without a ``sha1:`` prefix)."""
        return self.fields.get("digest", "")

    @property
    def filename(self) -> str:
        return self.fields.get("filename", "")

    @property
    def offset(self) -> int | None:
        """Byte offset of the record in ``filename``, or None when unknown."""
        return _int_or_none(self.fields.get("offset"))

    @property
    def length(self) -> int | None:
        """Byte length of the (possibly compressed) record, or None when unknown."""
        return _int_or_none(self.fields.get("length"))

    @property
    def source(self) -> str:
        if self._fields is None:
            return self._source or ""
        return self._fields.get("source", "")

    @property
    def is_revisit(self) -> bool:
        """True for revisit records (pywb: ``mime == warc/revisit`` or no filename)."""
        return self.fields.get("mime") == "warc/revisit" or self.fields.get("filename") == "-"

    def copy(self) -> CdxRecord:
        fields = self._fields
        copied = _NO_FIELDS if fields is None else dict(fields)
        duplicate = CdxRecord(self.urlkey, self.timestamp, copied)
        if fields is None:
            duplicate._fields = None
        duplicate._plain = self._plain
        duplicate._raw = self._raw
        duplicate._source = self._source
        duplicate._coll = self._coll
        duplicate._access = self._access
        return duplicate

    def snapshot(self) -> tuple[str, str, str] | CdxRecord:
        """An image of the record as it is now that later changes to it do not
        touch, for :meth:`from_snapshot`: the urlkey, timestamp and block of an
        undecoded, untagged record (a tuple: nothing is copied), else a copy.

        Memos of what a lookup found keep images
        (:class:`~gateway.sources.range_memo.RangeMemo`), because consumers
        tag, gate and decode the records they are given.
        """
        if (
            self._fields is None
            and self._source is None
            and self._coll is None
            and self._access is None
        ):
            plain = self._plain
            assert plain is not None
            return (self.urlkey, self.timestamp, plain)
        return self.copy()

    @classmethod
    def from_snapshot(cls, image: tuple[str, str, str] | CdxRecord) -> CdxRecord:
        """A new record equal to the one :meth:`snapshot` made ``image`` of."""
        if type(image) is tuple:
            return cls._undecoded(*image)
        assert isinstance(image, CdxRecord)
        return image.copy()

    def sort_key(self) -> tuple[str, str]:
        return (self.urlkey, self.timestamp)

    # ------------------------------------------------------------- serialize
    def to_cdxj(self, fields: Sequence[str] | None = None) -> str:
        """``urlkey timestamp {json}\\n`` as pywb writes it (``json.dumps`` spacing).

        With ``fields``, the JSON block holds only those present, in that order.
        A parsed ASCII block whose fields are unchanged is reused as written.
        """
        if fields is None and self._fields is None:
            return f"{self.urlkey} {self.timestamp} {self._plain_with_source()}\n"
        if fields is None and self._raw is not None:
            block = self._reuse_raw(*self._raw)
            if block is not None:
                return f"{self.urlkey} {self.timestamp} {block}\n"
        return f"{self.urlkey} {self.timestamp} {json.dumps(self._block(fields))}\n"

    def _plain_with_source(self) -> str:
        """The undecoded block with ``source``/``source-coll`` appended (json.dumps spacing)."""
        plain = self._plain
        assert plain is not None
        if self._source is None and self._coll is None and self._access is None:
            return plain
        return plain[:-1] + _source_suffix(self._source, self._coll, self._access)

    def _reuse_raw(self, text: str, keys: tuple[str, ...], values: tuple[str, ...]) -> str | None:
        """``text`` plus the fields appended since parsing, or None if any changed."""
        names = tuple(self.fields)
        count = len(keys)
        if names[:count] != keys:
            return None
        now = tuple(self.fields.values())
        if not all(map(operator.is_, now[:count], values)):
            return None
        if len(names) == count:
            return text
        extra = {
            name: value
            for name, value in zip(names[count:], now[count:], strict=True)
            if name[:1] != "_"
        }
        if not extra:
            return text
        if count and tuple(extra) in _TAG_KEYS:  # the usual case: only the tags were added
            return text[:-1] + _source_suffix(
                extra.get("source"), extra.get("source-coll"), extra.get("access")
            )
        appended = json.dumps(extra)
        return f"{text[:-1]}, {appended[1:]}" if count else appended

    def to_json(self, fields: Sequence[str] | None = None) -> str:
        """One NDJSON line: ``urlkey``, ``timestamp`` then the block (pywb ``to_json``)."""
        if fields is None:
            obj = {URLKEY: self.urlkey, TIMESTAMP: self.timestamp, **self._block(None)}
        else:
            obj = {name: self.get(name) for name in fields if self._has(name)}
        return json.dumps(obj) + "\n"

    def to_text(self, fields: Sequence[str] | None = None) -> str:
        """Space-separated values; missing fields are ``-`` (pywb ``to_text``)."""
        values: Iterable[str]
        if fields is None:
            values = (self.urlkey, self.timestamp, *self._block(None).values())
        else:
            values = (self.get(name, "-") for name in fields)
        return " ".join(values) + "\n"

    def _has(self, name: str) -> bool:
        name = FIELD_ALIASES.get(name, name)
        return name in (URLKEY, TIMESTAMP) or name in self.fields

    def _block(self, fields: Sequence[str] | None) -> dict[str, str]:
        if fields is None:
            return {k: v for k, v in self.fields.items() if not k.startswith("_")}
        out: dict[str, str] = {}
        for name in fields:
            canon = FIELD_ALIASES.get(name, name)
            if canon in self.fields:
                out[canon] = self.fields[canon]
        return out

    def __repr__(self) -> str:
        return f"CdxRecord({self.urlkey!r}, {self.timestamp!r}, {self.fields!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CdxRecord):
            return NotImplemented
        return (self.urlkey, self.timestamp, self.fields) == (
            other.urlkey,
            other.timestamp,
            other.fields,
        )

    __hash__ = None  # type: ignore[assignment]


def _int_or_none(value: str | None) -> int | None:
    if value is None or value in ("", "-"):
        return None
    try:
        return int(value)
    except ValueError:
        return None
