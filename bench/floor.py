"""The floor: a bare aiohttp server answering fixed bytes, on the gateway's runtime.

    python -m bench.floor ANSWERS.json PORT

``ANSWERS.json`` maps each request path (with its query string) to
``{"content_type": ..., "body_hex": ..., "headers": {...}}``: the answers the
gateway gave for those paths. One handler looks the path up and returns a
``web.Response`` with those bytes; ``/_health`` answers ``{"ok": true}`` with
``web.json_response`` as the gateway's own does. Same interpreter, same loop
(uvloop when installed), aiohttp's own ``web.run_app`` with the settings
``gateway serve`` passes to its ``run_app`` (no access log,
``handler_cancellation``); stock aiohttp, so without the gateway's request
line re-read for raw UTF-8 (``gateway/server/http_server.py``, about 2.5k
instructions per request, counted against the gateway): what is left of a
request when nothing is looked up and nothing is read, the cost a gateway
row is compared with (bench/README.md). Binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aiohttp import web

from gateway.cli import _new_loop


def make_app(answers: dict[str, dict[str, object]]) -> web.Application:
    """The floor app for ``answers`` (see the module docstring)."""
    table: dict[str, tuple[bytes, dict[str, str]]] = {}
    for path, answer in answers.items():
        given = answer.get("headers")
        headers = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
        headers["Content-Type"] = str(answer["content_type"])
        table[path] = (bytes.fromhex(str(answer["body_hex"])), headers)

    async def fixed(request: web.Request) -> web.Response:
        found = table.get(request.path_qs)
        if found is None:
            raise web.HTTPNotFound()
        body, headers = found
        return web.Response(body=body, headers=headers)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/_health", health)
    app.router.add_get("/{tail:.*}", fixed)
    return app


def main(argv: list[str]) -> int:
    answers = json.loads(Path(argv[0]).read_text("utf-8"))
    web.run_app(
        make_app(answers),
        host="127.0.0.1",
        port=int(argv[1]),
        handler_cancellation=True,
        access_log=None,
        print=None,
        loop=_new_loop(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
