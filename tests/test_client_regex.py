"""Client regexes run on RE2: linear time, 400s for what RE2 refuses, bounds."""

from __future__ import annotations

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.client_regex import (
    MAX_FILTERS,
    MAX_PATTERN_CHARS,
    MAX_REPEAT,
    compile_client_regex,
)
from gateway.cdx.ia_query import IaFilter, parse_ia_query
from gateway.cdx.query import CdxFilter, parse_query
from gateway.errors import BadRequest

LONG_URL = "http://example.com/" + "a" * 2048
RECORD = CdxRecord.parse(f'com,example)/{"a" * 2048} 20140101000000 {{"url": "{LONG_URL}"}}')


@pytest.mark.parametrize(
    "pattern",
    ["(.*.*)*Z", "(a+)+$", "(a|aa)*b", "(x+x+)+y", "((a*)*)*b", "(.*){1,32}Z"],
)
def test_catastrophic_patterns_answer_at_once_on_a_long_url(pattern: str) -> None:
    # Python's re takes minutes (or forever) on these; RE2 is linear in the text.
    assert not CdxFilter.parse(f"~url:{pattern}")(RECORD)
    assert IaFilter.parse(f"!original:{pattern}")(RECORD)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(a)\\1", "invalid escape sequence"),
        ("(?=a)b", "invalid perl operator"),
        ("(?<!a)b", "invalid perl operator"),
        ("(", "missing )"),
        ("x{1001}", "repeat count 1001"),
        ("x{99999999999}", "repeat count 99999999999"),
        ("x{2,99999999999}", "repeat count 99999999999"),
    ],
)
def test_patterns_re2_refuses_are_a_400_naming_the_filter(pattern: str, why: str) -> None:
    for parse in (
        lambda: parse_query({"url": ["example.com"], "filter": [f"~url:{pattern}"]}),
        lambda: parse_ia_query({"url": ["example.com"], "filter": [f"original:{pattern}"]}),
    ):
        with pytest.raises(BadRequest) as info:
            parse()
        assert info.value.param == "filter"
        assert repr(pattern)[1:-1] in info.value.message
        assert why in info.value.message


def test_braces_that_are_not_repeats_are_not_counted() -> None:
    for pattern in ("\\{99999}", "[{]99999}", "a{,5}", "[]{99999}]"):
        compile_client_regex(pattern, filter_text=pattern)
    assert compile_client_regex(f"x{{{MAX_REPEAT}}}", filter_text="x").fullmatch("x" * MAX_REPEAT)


def test_python_end_anchor_is_read_as_re2s() -> None:
    assert CdxFilter.parse("~url:.*html\\Z")(CdxRecord.parse('a)/ 2014 {"url": "a.html"}'))


def test_pattern_length_and_filter_count_are_bounded() -> None:
    long_pattern = "a" * (MAX_PATTERN_CHARS + 1)
    with pytest.raises(BadRequest, match=f"at most {MAX_PATTERN_CHARS}"):
        parse_query({"url": ["example.com"], "filter": [f"~url:{long_pattern}"]})
    # a long "contains" filter is no pattern: not bounded by the pattern length
    parse_query({"url": ["example.com"], "filter": [f"url:{long_pattern}"]})
    many = [f"!=status:{n}" for n in range(MAX_FILTERS + 1)]
    for parse in (
        lambda: parse_query({"url": ["example.com"], "filter": many}),
        lambda: parse_ia_query({"url": ["example.com"], "filter": many}),
    ):
        with pytest.raises(BadRequest, match=f"at most {MAX_FILTERS}"):
            parse()
    parse_query({"url": ["example.com"], "filter": many[:MAX_FILTERS]})


def test_a_pattern_is_compiled_once() -> None:
    first = CdxFilter.parse("~mime:image/(png|gif)")
    assert CdxFilter.parse("~mime:image/(png|gif)").regex is first.regex


def test_re2_does_not_echo_a_refused_pattern_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadRequest):
        compile_client_regex("(?=secret-pattern)", filter_text="x")
    out, err = capfd.readouterr()
    assert "secret-pattern" not in out + err
