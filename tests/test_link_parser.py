"""RFC 8288 Link header and RFC 6690 link-format parsing (gateway.cdx.memento).

The inputs are the ones a naive ``split(",")`` / ``split(";")`` gets wrong:
URLs holding ``,`` and ``;``, quoted values holding ``,`` ``;`` ``<`` ``>``
and escaped quotes, several relation types in one ``rel``, whitespace and
newlines anywhere RFC 9110 allows optional whitespace, empty list elements.
"""

from __future__ import annotations

import doctest

import pytest

import gateway.cdx.memento
from gateway.cdx.memento import Link, parse_link_format, parse_link_header

DATE = "Sun, 26 Jan 2014 20:06:24 GMT"


def test_the_module_doctests_pass() -> None:
    result = doctest.testmod(gateway.cdx.memento)
    assert result.failed == 0
    assert result.attempted >= 8


def test_a_pywb_timegate_link_header() -> None:
    value = (
        '<http://www.iana.org/>; rel="original", '
        '<http://127.0.0.1:8080/pywb/http://www.iana.org/>; rel="timegate", '
        '<http://127.0.0.1:8080/pywb/timemap/link/http://www.iana.org/>; rel="timemap"; '
        'type="application/link-format", '
        f'<http://127.0.0.1:8080/pywb/20140126200624mp_/http://www.iana.org/>; rel="memento"; '
        f'datetime="{DATE}"; collection="pywb"'
    )
    links = parse_link_header(value)
    assert [link.rels for link in links] == [
        ("original",),
        ("timegate",),
        ("timemap",),
        ("memento",),
    ]
    assert links[2].params == {"type": "application/link-format"}
    assert links[3] == Link(
        "http://127.0.0.1:8080/pywb/20140126200624mp_/http://www.iana.org/",
        ("memento",),
        {"datetime": DATE, "collection": "pywb"},
    )


def test_commas_and_semicolons_inside_the_url_do_not_split() -> None:
    value = (
        "<http://a.example/x,y;z?q=1,2;3&r=<>; rel=memento; "
        f'datetime="{DATE}", <http://b.example/;,>; rel="original"'
    )
    links = parse_link_header(value)
    assert [link.url for link in links] == [
        "http://a.example/x,y;z?q=1,2;3&r=<",
        "http://b.example/;,",
    ]
    assert links[0].params == {"datetime": DATE}


def test_quoted_values_keep_commas_semicolons_and_angle_brackets() -> None:
    value = '<http://a/>; title="a, b; <c> d", <http://b/>; title=plain'
    links = parse_link_header(value)
    assert links[0].params == {"title": "a, b; <c> d"}
    assert links[1] == Link("http://b/", (), {"title": "plain"})


def test_backslash_escapes_in_quoted_strings() -> None:
    value = r'<http://a/>; title="say \"hi\", then \\ go; \q", <http://b/>; rel=next'
    links = parse_link_header(value)
    assert links[0].params["title"] == 'say "hi", then \\ go; q'
    assert links[1].rels == ("next",)


def test_several_relation_types_in_one_rel() -> None:
    (link,) = parse_link_header(f'<http://a/>; rel="first  memento\tprev"; datetime="{DATE}"')
    assert link.rels == ("first", "memento", "prev")
    assert link.has_rel("memento")
    assert link.has_rel("first")
    assert not link.has_rel("last")


def test_relation_types_are_lower_cased_but_extension_uris_are_not() -> None:
    (link,) = parse_link_header('<http://a/>; rel="Memento http://Example.org/Rel"')
    assert link.rels == ("memento", "http://Example.org/Rel")


def test_only_the_first_rel_counts_and_first_param_occurrence_wins() -> None:
    (link,) = parse_link_header('<http://a/>; rel=memento; rel=original; type=a; TYPE="b"')
    assert link.rels == ("memento",)
    assert link.params == {"type": "a"}


def test_parameter_names_are_case_insensitive_and_may_lack_a_value() -> None:
    (link,) = parse_link_header('<http://a/>; REL=Next; crossorigin; Anchor = "#x"')
    assert link.rels == ("next",)
    assert link.params == {"crossorigin": "", "anchor": "#x"}


def test_ext_value_parameters_are_kept_as_tokens() -> None:
    (link,) = parse_link_header("<http://a/>; rel=next; title*=UTF-8'de'n%c3%a4chstes")
    assert link.params == {"title*": "UTF-8'de'n%c3%a4chstes"}


def test_whitespace_newlines_and_empty_elements_are_tolerated() -> None:
    value = (
        f' ,, \n<http://a/> ;\n\trel = "memento" ;datetime="{DATE}" ,\r\n , <http://b/>;;rel=x;, '
    )
    links = parse_link_header(value)
    assert [(link.url, link.rels) for link in links] == [
        ("http://a/", ("memento",)),
        ("http://b/", ("x",)),
    ]
    assert links[0].params == {"datetime": DATE}


def test_a_link_without_parameters() -> None:
    assert parse_link_header("<http://a/>,<http://b/>") == [Link("http://a/"), Link("http://b/")]


def test_empty_values() -> None:
    assert parse_link_header("") == []
    assert parse_link_header(" , \n ") == []
    assert parse_link_header('<http://a/>; rel=""; title=')[0] == Link(
        "http://a/", (), {"title": ""}
    )


def test_links_are_hashable_by_url_and_rels() -> None:
    a, b = parse_link_header("<http://a/>; rel=x; t=1, <http://a/>; rel=x; t=2")
    assert hash(a) == hash(b)
    assert a != b


def test_a_link_format_timemap_body() -> None:
    body = (
        '\ufeff<http://arc/timemap/link/http://a/>; rel="self"; '
        f'type="application/link-format"; from="{DATE}",\n'
        '<http://arc/http://a/>; rel="timegate",\n'
        '<http://a/>; rel="original",\n'
        "<http://arc/20140126200624mp_/http://a/?x=1,2;y>; "
        f'rel="first memento"; datetime="{DATE}",\n'
        '<http://arc/20140127171238mp_/http://a/>; rel="last memento";\n'
        '  datetime="Mon, 27 Jan 2014 17:12:38 GMT",\n'
    )
    links = parse_link_format(body)
    assert [link.rels for link in links] == [
        ("self",),
        ("timegate",),
        ("original",),
        ("first", "memento"),
        ("last", "memento"),
    ]
    assert links[0].params["from"] == DATE
    assert links[3].url == "http://arc/20140126200624mp_/http://a/?x=1,2;y"
    assert links[4].params == {"datetime": "Mon, 27 Jan 2014 17:12:38 GMT"}


def test_a_large_timemap_parses_every_link() -> None:
    lines = [
        f'<http://arc/2014{i:010d}mp_/http://a/{i},{i};x>; rel="memento"; datetime="{DATE}"'
        for i in range(20_000)
    ]
    links = parse_link_format(",\n".join(lines) + "\n")
    assert len(links) == 20_000
    assert links[-1].url == "http://arc/20140000019999mp_/http://a/19999,19999;x"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("http://a/; rel=x", "expected '<'"),
        ("<http://a/; rel=x", "unterminated '<'"),
        ('<http://a/>; rel="memento', "unterminated quoted string"),
        ('<http://a/>; title="a\\"', "unterminated quoted string"),
        ("<http://a/> rel=x", "expected ';' or ','"),
        ('<http://a/>; rel="x" junk', "expected ';' or ','"),
        ("<http://a/>; =x", "expected a parameter name"),
        ("<http://a/>; r@l=x", "expected ';' or ','"),
        ("<http://a/>, junk", "expected '<'"),
        ("<!DOCTYPE html>\n<html><body>Not found</body></html>", "expected ';' or ','"),
    ],
)
def test_malformed_values_raise_value_error_naming_the_offset(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match="offset") as caught:
        parse_link_header(value)
    assert problem in str(caught.value)
    with pytest.raises(ValueError, match="link-format body"):
        parse_link_format(value)
