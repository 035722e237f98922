"""Malformed HTTP that aiohttp refuses before the app sees it: one short log line.

aiohttp's parser answers some requests itself, with a plain-text 400:
a request line or header past its limits, a malformed request target
(a space, a control character; raw bytes past ASCII are read as
percent-encoded by :mod:`gateway.server.http_server` instead), garbage instead
of HTTP. It then logs the error at ERROR with a traceback that quotes the
request. :class:`BadRequestLogFilter` turns those records into one INFO
line naming the client and the error, cut to :data:`MAX_CHARS`: a client's
bad request is not a server error, and its bytes are not echoed at length.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp.http_exceptions import BadHttpMessage

__all__ = ["MAX_CHARS", "BadRequestLogFilter", "install"]

#: Longest part of aiohttp's message kept in the log line.
MAX_CHARS: Final = 200


class BadRequestLogFilter(logging.Filter):
    """On ``aiohttp.server``: a parser error record becomes one INFO line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BadHttpMessage):
            text = " ".join(str(exc.message or type(exc).__name__).split())
            if len(text) > MAX_CHARS:
                text = text[:MAX_CHARS] + "..."
            client = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "bad HTTP request from %s refused by aiohttp (400): %s: %s"
            record.args = (client, type(exc).__name__, text)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = None
            record.exc_text = None
        return True


def install() -> None:
    """Add the filter to the ``aiohttp.server`` logger (once per process)."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, BadRequestLogFilter) for f in server.filters):
        server.addFilter(BadRequestLogFilter())
