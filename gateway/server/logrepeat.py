"""Identical log lines, rate-limited: the first goes out, then at most one per interval.

A fault repeated by every request (a source down, a client sending the same
bad request in a loop) would write the same line thousands of times a minute
and bury everything else. :class:`RepeatFilter`, on the handler
:func:`gateway.server.logs.configure_logging` installs, lets the first of
identical messages (same logger, level and text) through, then drops the
copies that come within ``interval_s`` of the last one logged; the next one
logged after that carries how many were dropped (``[42 identical messages not
logged in the last 10 s]``, and ``repeats_suppressed`` as an extra field in
JSON logs). A count is reported with the next identical message after the
interval: a flood that stops leaves its last count unreported.

The access log (``aiohttp.access``), where identical lines are distinct
requests (health probes), and DEBUG records pass untouched. Stdlib only:
``gateway --help`` imports :mod:`gateway.server.logs`.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

__all__ = ["DEFAULT_INTERVAL_S", "MAX_MESSAGES", "RepeatFilter"]

#: Seconds between two copies of one message in the log.
DEFAULT_INTERVAL_S: Final = 10.0
#: Distinct messages remembered; past it, the oldest are forgotten.
MAX_MESSAGES: Final = 2048
#: Loggers whose records are never held back.
_EXEMPT: Final = frozenset({"aiohttp.access"})


class RepeatFilter(logging.Filter):
    """Drop copies of a message logged again within ``interval_s`` (module docstring).

    Thread-safe (worker threads log too). Memory: at most ``max_messages``
    distinct messages, each remembered until it is the oldest of them.
    """

    def __init__(
        self, interval_s: float = DEFAULT_INTERVAL_S, max_messages: int = MAX_MESSAGES
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.max_messages = max_messages
        #: (logger, level, text) -> [time the last copy went out, copies dropped since]
        self._seen: dict[tuple[str, int, str], list[float]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO or record.name in _EXEMPT:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True  # a broken format: the handler reports it as it would
        key = (record.name, record.levelno, message)
        now = record.created
        with self._lock:
            state = self._seen.get(key)
            if state is not None and now - state[0] < self.interval_s:
                state[1] += 1
                return False
            dropped = int(state[1]) if state is not None else 0
            since = now - state[0] if state is not None else 0.0
            self._seen.pop(key, None)
            self._seen[key] = [now, 0]  # last in order: the most recently logged
            if len(self._seen) > self.max_messages:
                self._forget()
        if dropped:
            plural = "" if dropped == 1 else "s"
            record.msg = (
                f"{message} [{dropped} identical message{plural} not logged "
                f"in the last {since:.0f} s]"
            )
            record.args = None
            record.repeats_suppressed = dropped
        return True

    def _forget(self) -> None:
        """Forget the oldest half of the messages (the lock is held)."""
        for key in list(self._seen)[: len(self._seen) // 2]:
            del self._seen[key]
