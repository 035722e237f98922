"""CaptureQuery parsing: pywb warcserver parameter semantics and 400s for bad input."""

from __future__ import annotations

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.ia_query import parse_ia_query
from gateway.cdx.query import CaptureQuery, CdxFilter, key_range, parse_query
from gateway.errors import BadRequest


def q(**params: str | list[str]) -> dict[str, list[str]]:
    return {k: v if isinstance(v, list) else [v] for k, v in params.items()}


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/a?b=2&a=1",
        "https://www.example.com/a?a=1&b=2",
        "http://EXAMPLE.com:80/a?a=1&b=2",
        "example.com/a?b=2&a=1",
    ],
)
def test_canonicalization_ignores_scheme_www_port_case_and_param_order(url: str) -> None:
    assert parse_query(q(url=url)).key == "com,example)/a?a=1&b=2"


def test_wildcards_set_match_type() -> None:
    domain = parse_query(q(url="*.example.com"))
    assert (domain.match_type, domain.key, domain.end_key) == (
        "domain",
        "com,example)/",
        "com,example-",
    )
    prefix = parse_query(q(url="http://example.com/path/*"))
    assert (prefix.match_type, prefix.key, prefix.end_key) == (
        "prefix",
        "com,example)/path/",
        "com,example)/path0",
    )


def test_key_ranges_match_pywb_calc_search_range() -> None:
    # pywb/utils/canonicalize.py doctests
    assert key_range("http://example.com/path?", "prefix") == (
        "com,example)/path?",
        "com,example)/path@",
    )
    assert key_range("http://example.com/path/file.html", "host") == (
        "com,example)/",
        "com,example*",
    )


def test_from_and_to_are_padded_like_pywb() -> None:
    query = parse_query(q(url="example.com", **{"from": "2014", "to": "201402"}))
    # warcio PAD_14_UP pads as text ("...0231..."): timestamps compare as text
    assert (query.from_ts, query.to_ts) == ("20140101000000", "20140231235959")


def test_closest_is_padded_toward_the_end_of_its_period_as_pywb_pads_it() -> None:
    # warcio timestamp_to_datetime, which pywb's cdx_sort_closest measures from
    query = parse_query(q(url="example.com", closest="2014"))
    assert (query.closest, query.sort) == ("20141231235959", "closest")
    assert parse_query(q(url="example.com", closest="201402")).closest == "20140228235959"
    assert parse_query(q(url="example.com", closest="now")).closest is not None


@pytest.mark.parametrize(
    ("params", "param"),
    [
        (q(), "url"),
        (q(url=""), "url"),
        (q(url="example.com", matchType="everything"), "matchType"),
        (q(url="example.com", closest="abc"), "closest"),
        (q(url="example.com", closest="201401011200001"), "closest"),
        (q(url="example.com", limit="abc"), "limit"),
        (q(url="example.com", limit="-3"), "limit"),
        (q(url="example.com", filter="~url:("), "filter"),
        (q(url="example.com", output="xml"), "output"),
        (q(url="example.com", sort="sideways"), "sort"),
        (q(url="example.com", sort="closest"), "sort"),
        (q(url="example.com", **{"from": "2014-01"}), "from"),
        (q(url="example.com", to="x"), "to"),
        (q(url=["a.com", "b.com"]), "url"),
    ],
)
def test_bad_input_names_the_parameter(params: dict[str, list[str]], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_query(params)
    assert info.value.param == param
    assert info.value.status == 400


def test_filters_follow_pywb_syntax() -> None:
    record = CdxRecord.parse(
        'com,example)/ 20140127171200 {"url": "http://example.com", "mime": "text/html", '
        '"status": "200"}'
    )
    assert CdxFilter.parse("=status:200")(record)
    assert not CdxFilter.parse("!=status:200")(record)
    assert CdxFilter.parse("mime:html")(record)
    assert CdxFilter.parse("~mime:text/.*")(record)
    assert not CdxFilter.parse("~mime:html")(record)  # regex anchored at the start
    assert CdxFilter.parse("statuscode:200")(record)  # IA alias
    assert CdxFilter.parse("example.com")(record)  # no field: the whole line


def test_sources_selection() -> None:
    assert parse_query(q(url="a.com", sources="x,y")).sources == ("x", "y")
    excluded = parse_query(q(url="a.com", sources="!x"))
    assert (excluded.sources, excluded.exclude_sources) == (("x",), True)


def test_urls_from_archived_records_are_looked_up_as_archived() -> None:
    # A client's URL must parse (400 otherwise); a URL read from a record, as
    # a revisit's original is looked up, is taken as the archive holds it.
    with pytest.raises(ValueError, match="not a valid IDNA name"):
        CaptureQuery.for_url("http://a..b/")
    assert CaptureQuery.for_url("http://a..b/", check=False).key == "b,a)/"


# -- hosts: validated and normalised once (gateway.cdx.hosts) ---------------------------


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
        ("http://B%C3%BCcher.example/a", "http://xn--bcher-kva.example/a"),  # escapes decoded
        ("Bücher.example/a?q=ü", "xn--bcher-kva.example/a?q=ü"),  # schemeless stays so
        ("http://EXAMPLE.com:0080/", "http://example.com:80/"),
        ("http://\uff45xample.com/", "http://example.com/"),  # full-width: UTS #46
        ("http://r3---sn-x_y.example.com/", "http://r3---sn-x_y.example.com/"),  # DNS names
        ("http://%5B::1%5D/", "http://[::1]/"),
        ("example.com:8080/a", "example.com:8080/a"),  # a host and port, not a scheme
        (" http://example.com/\n", "http://example.com/"),  # as urlsplit and SURT read it
        ("http:////Bücher.example/", "http://xn--bcher-kva.example/"),  # the host SURT reads
        ("//Bücher.example/a", "xn--bcher-kva.example/a"),  # scheme-relative
        ("http://https://Bücher.example/", "https://xn--bcher-kva.example/"),
    ],
)
def test_a_valid_host_is_normalised_in_the_query(url: str, normalised: str) -> None:
    query = parse_query(q(url=url))
    assert query.url == normalised
    assert query.key == key_range(normalised, "exact")[0]
    assert CaptureQuery.for_url(url).url == normalised
    assert parse_ia_query(q(url=url)).base.url == normalised


def test_an_idna_host_has_the_key_of_its_a_label() -> None:
    query = parse_query(q(url="http://Bücher.example/"))
    assert query.url == "http://xn--bcher-kva.example/"
    assert query.key == "example,xn--bcher-kva)/"
    domain = parse_query(q(url="*.Bücher.example"))
    assert (domain.url, domain.match_type) == ("xn--bcher-kva.example", "domain")


@pytest.mark.parametrize(
    "url",
    [
        "http://\u2488.com/",  # ⒈: disallowed, or "1." once mapped: an empty label
        "//\u2488.com/",  # $live fetches it as http://⒈.com/
        "http:////\u2488.com/",  # SURT reads the host after the slashes
        "http://a..b/",
        "http://xn---bbk.com/",  # not the canonical Punycode of its U-label
        "http://a\u200db.com/",  # ZERO WIDTH JOINER outside its context
        "http://%E9vil.com/",  # escapes that are not UTF-8
        "http://a b.com/",
        "http://[fe80::1%25eth0]/",  # no zones in URLs
        "http://example.com:\uff18\uff10/",
        "http://example.com:65536/",
    ],
)
def test_a_host_idna_refuses_is_a_400_naming_url(url: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_query(q(url=url))
    assert caught.value.param == "url"
    assert "cannot parse URL" in caught.value.problem
    with pytest.raises(BadRequest) as ia:
        parse_ia_query(q(url=url))
    assert ia.value.param == "url"
    with pytest.raises(ValueError, match="cannot parse URL"):
        CaptureQuery.for_url(url)
