"""``gateway serve`` warns when a collection that records is open beyond loopback.

The warning is checked by calling the start-up step with the address
``gateway serve --host`` would bind (nothing is bound: tests listen on
127.0.0.1 only).
"""

from __future__ import annotations

import logging

import pytest

from gateway.access.tokens import token_sha256
from gateway.cli import _warn_open_recording
from gateway.config import parse_config

RECORDING = """\
collections:
  live:
    index: {type: live}
    record: true
  stored: $store
"""
AUTH = f"""\
auth:
  tokens: [{{sha256: {token_sha256("record-token-0123456789")}, scopes: [record]}}]
  require: {{admin: []}}
"""


@pytest.mark.parametrize(
    ("config", "host", "warned"),
    [
        (RECORDING, "0.0.0.0", True),
        (RECORDING, "192.0.2.10", True),
        (RECORDING, "archive.example.org", True),
        (RECORDING, "127.0.0.1", False),
        (RECORDING, "::1", False),
        (RECORDING, "localhost", False),
        (RECORDING + AUTH, "0.0.0.0", False),
        ("collections:\n  stored: $store\n", "0.0.0.0", False),
    ],
)
def test_open_recording_is_a_warning(
    caplog: pytest.LogCaptureFixture, config: str, host: str, warned: bool
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.cli"):
        _warn_open_recording(parse_config(config), host)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert bool(messages) == warned, messages
    if warned:
        assert messages[0].startswith(
            f"anyone who reaches {host} can make the collection(s) live fetch and record"
        )
        assert "docs/access-tokens.md" in messages[0]
