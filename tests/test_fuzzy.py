"""Fuzzy matching (gateway.index.fuzzy): rules, widened lookups, accepted captures, config.

The answers pywb 2.10 gives for the same lookups on the sample archive are
compared in tests/api/test_differential.py; here each branch of the rules is
pinned on captures and rules files written by the tests.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest
import yaml

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.query import CaptureQuery, CdxFilter, key_range, parse_query
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.index.fuzzy import DEFAULT_RULES, FuzzyRules, load_rules, parse_rules
from tests.conftest import REPO_ROOT, MakeClient


def exact(url: str, **params: str) -> CaptureQuery:
    return parse_query({"url": [url], **{k: [v] for k, v in params.items()}})


def capture(url: str, timestamp: str = "20200101000000", **fields: str) -> CdxRecord:
    return CdxRecord(canonical_urlkey(url), timestamp, {"url": url, **fields})


def rules_from(text: str) -> FuzzyRules:
    return parse_rules(yaml.safe_load(text))


def pywb_filters(query: CaptureQuery) -> list[CdxFilter]:
    """The query's filters, each checked to be a pywb-syntax filter."""
    found = list(query.filters)
    assert all(isinstance(f, CdxFilter) for f in found)
    return [f for f in found if isinstance(f, CdxFilter)]


# ------------------------------------------------------------------ widening
def test_only_exact_api_lookups_are_widened() -> None:
    assert DEFAULT_RULES.widen(exact("http://example.com/a.js?_=1")) is not None
    assert DEFAULT_RULES.widen(exact("http://example.com/a.js", matchType="prefix")) is None
    assert DEFAULT_RULES.widen(exact("http://example.com/a.js?_=1", allowFuzzy="0")) is None
    # Lookups built in code (revisit resolution, Memento endpoints) never are.
    assert DEFAULT_RULES.widen(CaptureQuery.for_url("http://example.com/a.js?_=1")) is None


@pytest.mark.parametrize(
    ("text", "allowed"),
    [(None, True), ("1", True), ("yes", True), ("", False), ("0", False), ("False", False),
     ("f", False), ("OFF", False)],
)  # fmt: skip
def test_allow_fuzzy_reads_as_pywb_to_bool(text: str | None, allowed: bool) -> None:
    params = {"url": ["example.com"]} | ({"allowFuzzy": [text]} if text is not None else {})
    assert parse_query(params).allow_fuzzy is allowed


@pytest.mark.parametrize(
    ("url", "widened_url"),
    [
        ("http://example.com/app.js?_=1390766400", "http://example.com/app.js"),
        # the '/' before a dropped '?' goes too
        ("http://example.com/dir/?page=2", "http://example.com/dir"),
        # nothing to cut: the same URL, as a prefix
        ("http://example.com/a", "http://example.com/a"),
    ],
)
def test_the_generic_rule_cuts_the_query_and_searches_by_prefix(url: str, widened_url: str) -> None:
    original = exact(url, closest="20200101", filter="!status:404", output="json")
    widened = DEFAULT_RULES.widen(original)
    assert widened is not None
    q = widened.query
    assert (q.url, q.match_type, q.fuzzy) == (widened_url, "prefix", True)
    assert (q.key, q.end_key) == key_range(widened_url, "prefix")
    # Everything else of the request is kept: order, filters, output.
    assert (q.closest, q.sort, q.filters, q.output) == (
        original.closest,
        "closest",
        original.filters,
        "json",
    )
    assert q.limit == 100


def test_a_site_rule_with_query_args_filters_on_their_values() -> None:
    rules = rules_from(
        """
rules:
  - url_prefix: 'com,example)/api'
    fuzzy_lookup: [page, id]
  - url_prefix: ''
    fuzzy_lookup: '()'
"""
    )
    widened = rules.widen(exact("http://example.com/api?page=2&_=99&id=7"))
    assert widened is not None
    q = widened.query
    # The '?' stays: the filters pick the captures.
    assert q.url == "http://example.com/api?"
    assert sorted((f.field, f.mode, f.value) for f in pywb_filters(q)) == [
        ("urlkey", "contains", "id=7"),
        ("urlkey", "contains", "page=2"),
    ]
    # A site rule's captures are all accepted; the generic rule's are checked.
    assert widened.accepts(capture("http://example.com/api?id=7&page=2&x=1"))
    generic = rules.widen(exact("http://example.com/other?id=7"))
    assert generic is not None
    assert generic.rule.is_generic
    assert not generic.accepts(capture("http://example.com/other?id=8"))


def test_a_rule_that_does_not_match_falls_to_the_next() -> None:
    rules = rules_from(
        """
rules:
  - url_prefix: 'com,example)/api'
    fuzzy_lookup: [page]
"""
    )
    assert rules.widen(exact("http://example.com/api?id=1")) is None
    assert rules.widen(exact("http://example.org/api?page=1")) is None
    assert rules.widen(exact("http://example.com/api?page=1")) is not None


def test_sub_findall_domain_and_replace_forms() -> None:
    rules = rules_from(
        r"""
rules:
  - url_prefix: 'com,example,cdn'
    fuzzy_lookup:
      match: 'v\d+/'
      re_type: sub
      replace: ''
      type: exact
  - url_prefix: 'com,example)/img'
    fuzzy_lookup:
      match: '(\d+)'
      re_type: findall
      filter: ['~urlkey:{0}']
  - url_prefix: 'com,example,shop)'
    fuzzy_lookup:
      match: '()'
      type: domain
  - url_prefix: 'com,example,news)'
    fuzzy_lookup:
      match: '(id=\d+)'
      replace: '/story'
"""
    )
    sub = rules.widen(exact("http://cdn.example.com/v12/app.js"))
    assert sub is not None
    assert (sub.query.url, sub.query.match_type, sub.query.filters) == (
        "http://cdn.example.com/app.js",
        "exact",
        (),
    )
    findall = rules.widen(exact("http://www.example.com/img/12/34.png"))
    assert findall is not None
    assert sorted(f.value for f in pywb_filters(findall.query)) == ["12", "34"]
    assert {f.mode for f in pywb_filters(findall.query)} == {"regex"}
    domain = rules.widen(exact("http://shop.example.com/cart"))
    assert domain is not None
    assert (domain.query.url, domain.query.match_type) == ("example.com", "domain")
    cut = rules.widen(exact("http://news.example.com/a/story?id=5"))
    assert cut is not None
    assert cut.query.url == "http://news.example.com/a/story"


# ------------------------------------------------------------------ accepting captures
@pytest.mark.parametrize(
    ("asked", "found", "accepted"),
    [
        # a file: the same path, with any query or none
        ("http://example.com/app.js?_=1", "http://example.com/app.js", True),
        ("http://example.com/app.js?_=1", "http://example.com/app.js?v=3", True),
        ("http://example.com/app.js?_=1", "http://example.com/app.jsx", False),
        # a script (not_exts): its query counts, so only normalization helps
        ("http://example.com/q.php?id=1", "http://example.com/q.php?id=2", False),
        ("http://example.com/q.php?id=1&uncache=5", "http://example.com/q.php?id=1", True),
        # as in pywb: a buster that sorts first in the urlkey leaves its '&' behind
        ("http://example.com/q.php?id=1&_=5", "http://example.com/q.php?id=1", False),
        # not a file: equal after removing cache busters, campaigns, callbacks
        ("http://example.com/p?utm_source=x&a=1", "http://example.com/p?a=1", True),
        ("http://example.com/p?cb=123", "http://example.com/p", True),
        ("http://example.com/p?callback=jsonp123", "http://example.com/p?callback=jsonp9", True),
        ("http://example.com/p?cb=jQuery1_2", "http://example.com/p?cb=jquery3_4", True),
        ("http://example.com/p?cachebust=1390766400000", "http://example.com/p", True),
        ("http://example.com/p?fbclid=Iw&a=1", "http://example.com/p?a=1", True),
        ("http://example.com/p?a=1", "http://example.com/p?a=2", False),
        ("http://example.com/p", "http://example.com/page", False),
    ],
)
def test_the_generic_rule_accepts_what_pywb_accepts(asked: str, found: str, accepted: bool) -> None:
    widened = DEFAULT_RULES.widen(exact(asked))
    assert widened is not None
    assert widened.accepts(capture(found, mime="text/html")) is accepted


def test_listed_mimes_and_non_get_captures_ignore_the_query() -> None:
    widened = DEFAULT_RULES.widen(exact("http://example.com/stream?token=abc"))
    assert widened is not None
    other = "http://example.com/stream?token=xyz"
    assert widened.accepts(capture(other, mime="application/dash+xml"))
    assert widened.accepts(capture(other, mime="text/html", method="POST"))
    assert not widened.accepts(capture(other, mime="text/html"))


def test_a_captured_cors_preflight_never_stands_in() -> None:
    widened = DEFAULT_RULES.widen(exact("http://example.com/app.js?x=1"))
    assert widened is not None
    preflight = capture(
        "http://example.com/app.js?__pywb_method=options", status="204", mime="text/plain"
    )
    assert not widened.accepts(preflight)


# ------------------------------------------------------------------ rules files and config
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1, 2]", "(top level): expected a mapping"),
        ("rules: {a: 1}", "rules: expected a list"),
        ("rules: [{url_prefix: '', fuzzy_lookup: '(['}]", "rules[0].fuzzy_lookup: invalid regex"),
        (
            "rules: [{url_prefix: '', fuzzy_lookup: {match: '()', type: near}}]",
            "rules[0].fuzzy_lookup.type: 'near' is not one of exact, prefix, host, domain",
        ),
        (
            "rules: [{url_prefix: '', fuzzy_lookup: {match: '()', re_type: all}}]",
            "rules[0].fuzzy_lookup.re_type: 'all' is not one of search, findall, sub",
        ),
        (
            "rules: [{url_prefix: '', fuzzy_lookup: {match: '()', filter: '~urlkey:{0'}}]",
            "rules[0].fuzzy_lookup.filter",
        ),
        ("rules: [{url_prefix: '', fuzzy_lookup: {type: prefix}}]", "rules[0].fuzzy_lookup.match"),
        ("rules: [{url_prefix: 3, fuzzy_lookup: '()'}]", "rules[0].url_prefix"),
        ("default_filters: {fuzzy_search_limit: many}", "default_filters.fuzzy_search_limit"),
        ("default_filters: {url_normalize: [{replace: ''}]}", "default_filters.url_normalize[0]"),
    ],
)
def test_bad_rules_files_stop_start_up_naming_the_place(
    tmp_path: Path, text: str, problem: str
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    with pytest.raises(ConfigError) as caught:
        parse_config(f"collections:\n  web:\n    index: {tmp_path}\n    fuzzy: {rules}\n")
    assert caught.value.path == "collections.web.fuzzy"
    assert str(rules) in caught.value.problem
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [("3", "expected true, false or the path"), ("/nonexistent/rules.yaml", "cannot read")],
)
def test_bad_fuzzy_values_are_config_errors(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"collections:\n  web:\n    index: {tmp_path}\n    fuzzy: {value}\n")
    assert caught.value.path == "collections.web.fuzzy"
    assert problem in caught.value.problem


def test_fuzzy_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    config = parse_config(
        f"""
collections:
  short: {tmp_path}
  full:
    index: {tmp_path}
  without:
    index: {tmp_path}
    fuzzy: false
  steps:
    fuzzy: false
    sequence:
      - index: {tmp_path}
"""
    )
    fuzzy = {name: coll.fuzzy for name, coll in config.collections.items()}
    assert fuzzy == {
        "short": DEFAULT_RULES,
        "full": DEFAULT_RULES,
        "without": None,
        "steps": None,
    }


@pytest.mark.peer
def test_pywbs_own_rules_file_loads_and_applies() -> None:
    [path] = glob.glob(str(REPO_ROOT / ".peers/pywb/lib/python3*/site-packages/pywb/rules.yaml"))
    rules = load_rules(path, "collections.web.fuzzy")
    assert len(rules.rules) > 20
    assert rules.rules[-1].is_generic
    assert rules.normalize
    assert rules.search_limit == 100
    # pywb's twitter rule: the timeline keeps its max_position and include_entities.
    url = "https://twitter.com/i/timeline?include_entities=1&max_position=123&_=1"
    widened = rules.widen(exact(url))
    assert widened is not None
    assert not widened.rule.is_generic
    assert widened.query.url == "https://twitter.com/i/timeline?"
    assert {f.value for f in pywb_filters(widened.query)} == {
        "include_entities=1",
        "max_position=123",
    }


# ------------------------------------------------------------------ through the API
def _write_index(path: Path, urls: list[tuple[str, str]]) -> None:
    lines = sorted(
        f"{canonical_urlkey(url)} {ts} {json.dumps({'url': url, 'filename': 'x.warc.gz'})}"
        for url, ts in urls
    )
    path.write_text("\n".join(lines) + "\n")


async def test_an_exact_capture_in_a_later_step_beats_a_fuzzy_one_in_the_first(
    make_client: MakeClient, tmp_path: Path
) -> None:
    _write_index(tmp_path / "first.cdxj", [("http://example.com/app.js", "20200101000000")])
    _write_index(tmp_path / "second.cdxj", [("http://example.com/app.js?_=1", "20210101000000")])
    client = await make_client(
        f"""
collections:
  seq:
    sequence:
      - name: first
        index: {tmp_path}/first.cdxj
      - name: second
        index: {tmp_path}/second.cdxj
"""
    )
    exact_hit = await client.get("/seq/index", params={"url": "http://example.com/app.js?_=1"})
    assert exact_hit.headers["Warcserver-Step"] == "second"
    assert [CdxRecord.parse(line).timestamp for line in (await exact_hit.text()).splitlines()] == [
        "20210101000000"
    ]
    # No step has it exactly: the first step's fuzzy capture answers.
    fuzzy_hit = await client.get("/seq/index", params={"url": "http://example.com/app.js?_=2"})
    assert fuzzy_hit.headers["Warcserver-Step"] == "first"
    [line] = (await fuzzy_hit.text()).splitlines()
    record = CdxRecord.parse(line)
    assert (record.timestamp, record.get("is_fuzzy")) == ("20200101000000", "1")


async def test_fuzzy_answers_keep_the_requested_limit_and_turn_off(
    make_client: MakeClient, tmp_path: Path
) -> None:
    stamps = [f"2020010{day}000000" for day in range(1, 6)]
    _write_index(tmp_path / "a.cdxj", [("http://example.com/app.js", ts) for ts in stamps])
    client = await make_client(
        f"collections:\n  fuzzy: {tmp_path}/a.cdxj\n"
        f"  exact:\n    index: {tmp_path}/a.cdxj\n    fuzzy: false\n"
    )
    params = {"url": "http://example.com/app.js?_=9", "limit": "2", "output": "json"}
    resp = await client.get("/fuzzy/index", params=params)
    rows = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert [(row["timestamp"], row["is_fuzzy"]) for row in rows] == [
        (stamps[0], "1"),
        (stamps[1], "1"),
    ]
    resp = await client.get("/exact/index", params=params)
    assert (resp.status, await resp.text()) == (200, "")
    resp = await client.get("/exact/resource", params=params)
    assert resp.status == 404


def test_a_rule_filter_made_from_the_url_that_re2_refuses_widens_nothing() -> None:
    # The rule's filter template is filled with a piece of the client's URL;
    # when that is no pattern RE2 takes, there is no wider lookup (never a 400
    # about a filter the client did not send).
    rules = rules_from(
        r"""
rules:
  - url_prefix: 'com,example)/page'
    fuzzy_lookup:
      match: 'page(.*)'
      filter: ['~urlkey:{0}']
"""
    )
    assert rules.widen(exact("http://example.com/page(x")) is None
    widened = rules.widen(exact("http://example.com/page1"))
    assert widened is not None
