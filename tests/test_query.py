"""CaptureQuery parsing: pywb warcserver parameter semantics and 400s for bad input."""

from __future__ import annotations

import pytest

from gateway.cdx.cdxj import CdxRecord
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
