"""Host names and URLs from clients, validated and normalised once, at the edge.

Everything after the edge (SURT keys, the sources, a remote archive's
client, the live fetch, the links the gateway writes) sees only the
normalised form, whose host is ASCII:

- a **host name** is mapped with UTS #46 (the ``idna`` package,
  ``uts46_remap``: case folded, full-width forms and compatibility
  characters mapped, ``。`` read as ``.``) and then checked label by label.
  A label with a character past ASCII, or an ``xn--`` label, must be a
  valid IDNA 2008 label (``idna.alabel``: code points, contextual rules,
  hyphens, Bidi, canonical Punycode) and is written as its A-label
  (``Bücher`` -> ``xn--bcher-kva``). An ASCII label is taken as DNS and the
  web take it (``_``, a leading hyphen or ``--`` in the third and fourth
  places occur in archived hosts: ``r3---sn-x.googlevideo.com``) but may
  not hold a character the WHATWG URL Standard forbids in a domain (space,
  controls, ``# / : < > ? @ [ \\ ] ^ | %``, DEL). No label may be empty
  (``a..b``; ``⒈.com``, which older UTS #46 tables map to ``1..com``) or
  longer than 63 characters, nor the name longer than 253. Percent-escapes
  are decoded first (UTF-8), as the WHATWG URL Standard does;
- an **IPv6 literal** (``[::1]``) must parse (no zone) and is written
  compressed and lowercase; an IPv4 address is a host name of digits;
- a **port** is ASCII digits, at most 65535 (leading zeros dropped).

Every problem raises :class:`HostError` (a :class:`ValueError`) saying why;
the API turns it into a 400 naming ``url`` or ``Host``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import unquote_to_bytes, urlsplit

import idna

__all__ = [
    "HostError",
    "normalize_authority",
    "normalize_base_url",
    "normalize_host",
    "normalize_url",
]

#: The longest host taken before it is mapped (UTS #46 mapping can grow one
#: character to 18: the bound keeps the work per request small).
_MAX_INPUT_CHARS: Final = 1024
_MAX_NAME_CHARS: Final = 253
_MAX_LABEL_CHARS: Final = 63
#: The WHATWG URL Standard's forbidden domain code points (ASCII): C0
#: controls, space, ``# / : < > ? @ [ \ ] ^ |``, ``%`` and DEL.
_FORBIDDEN: Final = re.compile(r"[\x00-\x20#/:<>?@\[\\\]^|%\x7f]")
_PORT: Final = re.compile(r"[0-9]{0,5}")
#: A scheme: what a URL starts with unless it is schemeless (as SURT reads it).
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: ``host:port`` without a scheme (``example.com:8080/a``): not a scheme.
_HOST_PORT: Final = re.compile(r"[^:/?#]+:[0-9]+(?:[/?#]|\Z)")
#: A URL already in normal form (lowercase ASCII labels of at most 63 characters,
#: an optional port below 10000, printable ASCII after): :func:`normalize_url`
#: returns it as it is without the full parse (a subset of what the parse keeps).
_PLAIN_URL: Final = re.compile(
    r"(https?)://((?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
    r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)(?::[1-9][0-9]{0,3})?(?:[/?#][!-~]*)?\Z"
)
#: RFC 3986 ``pchar`` and ``/``: a configured base URL's path.
_PATH: Final = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*")
_AUTHORITY_END: Final = re.compile(r"[/?#]")
#: Schemes whose host SURT finds after any number of slashes.
_WEB_SCHEMES: Final = frozenset({"http", "https"})
#: ``http://https://a``: SURT reads the last of repeated schemes.
_REPEATED_SCHEMES: Final = re.compile(r"(?:https?://)*(https?://)")
#: Percent-encoded IPv6 brackets (clients encode ``[`` and ``]`` in paths).
_BRACKET: Final = re.compile(r"%5([bBdD])")
#: WHATWG: leading and trailing C0 controls and spaces are dropped, tabs and
#: newlines removed anywhere (Python's ``urlsplit`` and SURT do the same).
_EDGE_SPACE: Final = "".join(map(chr, range(0x21)))
_TAB_NEWLINE: Final = re.compile(r"[\t\n\r]")


class HostError(ValueError):
    """A host, port or URL from a client is not one the web can hold (the message says why)."""


def normalize_host(host: str) -> str:
    """``host`` (a URL's host: a name or a bracketed IPv6 literal) in its
    normalised ASCII form; :class:`HostError` when it is not valid.

    >>> normalize_host("Bücher.Example")
    'xn--bcher-kva.example'
    >>> normalize_host("r3---sn-x_y.googlevideo.com")
    'r3---sn-x_y.googlevideo.com'
    >>> normalize_host("[0:0::1]")
    '[::1]'
    >>> normalize_host("a..b")
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: host 'a..b' is not a valid IDNA name (empty label)
    >>> normalize_host("\\u2488.com")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: host '⒈.com' is not a valid IDNA name (...)
    """
    if not host:
        raise HostError("the host is empty")
    if len(host) > _MAX_INPUT_CHARS:
        raise HostError(f"host {_cut(host)!r} is too long ({len(host)} characters)")
    if host.startswith("["):
        return _ipv6(host)
    if "%" in host:
        host = _percent_decoded(host)
    try:
        host.encode("utf-8")
    except UnicodeEncodeError:
        raise HostError(f"host {_cut(host)!r} is not UTF-8") from None
    if host.isascii():
        mapped = host.lower()  # UTS #46 maps ASCII to itself but for the case
    else:
        try:
            mapped = idna.uts46_remap(host, std3_rules=False)
        except idna.IDNAError as exc:
            raise HostError(f"host {_cut(host)!r} is not a valid IDNA name ({exc})") from None
    labels = mapped.split(".")
    trailing_dot = len(labels) > 1 and labels[-1] == ""
    if trailing_dot:
        labels.pop()
    ascii_labels = [_label(label, host) for label in labels]
    name = ".".join(ascii_labels)
    if len(name) > _MAX_NAME_CHARS:
        raise HostError(
            f"host {_cut(host)!r} is not a valid IDNA name "
            f"(longer than {_MAX_NAME_CHARS} characters)"
        )
    return name + "." if trailing_dot else name


def _label(label: str, host: str) -> str:
    """One mapped label as ASCII; :class:`HostError` naming ``host`` when invalid."""
    if not label:
        raise HostError(f"host {_cut(host)!r} is not a valid IDNA name (empty label)")
    if label.isascii() and not label.startswith("xn--"):
        bad = _FORBIDDEN.search(label)
        if bad is not None:
            raise HostError(
                f"host {_cut(host)!r} is not a valid host name "
                f"({bad.group()!r} may not stand in one)"
            )
        if len(label) > _MAX_LABEL_CHARS:
            raise HostError(
                f"host {_cut(host)!r} is not a valid IDNA name (a label longer than "
                f"{_MAX_LABEL_CHARS} characters)"
            )
        return label
    try:
        return idna.alabel(label).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostError(f"host {_cut(host)!r} is not a valid IDNA name ({exc})") from None


def _ipv6(host: str) -> str:
    if not host.endswith("]"):
        raise HostError(f"host {_cut(host)!r} is not an IPv6 literal (no closing ']')")
    inner = host[1:-1]
    if "%" in inner:
        raise HostError(f"host {_cut(host)!r}: an IPv6 zone is not allowed in a URL")
    try:
        address = ipaddress.IPv6Address(inner)
    except ValueError as exc:
        raise HostError(f"host {_cut(host)!r} is not an IPv6 literal ({exc})") from None
    return f"[{address.compressed}]"


def _percent_decoded(host: str) -> str:
    try:
        return unquote_to_bytes(host).decode("utf-8")
    except (UnicodeError, ValueError):
        raise HostError(f"host {_cut(host)!r}: its percent-escapes are not UTF-8") from None


def _port(text: str, where: str) -> str:
    """A port's digits normalised (``'0080'`` -> ``'80'``; empty stays empty)."""
    if not text.isascii() or not _PORT.fullmatch(text):
        raise HostError(f"{_cut(where)!r}: port {_cut(text, 40)!r} is not 1 to 5 ASCII digits")
    if not text:
        return ""
    port = int(text)
    if port > 65535:
        raise HostError(f"{_cut(where)!r}: port {port} is out of range 0-65535")
    return str(port)


def normalize_authority(text: str) -> str:
    """``host[:port]`` (the ``Host`` header, or a URL's authority without
    userinfo) normalised; :class:`HostError` when invalid.

    >>> normalize_authority("Évil.com:08080")
    'xn--vil-9la.com:8080'
    >>> normalize_authority("[::1]:80")
    '[::1]:80'
    >>> normalize_authority("\\udce9vil.com")
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: host '\\udce9vil.com' is not UTF-8
    """
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise HostError(f"{_cut(text)!r} is not an IPv6 literal (no closing ']')")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise HostError(f"{_cut(text)!r}: expected ':' and a port after the IPv6 literal")
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            host, port = text, None
        else:
            port = port_text
    normalized = normalize_host(host)
    if port is None:
        return normalized
    digits = _port(port, text)
    return f"{normalized}:{digits}" if digits else normalized


def _has_scheme(url: str) -> bool:
    return bool(_SCHEME.match(url)) and not _HOST_PORT.match(url)


def normalize_url(url: str) -> str:
    """``url`` with its host normalised (see the module docstring); :class:`HostError`
    saying why when it is not a URL the web can hold.

    What every later step (SURT, a remote archive's client, the live fetch)
    parses must parse here first: Python's ``urlsplit`` (an unclosed IPv6
    bracket, a netloc that NFKC-normalizes into a delimiter), the port and
    the host. The host is found where SURT finds it: a URL without a scheme
    is read as ``http://`` + the URL (``example.com:8080/a`` is a host and
    port; ``//a/b`` is ``a/b``) and stays without one; after ``http:`` or
    ``https:`` the host follows any number of slashes (``http:/a``,
    ``http:////a``: written ``http://a``), and ``http://https://a`` is
    ``https://a``. The rest of the URL is kept as given, but for leading and
    trailing spaces and controls and its tabs and newlines, which are
    dropped (as ``urlsplit`` and SURT drop them).

    >>> normalize_url("http://Bücher.example/a?b=%C3%BC")
    'http://xn--bcher-kva.example/a?b=%C3%BC'
    >>> normalize_url("B%C3%BCcher.example/")
    'xn--bcher-kva.example/'
    >>> normalize_url("http:////Example.com/a")
    'http://example.com/a'
    >>> normalize_url("//Example.com/a")
    'example.com/a'
    >>> normalize_url("http://%5B::1%5D:8080/%5B")
    'http://[::1]:8080/%5B'
    >>> normalize_url("http://a..b/")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: cannot parse URL 'http://a..b/': host 'a..b' is not a valid ...
    >>> normalize_url("http://[::1")
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: cannot parse URL 'http://[::1': Invalid IPv6 URL
    """
    plain = _PLAIN_URL.match(url)
    if plain is not None and len(plain.group(2)) <= _MAX_NAME_CHARS and "xn--" not in url:
        return url  # already in normal form: the common case, checked in one match
    text = url.strip(_EDGE_SPACE)
    if "\t" in text or "\n" in text or "\r" in text:
        text = _TAB_NEWLINE.sub("", text)
    repeated = _REPEATED_SCHEMES.match(text)
    if repeated is not None and repeated.end() > len(repeated.group(1)):
        text = repeated.group(1) + text[repeated.end() :]  # http://https://a: https://a
    schemeless = not _has_scheme(text)
    if schemeless:
        text = text.lstrip("/") if text.startswith("//") else text  # //a/b: a/b
        full = "http://" + text
    else:
        scheme, _, rest = text.partition(":")
        if scheme.lower() in _WEB_SCHEMES:  # http:/a, http:a, http:////a: http://a
            text = f"{scheme}://{rest.lstrip('/')}"
        full = text
    scheme_end = full.index(":") + 1
    if full.startswith("//", scheme_end):
        start = scheme_end + 2
        stop = _AUTHORITY_END.search(full, start)
        end = stop.start() if stop is not None else len(full)
        authority = full[start:end]
        try:
            new_authority = _authority(authority)
        except HostError as exc:
            raise HostError(f"cannot parse URL {_cut(url)!r}: {exc}") from None
        if new_authority != authority:
            full = full[:start] + new_authority + full[end:]
    try:
        parts = urlsplit(full)
        parts.port  # noqa: B018  (raises on a port that is not one)
    except ValueError as exc:
        raise HostError(f"cannot parse URL {_cut(url)!r}: {exc}") from None
    return full[len("http://") :] if schemeless else full


def _authority(authority: str) -> str:
    """A URL's authority (``[userinfo@]host[:port]``) with its host and port normalised."""
    if "%" in authority:
        authority = _BRACKET.sub(lambda m: "[" if m.group(1) in "bB" else "]", authority)
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("[") and "]" not in hostport:
        return authority  # urlsplit names it: "Invalid IPv6 URL"
    if not hostport or hostport.startswith(":"):
        # No host ("http:///a", "file:///"): nothing to normalise; a port is still checked.
        if hostport:
            _port(hostport[1:], authority)
        return authority
    return f"{userinfo}{at}{normalize_authority(hostport)}"


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def normalize_base_url(text: str) -> str:
    """A configured public base URL (``https://archive.example.org/gw/``)
    normalised: scheme lowercase, host and port as :func:`normalize_authority`
    writes them, the path kept without its final ``/``; :class:`HostError`
    unless it is an ``http(s)://`` URL with a host and without userinfo,
    query, fragment, spaces or characters past ASCII in its path.

    >>> normalize_base_url("HTTPS://Bücher.Example:443/Gw/")
    'https://xn--bcher-kva.example:443/Gw'
    >>> normalize_base_url("archive.example.org")
    Traceback (most recent call last):
    gateway.cdx.hosts.HostError: expected an http:// or https:// URL, e.g. https://archive.example.org
    """
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise HostError("expected an http:// or https:// URL, e.g. https://archive.example.org")
    authority, slash, path = rest.partition("/")
    if not authority:
        raise HostError(f"{_cut(text)!r} has no host")
    if "@" in authority:
        raise HostError(f"{_cut(text)!r}: user information is not allowed")
    if "?" in rest or "#" in rest:
        raise HostError(f"{_cut(text)!r}: a query or fragment is not allowed")
    if not _PATH.fullmatch(path):
        raise HostError(
            f"{_cut(text)!r}: the path may hold only RFC 3986 path characters "
            "(percent-encode the others)"
        )
    base = f"{scheme.lower()}://{normalize_authority(authority)}{slash}{path}"
    return base.rstrip("/")
