"""A client's regex cannot stop the server: /_health answers while the worst run.

With Python's backtracking ``re`` each of these requests held the event loop
for minutes (every route, /_health included, stopped answering); on RE2 they
answer at once. The bounds below only say "did not hang".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import MakeClient

LONG_URL = "http://example.com/" + "a" * 2048
WORST = ["(.*.*)*Z", "(a+)+$", "(a|aa)*b", "((a*)*)*b"]
HANG_BOUND_S = 60.0


async def test_health_answers_while_the_worst_patterns_run(
    make_client: MakeClient, tmp_path: Path
) -> None:
    index = tmp_path / "long.cdxj"
    index.write_text(
        "".join(
            f'com,example)/{"a" * 2048} 2014010100000{n} {{"url": "{LONG_URL}"}}\n'
            for n in range(10)
        )
    )
    client = await make_client(f"collections:\n  live: $live\n  file:\n    index: {index}\n")
    targets = []
    for pattern in WORST:
        targets += [
            ("/live/index", {"url": LONG_URL, "filter": f"~url:{pattern}"}),
            ("/live/resource", {"url": LONG_URL, "filter": f"~url:{pattern}"}),
            ("/live/cdx", {"url": LONG_URL, "filter": f"original:{pattern}"}),
            ("/file/index", {"url": LONG_URL, "filter": f"~url:{pattern}"}),
            ("/file/index", {"url": LONG_URL, "filter": f"~{pattern}"}),  # the whole line
            ("/file/cdx", {"url": LONG_URL, "filter": pattern}),
        ]

    async def get(path: str, params: dict[str, str]) -> int:
        resp = await client.get(path, params=params)
        await resp.read()
        return resp.status

    work = [asyncio.ensure_future(get(path, params)) for path, params in targets]
    health = await asyncio.wait_for(client.get("/_health"), HANG_BOUND_S)
    assert health.status == 200
    assert await health.json() == {"ok": True}
    statuses = await asyncio.wait_for(asyncio.gather(*work), HANG_BOUND_S)
    # Nothing matches: empty index answers, 404 for the resource.
    assert set(statuses) <= {200, 404}, statuses
    again = await client.get("/file/index", params={"url": LONG_URL, "filter": "~url:.*a{5}$"})
    assert len((await again.text()).splitlines()) == 10
