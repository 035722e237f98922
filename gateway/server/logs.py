"""Logging of the gateway's long-running commands: level, text or JSON lines, access log.

``gateway serve`` (and any other command that runs a service) takes
:func:`add_logging_arguments`'s options and calls :func:`configure_logging`:

- ``--log-level``: ``debug``, ``info`` (default), ``warning``, ``error``;
- ``--log-format``: ``text`` (``2026-11-22 00:28:01,123 INFO gateway.server.app ...``)
  or ``json``: one JSON object per line (python-json-logger) with
  ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and the
  record's extra fields; access log lines carry aiohttp's fields
  (``remote_address``, ``first_request_line``, ``response_status``,
  ``response_size``, ``request_time_frac``, ``request_header``...);
- ``--access-log [FORMAT]``: aiohttp's access log (logger ``aiohttp.access``,
  one line per request at INFO) in aiohttp's format language (``%a`` remote
  address, ``%r`` request line, ``%s`` status, ``%b`` bytes sent with the
  header block, ``%Tf`` seconds, ``%{Header}i`` a request header, ...),
  :data:`ACCESS_LOG_FORMAT` when no FORMAT is given. Off by default: Python's
  logging of one line costs about 140,000 instructions, a third more than a
  one-URL lookup itself (``bench/bench_instructions.py``, README).

Logs go to standard error. Identical messages are rate-limited: the first is
logged, then at most one every 10 s, carrying how many were not logged
(:class:`~gateway.server.logrepeat.RepeatFilter`; not the access log).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Final, Literal

from gateway.server.logrepeat import RepeatFilter

__all__ = [
    "ACCESS_LOG_FORMAT",
    "LOG_LEVELS",
    "LogFormat",
    "access_logger",
    "add_logging_arguments",
    "configure_logging",
]

#: The default access log line: client, request line, status, body bytes,
#: seconds, referrer and user agent (Apache's "combined" without its date,
#: which the log line's own timestamp gives).
ACCESS_LOG_FORMAT: Final = '%a "%r" %s %b %Tf "%{Referer}i" "%{User-Agent}i"'
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LogFormat = Literal["text", "json"]
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


def add_logging_arguments(
    parser: argparse.ArgumentParser, *, access_log: bool = True, json_help: str = ""
) -> None:
    """Add ``--log-level``, ``--log-format`` and (with ``access_log``) ``--access-log [FORMAT]``.

    ``json_help`` is appended to ``--log-format``'s help (what JSON records carry).
    """
    group = parser.add_argument_group("logging (standard error)")
    group.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="least severe level logged"
    )
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line" + json_help,
    )
    if not access_log:
        return
    group.add_argument(
        "--access-log",
        metavar="FORMAT",
        nargs="?",
        const=ACCESS_LOG_FORMAT,
        default=None,
        help="log one line per request, in aiohttp's access log format "
        f"(default format: {ACCESS_LOG_FORMAT.replace('%', '%%')}); off without this option",
    )


def configure_logging(level: str = "info", log_format: LogFormat = "text") -> None:
    """Send every logger's records at ``level`` or above to standard error, as text or JSON.

    Replaces the root logger's handlers (calling it twice does not double lines).
    Identical messages are rate-limited (:class:`RepeatFilter`).
    Raises ValueError for a level not in :data:`LOG_LEVELS`.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp=True,
            )
        )
    else:
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def access_logger(log_format: str | None) -> logging.Logger | None:
    """The logger aiohttp writes access lines to, or None when ``log_format`` is None (off)."""
    return None if log_format is None else logging.getLogger("aiohttp.access")
