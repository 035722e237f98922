"""Fixtures for API tests: a gateway app over the pywb sample archive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import parse_config

MakeClient = Callable[[str], Awaitable[TestClient]]  # type: ignore[type-arg]


@pytest.fixture
def make_client(aiohttp_client: Callable[..., Awaitable[TestClient]]) -> MakeClient:  # type: ignore[type-arg]
    """Build a test client for a collections.yaml text."""

    async def make(yaml_text: str) -> TestClient:  # type: ignore[type-arg]
        return await aiohttp_client(create_app(parse_config(yaml_text)))

    return make


@pytest.fixture
def sample_yaml(sample_dir: Path) -> str:
    """The README's example config over ../shared/data/pywb-sample."""
    s = sample_dir
    return f"""
collections:
  pywb:
    index: {s}/cdxj/
    resource: {s}/warcs/
  iana:
    index: {s}/cdxj/iana.cdxj
    resource: {s}/warcs/
  example:
    index: {s}/cdxj/example.cdxj
    resource: {s}/warcs/
"""
