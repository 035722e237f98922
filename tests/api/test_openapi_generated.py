"""Requests generated from ``/openapi.json`` (schemathesis) get no server error.

The OpenAPI document is the source of what a property test may send: every
operation is driven with a bounded number of generated requests
(deterministic: hypothesis derandomized), against a gateway serving the
sample archive on 127.0.0.1. A 5xx other than 503 (every source failed) is a
failure; 4xx answers are the point (bad input gets a clear error).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Err

from gateway.api.openapi import openapi_document
from tests.conftest import REPO_ROOT, _http_get, _start_until_ready

EXAMPLES_PER_OPERATION = 10


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("generated")
    config = workdir / "collections.yaml"
    config.write_text(
        f"collections:\n  pywb:\n    index: {sample_dir}/cdxj/\n    resource: {sample_dir}/warcs/\n"
    )
    gateway = REPO_ROOT / ".venv" / "bin" / "gateway"
    command = [str(gateway)] if gateway.exists() else ["gateway"]

    def argv(port: int) -> list[str]:
        return [*command, "serve", "--config", str(config), "--port", str(port)]

    server, port = _start_until_ready(
        "gateway", argv, workdir, lambda p: _http_get(p, "/_health") is not None
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_generated_requests_get_no_server_error(gateway_url: str) -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            pytest.fail(f"schemathesis cannot read an operation: {result.err()}")
        operations.append(result.ok())
    assert len(operations) >= 30
    failures: list[str] = []
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: schemathesis.Case[Any]) -> None:
            response = case.call(base_url=gateway_url, timeout=30)
            if response.status_code >= 500 and response.status_code != 503:
                failures.append(
                    f"{case.method} {response.request.url}: {response.status_code} "
                    f"{response.text[:200]}"
                )

        call()
    assert not failures, "\n".join(failures[:20])
