"""Fuzzing every route and parameter: the requests (hypothesis strategies) and the checks.

Used by the property test (``tests/api/test_fuzz_property.py``, bounded to
about a minute) and by the long run (``python -m tests.fuzz_run``, 10,000
requests and more), both against a ``gateway serve`` process whose
collections use every source type:

- ``dir``, ``file``, ``zip``: the pywb sample as a directory of CDXJ, one
  file, a ZipNum cluster;
- ``grp``: an ``index_group`` of a local file, a remote CDX server and a
  remote Memento archive (both the ``upstream``: pywb's wayback over the
  sample), the group timeout :data:`GROUP_TIMEOUT_S`;
- ``seq``: a ``sequence`` of Redis (an empty key) and the sample file;
- ``live``: the live web; its URLs always name the upstream on 127.0.0.1
  (``allow_private_networks: true``), so nothing leaves the machine;
- ``store``: the snapshot store.

A request is ``(method, target, headers, body)``: ``target`` is sent as it
is (percent-encoded here), so anything a client can put in a request line
is tried: unknown collections and paths, every parameter of every dialect
with valid, borderline and random values (other scripts' digits, integers
past 64 bits, catastrophic regexes, URLs that do not parse), post-request
bodies (wrapped requests, multipart, JSON, garbage), ``Accept-Datetime``
and, on a quarter of the requests, a ``Host`` of their own: raw bytes (not
UTF-8 too), IDNA and UTS #46 edge cases, ports and IPv6 literals that do
not parse (only the control characters aiohttp refuses itself are left out).

:func:`problems` is the property: no 5xx, a JSON body with a ``message`` on
every 4xx, no answer slower than the group timeout plus
:data:`MARGIN_S`.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final
from urllib.parse import quote

from hypothesis import strategies as st

__all__ = [
    "GROUP_TIMEOUT_S",
    "MARGIN_S",
    "Answer",
    "Request",
    "gateway_config",
    "problems",
    "requests",
    "send",
]

GROUP_TIMEOUT_S: Final = 2.0
#: Slack over the group timeout before an answer counts as a stall (a 2-core
#: machine shared with other work; loads have their own load_timeout).
MARGIN_S: Final = 10.0
COLLECTIONS: Final = ("dir", "file", "zip", "grp", "seq", "live", "store")


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    #: The ``Host`` header's bytes as sent; None: ``127.0.0.1:port``.
    host: bytes | None = None

    def __str__(self) -> str:
        shown = self.target if len(self.target) < 300 else self.target[:300] + "..."
        host = "" if self.host is None else f" Host={self.host[:100]!r}"
        return f"{self.method} {shown}{host} {dict(self.headers)} body={self.body[:200]!r}"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    elapsed_s: float


def gateway_config(sample: Path, store_root: Path, redis_url: str, upstream: str) -> str:
    """The fuzzed gateway's collections.yaml (see the module docstring)."""
    s = sample
    return f"""
store:
  root: {store_root}
  fsync: never
collections:
  dir: {{index: {s}/cdxj/, resource: {s}/warcs/}}
  file: {{index: {s}/cdxj/iana.cdxj, resource: {s}/warcs/}}
  zip: {{index: {s}/zipcdx/zipnum-sample.idx, resource: {s}/warcs/}}
  grp:
    index_group:
      local: {s}/cdxj/example.cdxj
      cdx: cdx+{upstream}/pywb/cdx
      memento: memento+{upstream}/pywb/
    timeout: {GROUP_TIMEOUT_S}
    load_timeout: {GROUP_TIMEOUT_S}
    resource: {s}/warcs/
  seq:
    sequence:
      - index: {redis_url}/0/fuzz:empty:cdxj
      - index: {s}/cdxj/iana.cdxj
        resource: {s}/warcs/
  live:
    index: {{type: live, allow_private_networks: true}}
    load_timeout: {GROUP_TIMEOUT_S}
  store: $store
"""


# -- values --------------------------------------------------------------------------

_GOOD_URLS = [
    "http://www.iana.org/",
    "http://www.iana.org/_css/2013.1/print.css",
    "http://example.com",
    "http://www.iana.org/domains/example/",
    "example.com/*",
]
_URLS = [
    *_GOOD_URLS,
    *_GOOD_URLS,
    "http://www.iana.org/",
    "iana.org",
    "http://example.com/?example=1",
    "http://www.iana.org/_css/2013.1/screen.css?_=1390766400",
    "http://httpbin.org/post",
    "*.iana.org",
    "http://www.iana.org/_css/*",
    "http://[::1]/",
    "http://%5B::1%5D/",
    "[",
    "http://[::1",
    "http://a..b/",
    "http://" + "a" * 64 + ".com/",
    "http://\uff11\uff12.com/",
    "http://example.com:\uff18\uff10/",
    "http://m\u00fcnchen.de/",
    "urn:x-wait",
    "http:/x",
    "%0A",
    "http://example.com/" + "a" * 2048,
]
_TIMESTAMPS = [
    "2014",
    "20140126200624",
    "201401262006241234",
    "now",
    "",
    "\u0662\u0660\u0661\u0664",
    "\uff12\uff10\uff11\uff14",
    "99999999999999",
    "0",
    "abc",
]
_INTEGERS = [
    "0",
    "1",
    "-1",
    "3",
    "100000",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "9" * 400,
    "\u0661\u0662",
    "1_0",
    " 5",
    "+2",
    "",
]
_REGEXES = [
    "(.*.*)*Z",
    "(a+)+$",
    "x{99999999999}",
    "x{1001}",
    "(a)\\1",
    "(?=a)",
    "(",
    "text/.*",
    "[",
    "a" * 2000,
]
_FILTERS = [
    "!mime:warc/revisit",
    "=status:200",
    "~mime:image/.*",
    "statuscode:2..",
    "!~original:.*css",
    "~4:json",
    "99:x",
]
_PARAMS = {
    "url": st.sampled_from(_URLS),
    "matchType": st.sampled_from(["exact", "prefix", "host", "domain", "bogus", ""]),
    "closest": st.sampled_from(_TIMESTAMPS),
    "from": st.sampled_from(_TIMESTAMPS),
    "to": st.sampled_from(_TIMESTAMPS),
    "limit": st.sampled_from(_INTEGERS),
    "offset": st.sampled_from(_INTEGERS),
    "page": st.sampled_from(_INTEGERS),
    "pageSize": st.sampled_from(_INTEGERS),
    "collapseTime": st.sampled_from(_INTEGERS),
    "sort": st.sampled_from(["closest", "reverse", "asc", "bogus"]),
    "output": st.sampled_from(["cdxj", "json", "text", "link", "bogus"]),
    "fl": st.sampled_from(["urlkey,timestamp,url", "original,statuscode", "bogus", ","]),
    "sources": st.sampled_from(["local", "!cdx", "nope", "*", "local,memento"]),
    "allowFuzzy": st.sampled_from(["0", "1", "false", ""]),
    "resolveRevisits": st.sampled_from(["true", "false", "maybe"]),
    "showNumPages": st.sampled_from(["true", "false", "maybe"]),
    "showResumeKey": st.sampled_from(["true", "false"]),
    "resumeKey": st.sampled_from(
        [
            "org%2Ciana%29%2F+20140127171238%211",
            "junk",
            "a 1!\u0661",
            "a 20140101!999999999999999999999",
        ]
    ),
    "collapse": st.sampled_from(["urlkey", "timestamp:10", "bogus", "digest:\u0661"]),
    "fastLatest": st.sampled_from(["true", "1"]),
    "gzip": st.sampled_from(["true", "x"]),
}


def _value(name: str) -> st.SearchStrategy[str]:
    if name == "filter":
        regex = st.sampled_from(_REGEXES)
        return st.one_of(
            st.sampled_from(_FILTERS),
            regex.map(lambda r: f"~url:{r}"),
            regex.map(lambda r: f"original:{r}"),
            regex,
            st.text(max_size=40),
        )
    if name not in _PARAMS:
        return st.text()
    # mostly values of the parameter's kind, so that lookups get deep
    return st.one_of(_PARAMS[name], _PARAMS[name], _PARAMS[name], st.text(max_size=40))


_NAMES: Final = (*_PARAMS, "filter")


#: Stands for the upstream's ``host:port`` (filled in by :func:`send`): the
#: only host a live URL may name.
UPSTREAM: Final = "{upstream}"


@st.composite
def _query(draw: st.DrawFn, live: bool) -> str:
    names = draw(st.lists(st.sampled_from(_NAMES), max_size=6))
    if draw(st.integers(0, 9)) > 1 or live:
        names = ["url", *names]
    if live:  # one url, naming the upstream
        names = ["url", *(name for name in names if name != "url")]
    pairs = [(name, draw(_value(name))) for name in names]
    if live:
        pairs[0] = ("url", f"http://{UPSTREAM}/" + draw(st.text(max_size=30)))
    if draw(st.integers(0, 9)) == 0:
        pairs += [("filter", "=status:200")] * draw(st.integers(30, 40))
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


@st.composite
def _wrapped_request(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["POST", "PUT", "GET", "DELETE", "post", "B@D"]))
    target = draw(st.sampled_from(["/post", "http://httpbin.org/post", "*", "/\u00fc", ""]))
    content_type = draw(
        st.sampled_from(
            [
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=Q",
                "multipart/form-data",
                "application/json",
                "text/plain",
                "application/x-amf",
                "",
            ]
        )
    )
    body = draw(st.binary(max_size=200))
    length = draw(st.sampled_from([str(len(body)), "5", "-1", "9" * 30, None]))
    lines = [f"{method} {target} HTTP/1.1", "Host: httpbin.org"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += draw(
        st.lists(
            st.sampled_from(["X: y", "bad line", " folded", "Transfer-Encoding: chunked"]),
            max_size=2,
        )
    )
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body


#: ``Host`` values at the edges of IDNA, UTS #46 and the authority syntax.
_HOSTS: Final = [
    b"\xe9vil.com",  # Latin-1: not UTF-8
    b"\xff\xfe",
    "évil.com".encode(),
    "\u2488.com".encode(),  # ⒈: disallowed, or "1." once mapped (an empty label)
    "\uff45xample\u3002com".encode(),  # full-width letters, ideographic full stop
    "a\u200db.com".encode(),  # a joiner outside its context
    "\u0627\u0644\u0639\u0631\u0628\u064a\u06291.com".encode(),  # Bidi rule
    "a\u0301.com".encode(),  # a combining mark
    "\u00df.de".encode(),
    "\u4f8b\u3048.\u30c6\u30b9\u30c8".encode(),
    b"xn--bcher-kva.example",
    b"xn---bbk.com",  # not the canonical Punycode of its U-label
    b"xn--",
    b"a..b",
    b".",
    b"example.com.",
    b"-a-.com",
    b"r3---sn-x_y.example.com",
    b"a" * 64 + b".com",
    b"a." * 130,
    b"%41.com",
    b"a@b.com",
    b"a b",
    b"\ta.com",
    b"",
    b"   ",
    b"127.0.0.1:8080",
    b"example.com:",
    b"example.com:99999",
    b"example.com:8o",
    b"example.com:1:2",
    b"[::1]:80",
    b"[::1",
    b"[fe80::1%eth0]",
    b"[::1]x",
    "\u0661\u0662.com:\uff18\uff10".encode(),
]
#: Bytes aiohttp takes in a header value (it answers control characters
#: itself, with a plain-text 400 the gateway cannot change).
_HOST_BYTES: Final = [b for b in range(256) if b == 9 or 0x20 <= b != 0x7F]


def _hosts() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(_HOSTS),
        st.lists(st.sampled_from(_HOST_BYTES), max_size=40).map(bytes),
        st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=30).map(
            lambda text: text.encode("utf-8")
        ),
    )


def _encoded_path(text: str) -> str:
    return quote(text, safe="/:?=&%[]@!$'()*+,;~")


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """One request to any route of the fuzzed gateway (see the module docstring)."""
    request = draw(_request())
    if draw(st.integers(0, 3)) == 0:  # a Host of its own, raw bytes as sent
        return replace(request, host=draw(_hosts()))
    return request


@st.composite
def _request(draw: st.DrawFn) -> Request:
    coll = draw(st.sampled_from([*COLLECTIONS, "nope", "", "_status"]))
    kind = draw(st.sampled_from(["get", "get", "get", "post", "memento", "memento", "other"]))
    if kind == "other" and coll == "live":
        coll = "nope"  # a random path could name a raw memento of another host
    query = draw(_query(coll == "live"))
    headers: list[tuple[str, str]] = []
    if draw(st.booleans()):
        headers.append(
            (
                "Accept-Datetime",
                draw(
                    st.sampled_from(
                        ["Sun, 26 Jan 2014 20:07:00 GMT", "yesterday", "", "Sun, 99 Jan 2014"]
                    )
                ),
            )
        )
    if kind == "get":
        route = draw(st.sampled_from(["index", "cdx", "resource"]))
        method = draw(st.sampled_from(["GET", "GET", "HEAD"]))
        return Request(method, f"/{coll}/{route}?{query}", tuple(headers))
    if kind == "post":
        route = draw(
            st.sampled_from(
                [
                    "index",
                    "resource",
                    "resource/postreq",
                    "postreq/resource",
                    "resource-post",
                    "index/postreq",
                    "postreq/index",
                    "postreq",
                ]
            )
        )
        if "post" in route:
            body = draw(st.one_of(_wrapped_request(), st.binary(max_size=300)))
        else:
            body = draw(st.binary(max_size=300))
            headers.append(
                (
                    "Content-Type",
                    draw(
                        st.sampled_from(
                            [
                                "multipart/form-data; boundary=Q",
                                "application/json",
                                "application/x-www-form-urlencoded",
                                "text/plain",
                            ]
                        )
                    ),
                )
            )
        return Request("POST", f"/{coll}/{route}?{query}", tuple(headers), body)
    if kind == "memento":
        url = draw(st.one_of(st.sampled_from(_URLS), st.text(max_size=60)))
        if coll == "live":
            url = f"http://{UPSTREAM}/" + draw(st.text(max_size=30))
        prefix = draw(
            st.sampled_from(
                [
                    "timegate/",
                    "timemap/link/",
                    "timemap/json/",
                    "timemap/cdxj/",
                    "timemap/link/20140126200624/",
                    "timemap/bogus/",
                    "20140126200624id_/",
                    "2014id_/",
                    "\u0662\u0660\u0661\u0664id_/",
                    "",
                ]
            )
        )
        if prefix == "" and not url.lower().startswith("http"):
            url = "http://" + url
        return Request(
            draw(st.sampled_from(["GET", "HEAD"])),
            _encoded_path(f"/{coll}/{prefix}{url}"),
            tuple(headers),
        )
    path = draw(
        st.one_of(st.sampled_from(["/", "/_status", "/_health", "/list_sources"]), st.text())
    )
    method = draw(st.sampled_from(["GET", "OPTIONS", "DELETE", "PUT", "PATCH"]))
    if method == "OPTIONS":
        headers.append(("Access-Control-Request-Method", "GET"))
    target = _encoded_path(f"/{coll}{'' if path.startswith('/') else '/'}{path}")
    return Request(method, target, tuple(headers))


# -- sending and checking ------------------------------------------------------------


def send(port: int, request: Request, upstream_host: str, timeout_s: float) -> Answer:
    """Send ``request`` to 127.0.0.1:``port`` on a new connection; its answer.

    :data:`UPSTREAM` in the target is replaced by ``upstream_host`` (live
    URLs name the upstream on 127.0.0.1). Raises ``TimeoutError`` past
    ``timeout_s``.
    """
    target = request.target.replace(quote(UPSTREAM, safe=""), upstream_host)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    started = time.monotonic()
    try:
        conn.putrequest(
            request.method, target, skip_host=request.host is not None, skip_accept_encoding=True
        )
        if request.host is not None:
            conn.putheader("Host", request.host)
        for name, value in request.headers:
            conn.putheader(name, value.encode("utf-8"))
        if request.body or request.method == "POST":
            conn.putheader("Content-Length", str(len(request.body)))
        conn.endheaders(request.body or None)
        response = conn.getresponse()
        body = response.read()
        return Answer(
            response.status,
            response.getheader("Content-Type", ""),
            body,
            time.monotonic() - started,
        )
    finally:
        conn.close()


def problems(request: Request, answer: Answer) -> list[str]:
    """What is wrong with ``answer`` (empty when nothing): the fuzzing property."""
    found = []
    if answer.status >= 500:
        found.append(f"{answer.status} {answer.body[:300]!r}")
    if 400 <= answer.status < 500 and request.method != "HEAD":
        try:
            message = json.loads(answer.body).get("message")
        except (ValueError, AttributeError):
            message = None
        if not isinstance(message, str) or "json" not in answer.content_type:
            found.append(f"{answer.status} without a JSON message: {answer.body[:300]!r}")
    if answer.elapsed_s > GROUP_TIMEOUT_S + MARGIN_S:
        found.append(f"answered after {answer.elapsed_s:.1f} s")
    return found
