"""Fixtures for API tests: a gateway app over the pywb sample archive."""

from __future__ import annotations

from pathlib import Path

import pytest


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
  zip:
    index: {s}/zipcdx/zipnum-sample.idx
    resource: {s}/warcs/
"""
