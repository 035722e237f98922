"""The ``auth:`` section: tokens as SHA-256 digests or from the environment, scopes,
what requires them; every problem named by its YAML path; digests compared in
constant time (:func:`hmac.compare_digest`, read in the code, not timed)."""

from __future__ import annotations

import hashlib
import inspect

import pytest

from gateway.access.tokens import (
    AuthSettings,
    check_token,
    new_token,
    token_sha256,
)
from gateway.config import parse_config
from gateway.errors import ConfigError

RECORD_TOKEN = "record-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789ab"


def _config(auth: str) -> AuthSettings:
    return parse_config(f"collections: {{}}\nauth:\n{auth}").auth


def _error(auth: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _config(auth)
    return str(caught.value)


def test_no_auth_section_requires_nothing() -> None:
    settings = parse_config("collections: {}\n").auth
    assert not settings.enabled
    assert settings.tokens == ()


def test_tokens_from_digests_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    settings = _config(
        f"""\
  realm: archive gateway
  tokens:
    - sha256: {token_sha256(RECORD_TOKEN)}
      scopes: [record]
    - env: GATEWAY_ADMIN_TOKEN
      scopes: [admin, record]
  require:
    admin: [/_jobs, /metrics]
"""
    )
    assert settings.realm == "archive gateway"
    assert settings.require_record  # the default
    assert settings.require_admin == {"/_jobs", "/metrics"}
    record = settings.match(RECORD_TOKEN)
    admin = settings.match(ADMIN_TOKEN)
    assert record is not None
    assert record.scopes == {"record"}
    assert admin is not None
    assert admin.scopes == {"admin", "record"}
    assert admin.path == "auth.tokens[1]"
    assert settings.match(RECORD_TOKEN + "x") is None
    assert settings.match("") is None
    # The environment's token is kept as its digest only.
    assert admin.digest == hashlib.sha256(ADMIN_TOKEN.encode()).digest()
    assert ADMIN_TOKEN not in repr(settings)


def test_defaults_require_record_and_jobs() -> None:
    settings = _config(
        f"  tokens:\n    - {{sha256: {token_sha256(RECORD_TOKEN)}, scopes: [record, admin]}}\n"
    )
    assert settings.require_record
    assert settings.require_admin == {"/_jobs"}
    assert settings.enabled


def test_upper_case_hex_is_the_same_digest() -> None:
    digest = token_sha256(RECORD_TOKEN).upper()
    settings = _config(
        f"  tokens: [{{sha256: {digest}, scopes: record}}]\n  require: {{admin: []}}\n"
    )
    assert settings.match(RECORD_TOKEN) is not None


@pytest.mark.parametrize(
    ("auth", "path", "words"),
    [
        ("  tokens: []\n", "auth.tokens", "non-empty list"),
        ("  token: []\n", "auth.token", "unknown key"),
        ("  tokens: [{sha256: abc, scopes: [record]}]\n", "auth.tokens[0].sha256", "64 hex"),
        (
            f"  tokens: [{{sha256: {token_sha256(RECORD_TOKEN)}, scopes: [write]}}]\n",
            "auth.tokens[0].scopes[0]",
            "'write' is not a scope",
        ),
        (
            f"  tokens: [{{sha256: {token_sha256(RECORD_TOKEN)}, scopes: []}}]\n",
            "auth.tokens[0].scopes",
            "non-empty",
        ),
        ("  tokens: [{scopes: [record]}]\n", "auth.tokens[0]", "exactly one of sha256"),
        (
            f"  tokens: [{{sha256: {token_sha256(RECORD_TOKEN)}}}]\n",
            "auth.tokens[0].scopes",
            "non-empty list of scopes (record, admin)",
        ),
        (
            "  tokens: [{env: GATEWAY_NO_SUCH_TOKEN_VAR, scopes: [record]}]\n",
            "auth.tokens[0].env",
            "GATEWAY_NO_SUCH_TOKEN_VAR is not set",
        ),
        ("  tokens: [{env: 'not a name', scopes: [record]}]\n", "auth.tokens[0].env", "name"),
        (
            f"  tokens:\n    - {{sha256: {token_sha256(RECORD_TOKEN)}, scopes: [record]}}\n"
            f"    - {{sha256: {token_sha256(RECORD_TOKEN)}, scopes: [admin]}}\n",
            "auth.tokens[1]",
            "the same token as auth.tokens[0]",
        ),
        (
            f"  tokens: [{{sha256: {token_sha256(RECORD_TOKEN)}, scopes: [record]}}]\n",
            "auth.require.admin",
            "no token in auth.tokens has it",
        ),
        (
            f"  tokens: [{{sha256: {token_sha256(ADMIN_TOKEN)}, scopes: [admin]}}]\n",
            "auth.require.record",
            "set require.record: false",
        ),
        (
            f"  tokens: [{{sha256: {token_sha256(ADMIN_TOKEN)}, scopes: [admin, record]}}]\n"
            "  require: {admin: [/_health]}\n",
            "auth.require.admin[0]",
            "not an operator route",
        ),
        (
            f"  tokens: [{{sha256: {token_sha256(ADMIN_TOKEN)}, scopes: [admin, record]}}]\n"
            "  require: {record: yes please}\n",
            "auth.require.record",
            "true or false",
        ),
        (
            f"  realm: 'a \"quoted\" realm'\n"
            f"  tokens: [{{sha256: {token_sha256(ADMIN_TOKEN)}, scopes: [admin, record]}}]\n",
            "auth.realm",
            "without",
        ),
    ],
)
def test_every_problem_names_its_yaml_path(auth: str, path: str, words: str) -> None:
    message = _error(auth)
    assert message.startswith(f"{path}: "), message
    assert words in message, message


def test_a_token_in_place_of_its_digest_is_not_echoed() -> None:
    message = _error(f"  tokens: [{{sha256: {RECORD_TOKEN}, scopes: [record]}}]\n")
    assert "auth.tokens[0].sha256" in message
    assert "gateway token hash" in message
    assert RECORD_TOKEN not in message


def test_an_environment_token_must_be_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "short")
    message = _error("  tokens: [{env: GATEWAY_ADMIN_TOKEN, scopes: [admin, record]}]\n")
    assert message.startswith("auth.tokens[0].env: "), message
    assert "expected at least 16" in message
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "a token with spaces in it")
    message = _error("  tokens: [{env: GATEWAY_ADMIN_TOKEN, scopes: [admin, record]}]\n")
    assert "b64token" in message
    assert "spaces in it" not in message


def test_new_tokens_are_valid_random_and_long() -> None:
    made = {new_token() for _ in range(100)}
    assert len(made) == 100
    for token in made:
        assert check_token(token) is None
        assert len(token) == 43


def test_match_compares_every_digest_in_constant_time() -> None:
    """Code review as a test: the digest is compared with hmac.compare_digest,
    never with ``==``, and the loop does not stop at the first match."""
    source = inspect.getsource(AuthSettings.match)
    assert "hmac.compare_digest(entry.digest, digest)" in source
    assert "==" not in source
    assert "break" not in source
    assert "return found" in source
    assert "hashlib.sha256(token.encode()).digest()" in source
