"""API helpers: parameters parsed once per query string, error header values."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.api.common import capture_query, errors_header_value
from gateway.errors import BadRequest


def test_the_same_query_string_is_parsed_once() -> None:
    first = capture_query(make_mocked_request("GET", "/c/index?url=example.com&limit=3"))
    again = capture_query(make_mocked_request("GET", "/other/resource?url=example.com&limit=3"))
    assert again is first
    assert (first.key, first.limit) == ("com,example)/", 3)
    other = capture_query(make_mocked_request("GET", "/c/index?url=example.com&limit=4"))
    assert other is not first
    assert other.limit == 4


def test_closest_now_is_parsed_every_time() -> None:
    path = "/c/index?url=example.com&closest=now"
    first = capture_query(make_mocked_request("GET", path))
    assert first.closest is not None
    assert len(first.closest) == 14
    assert capture_query(make_mocked_request("GET", path)) is not first


def test_bad_input_is_a_bad_request_every_time() -> None:
    for _ in range(2):
        with pytest.raises(BadRequest) as info:
            capture_query(make_mocked_request("GET", "/c/index?url=example.com&limit=abc"))
        assert info.value.status == 400
        assert "limit" in str(info.value.to_json())


def test_error_header_values_follow_the_content_not_the_dict() -> None:
    outage = {"web": "ok", "ia": "connection refused"}
    first = errors_header_value(outage)
    assert json.loads(first) == outage
    assert list(json.loads(first)) == ["web", "ia"]  # config order kept
    assert errors_header_value(dict(outage)) is first
    outage["ia"] = "timeout after 5 s"  # the same dict, changed: a new value
    assert json.loads(errors_header_value(outage)) == {"web": "ok", "ia": "timeout after 5 s"}
    swapped = {"ia": "connection refused", "web": "ok"}
    assert list(json.loads(errors_header_value(swapped))) == ["ia", "web"]


def test_an_oversized_error_header_is_cut_to_a_summary() -> None:
    errors = {f"member{i}": "x" * 100 for i in range(200)}
    for _ in range(2):
        value = errors_header_value(errors)
        assert json.loads(value) == {"truncated": "200 errors; see the logs"}
