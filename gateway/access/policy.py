"""One access decision for every route and source (pywb ``AccessChecker.wrap_iter``).

A collection with access control has one :class:`AccessPolicy`. The index
groups of its steps ask it for an :class:`AccessGate` once per lookup
(:meth:`AccessPolicy.gate`), and pass every capture a member yields through
the gate before filters, time range and limit
(:mod:`gateway.cdx.cdxops`). The gate:

- drops an ``exclude``-d capture: no route can list, count or load it;
- sets ``access`` on every other capture (``allow`` or ``block``, as pywb
  lists them), and for a block with a rule's ``message``, the private field
  ``_access_message`` that the 451 carries.

The decision for one capture, in pywb's order: the rule found for its urlkey
and user (:meth:`RuleSet.find <gateway.access.rules.RuleSet.find>`), or
``default_access``; the rule's ``before``/``after``/``newer``/``older``
(outside them ``default_access`` decides: pywb ``check_date_access``); then
the embargo, unless the access is ``exclude`` or ``allow_ignore_embargo``
(pywb ``check_embargo``); ``allow_ignore_embargo`` is then listed as
``allow``.

The rule search runs per lookup key range, not per line: the rules that can
match any key of ``[key, end_key)`` are found once (those that are prefixes
of the range's common prefix, and those inside the range) and remembered by
the rule set for the next lookups of that range (:data:`RANGES_CACHED`); a
capture then costs a dictionary lookup for exact rules and a search among the
rules inside the range only when there are some. Consecutive captures of one
urlkey reuse its rule. A range with one access for every capture (the usual
case: no rule inside it, nothing timed) is decided once: its gate is kept by
the policy for the next lookups of the range, and costs a capture a count
and its ``access``.

The user of per-user rules is :data:`ACL_USER` (a context variable the API
sets from the header the operator names, ``access.user_header``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final

from gateway.access.rules import AclFileError, Rule, RuleSet, read_rule_files, rule_files
from gateway.access.settings import AccessConfig
from gateway.access.timeutil import Period, now_timestamp, pad_up
from gateway.cdx.cdxj import CdxRecord
from gateway.errors import AccessBlocked

__all__ = [
    "ACCESS_FIELD",
    "ACL_USER",
    "MESSAGE_FIELD",
    "AccessGate",
    "AccessPolicy",
    "Decision",
    "check_not_blocked",
]

logger = logging.getLogger(__name__)

#: The user whose rules apply to the current request (None: rules without ``user``).
ACL_USER: ContextVar[str | None] = ContextVar("acl_user", default=None)
#: The field every listed capture carries (pywb's).
ACCESS_FIELD: Final = "access"
#: A blocked capture's public message (private field: never listed).
MESSAGE_FIELD: Final = "_access_message"
#: Seconds between two looks at the rule files' modification times.
RELOAD_CHECK_S: Final = 1.0
#: Lookup ranges whose covering rule a rule set remembers (then it starts afresh).
RANGES_CACHED: Final = 4096


class Decision:
    """The access of one capture and the rule that decided (None: the default)."""

    __slots__ = ("access", "rule")

    def __init__(self, access: str, rule: Rule | None) -> None:
        self.access = access
        self.rule = rule


class AccessPolicy:
    """A collection's rules, default access and embargo, reloaded when the files change.

    ``decisions`` counts the captures decided, by access (``/metrics``).
    Build it with :meth:`load` (raises :class:`~gateway.access.rules.AclFileError`).
    """

    def __init__(self, config: AccessConfig, rules: RuleSet, signature: object = None) -> None:
        self.config = config
        self.rules = rules
        self.decisions: dict[str, int] = {"allow": 0, "block": 0, "exclude": 0}
        self._signature = signature
        self._checked_at = 0.0
        self._reloading: asyncio.Task[None] | None = None
        #: The gates of ranges with one access (:attr:`AccessGate.constant`), by
        #: range and user: they hold no state of their lookup, so the next lookup
        #: of the range takes the gate as it is (for :attr:`_shared_for`'s rules).
        self._shared: dict[tuple[str, str, str | None], Callable[[CdxRecord], bool]] = {}
        self._shared_for = rules

    @classmethod
    def load(cls, config: AccessConfig) -> AccessPolicy:
        """Read the rule files of ``config`` (blocking: at start-up or in a thread)."""
        signature = _signature(config.acl_paths)
        return cls(config, read_rule_files(config.acl_paths), signature)

    # ------------------------------------------------------------------ lookups
    def gate(self, key: str, end_key: str) -> Callable[[CdxRecord], bool]:
        """The gate for one lookup of the urlkey range ``[key, end_key)``, for the
        current user (:data:`ACL_USER`) at the current time
        (:attr:`AccessGate.keep`). Looks at the rule files at most once a second
        and reloads them in a thread when changed."""
        if self.config.acl_paths:
            self._maybe_reload()
        user = ACL_USER.get()
        rules = self.rules
        if rules is not self._shared_for:  # reloaded: the gates of the old rules go
            self._shared.clear()
            self._shared_for = rules
        shared = self._shared.get((key, end_key, user))
        if shared is not None:
            return shared
        gate = AccessGate(self, key, end_key, user, None)
        keep = gate.keep
        if gate.constant and not rules.windowed:
            if len(self._shared) >= RANGES_CACHED:
                self._shared.clear()
            self._shared[(key, end_key, user)] = keep
        return keep

    def allows_now(self, urlkey: str) -> bool:
        """Whether a capture of ``urlkey`` made now is served to the current user
        (a recording step's recent capture is served without an index lookup)."""
        return self.decide(urlkey, now_timestamp(), ACL_USER.get()).access == "allow"

    def decide(
        self, urlkey: str, timestamp: str, user: str | None, now: datetime | None = None
    ) -> Decision:
        """The decision for one capture (``gateway acl match``; lookups use :meth:`gate`)."""
        gate = AccessGate(self, urlkey, urlkey + "!", user, now or datetime.now(UTC))
        rule = gate.rule_for(urlkey)
        return Decision(gate.access_of(rule, timestamp), rule)

    # ------------------------------------------------------------------ reload
    def _maybe_reload(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._checked_at < RELOAD_CHECK_S or self._reloading is not None:
            return
        self._checked_at = loop.time()
        try:
            signature = _signature(self.config.acl_paths)
        except AclFileError as exc:
            signature = str(exc)
        if signature != self._signature:
            self._signature = signature
            self._reloading = loop.create_task(self._reload())

    async def _reload(self) -> None:
        try:
            rules = await asyncio.to_thread(read_rule_files, self.config.acl_paths)
        except AclFileError as exc:
            logger.error(
                "%s: access rules not reloaded, the last good %d rules stay in force: %s",
                self.config.path,
                len(self.rules),
                exc,
            )
        else:
            logger.info("%s: %d access rules reloaded", self.config.path, len(rules))
            self.rules = rules
        finally:
            self._reloading = None


def loadable(capture: CdxRecord) -> bool:
    """False when ``capture`` is listed ``access: block``: it may be listed, never
    loaded (the WACZ export's ``admit``: a blocked capture is left out, counted)."""
    return capture.fields.get(ACCESS_FIELD) != "block"


def check_not_blocked(capture: CdxRecord) -> None:
    """Raise :class:`~gateway.errors.AccessBlocked` (451) when ``capture`` is listed
    ``access: block`` (by the collection's rules, or by a remote archive that lists
    it so), with the rule's message or a generic one."""
    fields = capture.fields
    if fields.get(ACCESS_FIELD) == "block":
        raise AccessBlocked(
            fields.get(MESSAGE_FIELD)
            or f"access to the capture of {capture.url or capture.urlkey} at "
            f"{capture.timestamp} is blocked"
        )


def _signature(paths: tuple[str, ...]) -> object:
    """What changes when a rule file is added, removed, replaced or written."""
    marks = []
    for name in rule_files(paths):
        try:
            st = os.stat(name)
        except OSError as exc:
            raise AclFileError(name, 0, f"cannot read: {exc.strerror}") from exc
        marks.append((name, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(marks)


class AccessGate:
    """The decision for the captures of one lookup (see the module docstring).

    :attr:`keep` is called with each capture: False drops it (``exclude``);
    otherwise it is annotated and kept. Consecutive captures of one urlkey
    reuse its rule.
    """

    __slots__ = (
        "_constant",
        "_cover",
        "_decisions",
        "_embargo",
        "_exact",
        "_fixed",
        "_inner",
        "_last_key",
        "_listed",
        "_now",
        "_now_ts",
        "_policy",
        "_rule",
        "_rules",
        "_thresholds",
        "_user",
    )

    def __init__(
        self,
        policy: AccessPolicy,
        key: str,
        end_key: str,
        user: str | None,
        now: datetime | None,
    ) -> None:
        self._policy = policy
        self._decisions = policy.decisions
        self._embargo = policy.config.embargo is not None
        rules = self._rules = policy.rules
        self._user = user
        # The wall clock is read only when something depends on it: a rule's
        # window, a period (rule or embargo), a time given by the caller.
        self._now = now
        if now is None and rules.windowed:
            now = self._now = datetime.now(UTC)
        self._now_ts = now_ts = now_timestamp(now) if now is not None else ""
        self._thresholds: dict[Period, str] = {}
        found = None if rules.windowed else rules.ranges.get((key, end_key, user))
        if found is None:
            found = _range_rules(rules, key, end_key, user, now_ts)
            if not rules.windowed:
                if len(rules.ranges) >= RANGES_CACHED:
                    rules.ranges.clear()
                rules.ranges[(key, end_key, user)] = found
        cover, lo, hi, exact_inside = self._cover, lo, hi, self._exact = found
        self._inner = (lo, hi)
        self._last_key: str | None = None
        self._rule: Rule | None = None
        self._fixed: str | None = None
        # One access for the whole range: no rule inside it, nothing timed.
        self._constant: str | None = None
        timed = self._embargo or (cover is not None and cover.dated)
        if not exact_inside and lo >= hi and not timed:
            self._constant = self.access_of(cover, "")
            self._rule = cover
        self._listed = self._constant or ""

    def rule_for(self, urlkey: str) -> Rule | None:
        """The rule deciding for ``urlkey`` in this lookup's range (None: the default)."""
        rules, user, now = self._rules, self._user, self._now_ts
        if self._exact:
            group = rules.exact.get(urlkey)
            if group is not None:
                rule = group.pick(user, now)
                if rule is not None:
                    return rule
        lo, hi = self._inner
        if lo < hi:
            rule = rules.longest_prefix(urlkey, user, now, lo, hi)
            if rule is not None:
                return rule
        return self._cover

    @property
    def constant(self) -> bool:
        """Whether every capture of the range gets one access, whatever its time
        (no rule inside the range, neither the covering rule nor an embargo timed)."""
        return self._constant is not None

    @property
    def keep(self) -> Callable[[CdxRecord], bool]:
        """The gate as a function of one capture: False drops it; otherwise it is
        annotated and kept. One access for the whole range without a message to
        add costs a count and the ``access`` slot per capture (a bound method:
        no per-capture branch on the range's kind)."""
        constant = self._constant
        if constant is None:
            return self._keep_decided
        if constant == "exclude":
            return self._drop
        if constant == "block" and _message_of(self._rule) is not None:
            return self._keep_decided
        return self._keep_constant

    def _keep_constant(self, record: CdxRecord) -> bool:
        access = self._listed
        self._decisions[access] += 1
        record.set_access(access)
        return True

    def _drop(self, record: CdxRecord) -> bool:
        self._decisions["exclude"] += 1
        return False

    def _keep_decided(self, record: CdxRecord) -> bool:
        constant = self._constant
        if constant is not None:  # a block with its rule's message
            self._decisions[constant] += 1
            record.set_access(constant)
            if constant == "block":
                self._add_message(record, self._rule)
            return True
        urlkey = record.urlkey
        if urlkey != self._last_key:
            self._last_key = urlkey
            rule = self._rule = self.rule_for(urlkey)
            timed = self._embargo or (rule is not None and rule.dated)
            self._fixed = None if timed else self.access_of(rule, "")
        rule = self._rule
        access = self._fixed or self.access_of(rule, record.timestamp)
        self._decisions[access] += 1
        if access == "exclude":
            return False
        record.set_access(access)
        if access == "block":
            self._add_message(record, rule)
        return True

    @staticmethod
    def _add_message(record: CdxRecord, rule: Rule | None) -> None:
        """A blocked capture's public message: its rule's, when the rule blocked it."""
        message = _message_of(rule)
        if message is not None:
            record.fields[MESSAGE_FIELD] = message

    def access_of(self, rule: Rule | None, timestamp: str) -> str:
        """``allow``, ``block`` or ``exclude`` for a capture of ``timestamp`` under ``rule``."""
        config = self._policy.config
        default = config.default_access
        access: str = default if rule is None else rule.access
        if rule is not None and rule.dated:
            access = access if self._within(rule, pad_up(timestamp)) else default
        embargo = config.embargo
        if (
            embargo is not None
            and access not in ("allow_ignore_embargo", "exclude")
            and embargo.access != "allow"
            and self._embargoed(pad_up(timestamp))
        ):
            access = embargo.access
        return "allow" if access == "allow_ignore_embargo" else access

    def _threshold(self, period: Period) -> str:
        found = self._thresholds.get(period)
        if found is None:
            if self._now is None:
                self._now = datetime.now(UTC)
            found = self._thresholds[period] = period.before(self._now)
        return found

    def _within(self, rule: Rule, ts: str) -> bool:
        """pywb ``check_date_access``: the first of before, after, newer, older decides."""
        if rule.before:
            return ts < rule.before
        if rule.after:
            return ts > rule.after
        if rule.newer:
            return ts > self._threshold(rule.newer)
        assert rule.older is not None
        return ts < self._threshold(rule.older)

    def _embargoed(self, ts: str) -> bool:
        """pywb ``check_embargo``."""
        embargo = self._policy.config.embargo
        assert embargo is not None
        if embargo.kind == "before":
            return ts < (embargo.timestamp or "")
        if embargo.kind == "after":
            return ts > (embargo.timestamp or "")
        assert embargo.period is not None
        threshold = self._threshold(embargo.period)
        return ts > threshold if embargo.kind == "newer" else ts < threshold


def _message_of(rule: Rule | None) -> str | None:
    """The message a capture blocked under ``rule`` carries (None: the generic one)."""
    if rule is not None and rule.message and rule.access == "block":
        return rule.message
    return None


def _range_rules(
    rules: RuleSet, key: str, end_key: str, user: str | None, now: str
) -> tuple[Rule | None, int, int, bool]:
    """The rule covering every urlkey of ``[key, end_key)`` (the longest prefix of
    their common prefix, else ``*,``), the positions of the keys inside it, and
    whether an exact rule's key lies inside it."""
    common = _common_prefix(key, end_key)
    lo, hi = rules.span(common, end_key) if rules.keys else (0, 0)
    cover = rules.longest_prefix(common, user, now, 0, len(rules.keys))
    if cover is None and rules.catch_all is not None:
        cover = rules.catch_all.pick(user, now)
    exact = rules.exact_keys
    exact_inside = bisect.bisect_left(exact, key) < bisect.bisect_left(exact, end_key)
    return cover, lo, hi, exact_inside


def _common_prefix(a: str, b: str) -> str:
    """The longest common prefix of a lookup's ``key`` and ``end_key``; the usual
    ranges (exact: ``k``, ``k!``; prefix: ``kx``, ``ky``) without a loop."""
    if b.startswith(a):
        return a
    if a[:-1] == b[:-1]:
        return a[:-1]
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]
