"""A member's circuit breaker: skip a source that keeps failing, for a while.

Only faults of the source count (timeouts, unavailability, answers that do not
parse): a query the source refused as the client's error
(:class:`~gateway.errors.SourceRefused`, an upstream 400) is counted apart and
never opens it, so no client can take a source out of service for the others.
The state shows on ``/_status`` and the lookups by outcome on ``/metrics``.
pywb's warcserver has no breaker; the pattern is Nygard's (*Release It!*).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.errors import SourceSkipped

__all__ = ["Breaker"]


@dataclass(slots=True)
class Breaker:
    """Per-member circuit breaker: after ``threshold`` consecutive timeouts or
    unavailability, skip the member for ``cooldown_s`` seconds (or the
    upstream ``Retry-After``, when longer).

    State is visible on the status endpoint through :meth:`state`; the
    lookups it saw, by outcome, on ``/metrics`` through :meth:`lookups`.
    """

    threshold: int = 3
    cooldown_s: float = 30.0
    failures: int = 0
    open_until: float = 0.0
    last_reason: str = ""
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0
    refused: int = 0

    def check(self, name: str) -> None:
        """Raise :class:`SourceSkipped` while the breaker is open."""
        if not self.open_until:  # closed: no clock read
            return
        remaining = self.open_until - time.monotonic()
        if remaining > 0:
            self.skipped += 1
            raise SourceSkipped(
                name,
                f"skipped by circuit breaker for {remaining:.1f} s more "
                f"after {self.failures} failures (last: {self.last_reason})",
            )

    def record_success(self) -> None:
        self.ok += 1
        self.failures = 0
        self.open_until = 0.0

    def record_refused(self) -> None:
        """A lookup the source refused as the client's error: counted, state untouched."""
        self.refused += 1

    def record_failure(
        self, reason: str, retry_after_s: float | None = None, *, timed_out: bool = False
    ) -> None:
        if timed_out:
            self.timeouts += 1
        else:
            self.errors += 1
        self.failures += 1
        self.last_reason = reason
        if retry_after_s is not None and retry_after_s > 0:
            self.open_until = time.monotonic() + max(retry_after_s, 0.0)
        elif self.failures >= self.threshold:
            self.open_until = time.monotonic() + self.cooldown_s

    def is_open(self) -> bool:
        """True while the member is skipped."""
        return self.open_until > time.monotonic()

    def lookups(self) -> dict[str, int]:
        """Lookups seen so far by outcome: ``ok``, ``error``, ``timeout``, ``skipped``,
        ``refused`` (the client's error; index sources only)."""
        return {
            "ok": self.ok,
            "error": self.errors,
            "timeout": self.timeouts,
            "skipped": self.skipped,
            "refused": self.refused,
        }

    def state(self) -> dict[str, object]:
        """``{"state": "closed"|"open", "failures": int, "retry_in_s": float, ...}``."""
        remaining = max(0.0, self.open_until - time.monotonic())
        return {
            "state": "open" if remaining > 0 else "closed",
            "failures": self.failures,
            "retry_in_s": round(remaining, 3),
            "last_failure": self.last_reason,
        }
