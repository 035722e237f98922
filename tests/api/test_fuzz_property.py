"""Property: nothing a client sends gets a 5xx, a 4xx without a JSON message, or a stall.

hypothesis draws requests over every route and parameter, a quarter of
them with a ``Host`` of their own (raw bytes that are not UTF-8, IDNA and
UTS #46 edge cases, bad ports and IPv6 literals: :mod:`tests.fuzz_support`)
and sends them to a real ``gateway serve``
process whose collections use every source type, the remote ones served by
pywb's wayback on 127.0.0.1. Bounded to about a minute (:data:`EXAMPLES`
requests, or fewer when :data:`BUDGET_S` runs out on a loaded machine). The
server's log must hold no traceback and no ERROR line afterwards.

The long run (the README's figures) is the same test with more requests,
its summary printed::

    GATEWAY_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -s -p no:cacheprovider \
        tests/api/test_fuzz_property.py
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import _http_get, _start_until_ready
from tests.fuzz_support import GROUP_TIMEOUT_S, MARGIN_S, Request, gateway_config, problems, send
from tests.fuzz_support import requests as fuzzed_requests

pytestmark = pytest.mark.peer

#: Requests per run (``GATEWAY_FUZZ_EXAMPLES`` sets it for long runs).
EXAMPLES: Final = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "3000"))
#: In the test command, requests stop being sent after this long (a loaded
#: 2-core machine): the run stays about a minute whatever the load. None for
#: a long run.
BUDGET_S: Final = None if "GATEWAY_FUZZ_EXAMPLES" in os.environ else 60.0
#: Requests that must have been sent within the budget.
MIN_SENT: Final = 500


@pytest.fixture(scope="module")
def fuzzed_gateway(
    tmp_path_factory: pytest.TempPathFactory,
    sample_dir: Path,
    redis_server: str,
    pywb_wayback: str,
) -> Iterator[tuple[int, str, Path]]:
    """``(port, upstream host:port, server log)`` of a gateway over every source type."""
    workdir = tmp_path_factory.mktemp("fuzzed-gateway")
    upstream = pywb_wayback.removeprefix("http://")
    config = workdir / "collections.yaml"
    config.write_text(gateway_config(sample_dir, workdir / "store", redis_server, pywb_wayback))

    def argv(port: int) -> list[str]:
        return [
            sys.executable, "-m", "gateway.cli", "serve",
            "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip

    def ready(port: int) -> bool:
        answer = _http_get(port, "/_health")
        return answer is not None and answer[0] == 200

    server, port = _start_until_ready("gateway", argv, workdir, ready)
    try:
        yield port, upstream, server.stderr_path
    finally:
        server.stop()


@pytest.mark.timeout(600)
def test_no_request_gets_a_5xx_a_bare_4xx_or_stalls(
    fuzzed_gateway: tuple[int, str, Path],
) -> None:
    port, upstream, log = fuzzed_gateway
    timeout_s = GROUP_TIMEOUT_S + MARGIN_S
    statuses: Counter[int] = Counter()
    elapsed: list[float] = []
    stop_at = None if BUDGET_S is None else time.monotonic() + BUDGET_S

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(fuzzed_requests())
    def check(request: Request) -> None:
        if stop_at is not None and time.monotonic() > stop_at:
            return  # over the budget: the remaining examples are not sent
        answer = send(port, request, upstream, timeout_s)
        statuses[answer.status] += 1
        elapsed.append(answer.elapsed_s)
        assert not problems(request, answer), (str(request), problems(request, answer))

    check()
    elapsed.sort()
    print(
        f"\nfuzzed requests: {len(elapsed)}; statuses {dict(sorted(statuses.items()))}; "
        f"answer time p50 {elapsed[len(elapsed) // 2] * 1000:.1f} ms, "
        f"p99 {elapsed[int(len(elapsed) * 0.99)] * 1000:.1f} ms, max {elapsed[-1] * 1000:.1f} ms"
    )
    assert sum(statuses.values()) >= min(EXAMPLES, MIN_SENT)
    # Health that no client input trips (issue 21 §2): the upstream archive's 4xx
    # answers to drawn URLs opened no breaker, and the instance is still ready.
    # (A breaker opened by timeouts of a slow machine is not the client's doing.)
    ready = _http_get(port, "/_ready")
    assert ready is not None
    assert ready[0] == 200, ready
    status = _http_get(port, "/_status")
    assert status is not None
    assert status[0] == 200
    for coll, steps in json.loads(status[1])["breakers"].items():
        for step, members in steps.items():
            for member, state in members.items():
                opened_by_4xx = re.search(r"HTTP 4\d\d", str(state["last_failure"]))
                assert state["state"] == "closed" or not opened_by_4xx, (coll, step, member, state)
    text = log.read_text("utf-8", errors="replace")
    assert "Traceback" not in text, text[-5000:]
    assert " ERROR " not in text, text[-5000:]
