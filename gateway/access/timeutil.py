"""Times in access rules and embargoes: padded timestamps, periods, wall-clock windows.

Every time here is a 14-digit UTC timestamp string (``YYYYMMDDhhmmss``):
two of them compare as the times they name.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from gateway.cdx.query import closest_timestamp

__all__ = ["Period", "now_timestamp", "pad_up", "parse_period", "parse_wallclock"]

_PERIOD_KEYS: Final = ("years", "months", "weeks", "days")
_DIGITS: Final = re.compile(r"[0-9]{1,14}")
_ISO: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?Z?")


def pad_up(timestamp: str) -> str:
    """A 1-14 digit timestamp as warcio's ``timestamp_to_datetime`` reads it
    (what pywb compares rules and embargoes with): a short one stands for the
    end of the period it names.

    >>> pad_up("2010")
    '20101231235959'
    >>> pad_up("20140126200624")
    '20140126200624'
    """
    return (
        timestamp if len(timestamp) == 14 and timestamp.isdigit() else closest_timestamp(timestamp)
    )


@dataclass(frozen=True, slots=True)
class Period:
    """A relative period (pywb's ``newer``/``older``: dateutil ``relativedelta``)."""

    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0

    def before(self, now: datetime) -> str:
        """The 14-digit timestamp this period before ``now``: years and months
        first (the day clamped to the month's length, as ``relativedelta``), then
        weeks and days.

        >>> Period(months=1).before(datetime(2024, 3, 31, tzinfo=UTC))
        '20240229000000'
        """
        month_index = now.year * 12 + (now.month - 1) - self.years * 12 - self.months
        year, month = divmod(month_index, 12)
        year = min(max(year, 1), 9999)
        day = min(now.day, calendar.monthrange(year, month + 1)[1])
        moved = now.replace(year=year, month=month + 1, day=day)
        moved -= timedelta(weeks=self.weeks, days=self.days)
        return moved.strftime("%Y%m%d%H%M%S")


def parse_period(value: object, name: str) -> Period:
    """``{"years": 1, "days": 3}`` as a :class:`Period`; raises ValueError naming ``name``."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{name}: expected a mapping of {', '.join(_PERIOD_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(_PERIOD_KEYS))
    if unknown:
        raise ValueError(f"{name}.{unknown[0]}: unknown key; expected {', '.join(_PERIOD_KEYS)}")
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name}.{key}: expected a whole number >= 0, got {number!r}")
    return Period(**value)


def parse_wallclock(value: object, name: str) -> str:
    """A wall-clock time (1-14 digit timestamp, padded down, or ISO 8601
    ``YYYY-MM-DD[THH:MM[:SS]][Z]``, UTC) as 14 digits; raises ValueError naming ``name``.

    >>> parse_wallclock("2026-01-02T03:04:05Z", "access_until")
    '20260102030405'
    >>> parse_wallclock("2026", "access_from")
    '20260101000000'
    """
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(text, str):
        if _DIGITS.fullmatch(text):
            return text + "10000101000000"[len(text) :]
        match = _ISO.fullmatch(text)
        if match:
            parts = [part or "00" for part in match.groups()]
            return "".join(parts)
    raise ValueError(
        f"{name}: expected a UTC time as 1-14 digits or YYYY-MM-DDThh:mm:ssZ, got {value!r}"
    )


def now_timestamp(now: datetime | None = None) -> str:
    """The current UTC time (or ``now``) as 14 digits."""
    return (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
