"""The README's configuration examples parse: documentation that cannot rot silently."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.config import parse_config

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_yaml_example_in_the_readme_is_a_valid_config() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    configs = [block for block in blocks if "collections:" in block]
    assert len(configs) >= 3
    for block in configs:
        config = parse_config(block)
        assert config.collections, block
