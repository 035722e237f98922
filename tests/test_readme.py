"""The documentation's configuration examples parse: documentation that cannot rot silently.

The documentation is ``README.md`` and every page under ``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def documentation_pages() -> list[Path]:
    """``README.md`` and every ``docs/*.md`` page, in a fixed order."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_every_yaml_example_in_the_documentation_is_a_valid_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/access-tokens.md reads a token from the environment, as its page exports it.
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "example-admin-token-replace-me")
    configs = []
    for page in documentation_pages():
        blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        configs += [(page.name, block) for block in blocks if "collections:" in block]
    assert len(configs) >= 3
    for name, block in configs:
        config = parse_config(block)
        assert config.collections, f"{name}:\n{block}"
