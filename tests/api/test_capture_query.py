"""capture_query: Index/Resource API parameters parsed once per query string."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.api.common import capture_query
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
