"""Access rules as pywb writes them: ``.aclj`` lines, and the longest-prefix search.

An ``.aclj`` file (pywb ``docs/manual/access-control.rst``) holds one rule a
line, sorted in reverse (descending) order::

    org,httpbin)/anything/something - {"access": "allow", "url": "http://httpbin.org/anything/something"}
    org,httpbin)/anything - {"access": "exclude"}
    org,httpbin)/ - {"access": "block", "message": "Removed at the owner's request"}
    com,example)/page### - {"access": "exclude"}
    *, - {"access": "allow", "user": "staff"}

A key is a SURT prefix; ``key###`` is an exact rule (that URL key only,
pywb ``AccessChecker.EXACT_SUFFIX``); ``*,`` matches every URL. The ``-`` is
pywb's reserved timestamp field. JSON keys read here:

- pywb's: ``access`` (one of :data:`ACCESS_TYPES`), ``url``, ``user``,
  ``before``/``after`` (a 1-14 digit capture timestamp, padded up as warcio
  pads it), ``newer``/``older`` (``{"years", "months", "weeks", "days"}``);
- OutbackCDX's, which pywb ignores: ``access_from``/``access_until`` (the
  wall-clock window in which the rule applies: a temporary takedown),
  ``message`` (public: shown with the 451), ``reason``, ``comment``,
  ``modified_by``, ``modified_at`` (private: ``gateway acl list`` only).

:class:`RuleSet` answers "which rule decides for this urlkey and user" by a
binary search over the sorted keys (the longest prefix, as pywb's search
forward from a binary search finds it), built once in O(n log n).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from gateway.access.timeutil import Period, pad_up, parse_period, parse_wallclock

__all__ = [
    "ACCESS_TYPES",
    "CATCH_ALL",
    "EXACT_SUFFIX",
    "Access",
    "AclFileError",
    "Rule",
    "RuleGroup",
    "RuleSet",
    "parse_rule_line",
    "read_rule_files",
    "rule_files",
]

Access = Literal["allow", "block", "exclude", "allow_ignore_embargo"]
#: pywb ``ACLManager.VALID_ACCESS``.
ACCESS_TYPES: Final[tuple[Access, ...]] = ("allow", "block", "exclude", "allow_ignore_embargo")
#: The suffix of an exact rule's key (pywb ``AccessChecker.EXACT_SUFFIX``).
EXACT_SUFFIX: Final = "###"
#: The key that matches every URL (pywb's ``*,``).
CATCH_ALL: Final = "*,"

_KNOWN_KEYS: Final = frozenset(
    {
        "access",
        "url",
        "user",
        "before",
        "after",
        "newer",
        "older",
        "access_from",
        "access_until",
        "message",
        "reason",
        "comment",
        "modified_by",
        "modified_at",
    }
)
#: Keys that need no checking beyond their presence (the usual rule line).
_PLAIN_KEYS: Final = frozenset({"access", "url", "reason", "comment", "modified_by", "modified_at"})
_TIMESTAMP: Final = re.compile(r"[0-9]{1,14}")


class AclFileError(ValueError):
    """A rule that does not parse: ``path``, 1-based ``line`` and the problem."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path} line {line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One ``.aclj`` line, parsed.

    ``key`` is the SURT prefix without the exact suffix (``exact`` says
    whether it had one); ``before``/``after`` are 14-digit timestamps padded
    up (warcio ``timestamp_to_datetime``); ``access_from``/``access_until``
    14-digit UTC timestamps; ``text`` the line as read (or as written by
    :meth:`to_aclj`); ``fields`` every JSON key of the line, in order.
    """

    key: str
    exact: bool
    access: Access
    user: str | None = None
    before: str | None = None
    after: str | None = None
    newer: Period | None = None
    older: Period | None = None
    access_from: str | None = None
    access_until: str | None = None
    message: str | None = None
    fields: dict[str, object] = field(default_factory=dict, compare=False)
    text: str = ""

    @property
    def full_key(self) -> str:
        """The key as written in the file (``key###`` for an exact rule)."""
        return self.key + EXACT_SUFFIX if self.exact else self.key

    @property
    def dated(self) -> bool:
        """True when the rule's answer depends on the capture's time."""
        return bool(self.before or self.after or self.newer or self.older)

    def active(self, now: str) -> bool:
        """Whether the wall-clock time ``now`` (14 digits) is inside the rule's window."""
        if self.access_from is not None and now < self.access_from:
            return False
        return not (self.access_until is not None and now >= self.access_until)

    def to_aclj(self) -> str:
        """The rule's line (no newline): ``key - {json}``, keys in their order."""
        return f"{self.full_key} - {json.dumps(self.fields)}"


def parse_rule_line(text: str, *, path: str = "<rule>", line: int = 1) -> Rule:
    """Parse one ``.aclj`` line; raises :class:`AclFileError` naming ``path`` and ``line``.

    >>> rule = parse_rule_line('com,example)/a### - {"access": "block", "user": "staff"}')
    >>> (rule.key, rule.exact, rule.access, rule.user)
    ('com,example)/a', True, 'block', 'staff')
    """
    text = text.rstrip("\r\n")
    full_key, sep, rest = text.partition(" ")
    _timestamp, sep2, block = rest.partition(" ")
    if not sep or not sep2 or not full_key or not block.startswith("{"):
        raise AclFileError(path, line, f"expected '<surt> - {{json}}', got {text[:200]!r}")
    try:
        data = json.loads(block)
    except ValueError as exc:
        raise AclFileError(path, line, f"bad JSON block: {exc}") from exc
    if type(data) is not dict:
        raise AclFileError(path, line, "the JSON block is not an object")
    if not data.keys() <= _KNOWN_KEYS:
        unknown = sorted(set(data) - _KNOWN_KEYS)
        raise AclFileError(
            path,
            line,
            f"unknown key {unknown[0]!r}; expected some of {', '.join(sorted(_KNOWN_KEYS))}",
        )
    access = data.get("access")
    if access not in ACCESS_TYPES:
        raise AclFileError(
            path, line, f"access {access!r}: expected one of {', '.join(ACCESS_TYPES)}"
        )
    exact = full_key.endswith(EXACT_SUFFIX)
    key = full_key[: -len(EXACT_SUFFIX)] if exact else full_key
    if data.keys() <= _PLAIN_KEYS:  # the usual line: nothing more to check
        return Rule(key=key, exact=exact, access=access, fields=data, text=text)
    try:
        return Rule(
            key=key,
            exact=exact,
            access=access,
            user=_optional_str(data, "user"),
            before=_capture_time(data, "before"),
            after=_capture_time(data, "after"),
            newer=_period(data, "newer"),
            older=_period(data, "older"),
            access_from=_wallclock(data, "access_from"),
            access_until=_wallclock(data, "access_until"),
            message=_optional_str(data, "message"),
            fields=data,
            text=text,
        )
    except ValueError as exc:
        raise AclFileError(path, line, str(exc)) from None


def _optional_str(data: dict[str, object], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def _capture_time(data: dict[str, object], name: str) -> str | None:
    value = data.get(name)
    if value is None or value == "":
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _TIMESTAMP.fullmatch(text):
        raise ValueError(f"{name}: expected a timestamp of 1 to 14 digits, got {value!r}")
    return pad_up(text)


def _period(data: dict[str, object], name: str) -> Period | None:
    value = data.get(name)
    if value is None:
        return None
    return parse_period(value, name)


def _wallclock(data: dict[str, object], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    return parse_wallclock(value, name)


@dataclass(slots=True)
class RuleGroup:
    """The rules of one key: at most one for everyone and one per user."""

    general: Rule | None = None
    users: dict[str, Rule] = field(default_factory=dict)

    def add(self, rule: Rule) -> Rule | None:
        """Add ``rule``; returns the rule it replaces (same key, exactness and user)."""
        if rule.user is None:
            replaced, self.general = self.general, rule
        else:
            replaced = self.users.get(rule.user)
            self.users[rule.user] = rule
        return replaced

    def pick(self, user: str | None, now: str) -> Rule | None:
        """The rule for ``user`` (pywb: a user's own rule before the general one)."""
        if user is not None:
            own = self.users.get(user)
            if own is not None and own.active(now):
                return own
        general = self.general
        if general is not None and general.active(now):
            return general
        return None


class RuleSet:
    """Rules by key, searched by longest prefix (pywb ``AccessChecker.find_access_rule``).

    ``keys`` holds the prefix rules' keys in ascending order; exact rules are
    found by their key in a dict; ``*,`` is the last resort. Building sorts
    once (O(n log n)); a rule repeated with the same key, exactness and user
    replaces the earlier one (as ``wb-manager acl add`` does).
    """

    __slots__ = (
        "catch_all",
        "count",
        "exact",
        "exact_keys",
        "groups",
        "keys",
        "ranges",
        "sources",
        "windowed",
    )

    def __init__(self, rules: Iterable[Rule] = (), sources: Sequence[str] = ()) -> None:
        self.groups: dict[str, RuleGroup] = {}
        self.exact: dict[str, RuleGroup] = {}
        self.catch_all: RuleGroup | None = None
        self.count = 0
        self.sources = tuple(sources)
        #: True when a rule has an ``access_from``/``access_until`` window.
        self.windowed = False
        for rule in rules:
            if rule.access_from is not None or rule.access_until is not None:
                self.windowed = True
            if rule.key == CATCH_ALL and not rule.exact:
                if self.catch_all is None:
                    self.catch_all = RuleGroup()
                group = self.catch_all
            else:
                table = self.exact if rule.exact else self.groups
                group = table.get(rule.key) or table.setdefault(rule.key, RuleGroup())
            if group.add(rule) is None:
                self.count += 1
        self.keys: list[str] = sorted(self.groups)
        #: The exact rules' keys in ascending order (which lie inside a range).
        self.exact_keys: list[str] = sorted(self.exact)
        #: What a lookup range needs, by (range start, end, user): the rule
        #: covering the whole range and the positions of the keys inside it
        #: (:class:`gateway.access.policy.AccessGate`; not used when
        #: :attr:`windowed`, where the covering rule depends on the time).
        self.ranges: dict[tuple[str, str, str | None], tuple[Rule | None, int, int, bool]] = {}

    def __len__(self) -> int:
        return self.count

    def find(self, urlkey: str, user: str | None, now: str) -> Rule | None:
        """The rule that decides for ``urlkey``: exact, then longest prefix, then ``*,``.

        ``now`` (14 digits) is compared with rules' windows only (it may be
        empty when :attr:`windowed` is false). None when no rule applies (the
        collection's ``default_access`` decides).
        """
        if self.exact:
            group = self.exact.get(urlkey)
            if group is not None:
                rule = group.pick(user, now)
                if rule is not None:
                    return rule
        rule = self.longest_prefix(urlkey, user, now, 0, len(self.keys))
        if rule is not None:
            return rule
        return self.catch_all.pick(user, now) if self.catch_all is not None else None

    def longest_prefix(self, key: str, user: str | None, now: str, lo: int, hi: int) -> Rule | None:
        """The applicable rule whose key is the longest prefix of ``key``, among
        ``keys[lo:hi]``: a binary search, repeated on a shorter key only when the
        key found is no prefix (then every prefix rule is a prefix of the common
        part) or does not apply to ``user``."""
        keys, groups = self.keys, self.groups
        while lo < hi:
            i = bisect.bisect_right(keys, key, lo, hi) - 1
            if i < lo:
                return None
            found = keys[i]
            if key.startswith(found):
                rule = groups[found].pick(user, now)
                if rule is not None:
                    return rule
                key = found[:-1]
            else:
                key = _common_prefix(found, key)
            hi = i  # every candidate left is a prefix of ``key``, so sorts before ``found``
        return None

    def span(self, start: str, end: str) -> tuple[int, int]:
        """Positions in :attr:`keys` of the keys ``k`` with ``start < k < end``."""
        return bisect.bisect_right(self.keys, start), bisect.bisect_left(self.keys, end)

    def rules(self) -> Iterator[Rule]:
        """Every rule, in file order (descending by line, as pywb sorts)."""
        every: list[Rule] = []
        for table in (self.groups, self.exact):
            for group in table.values():
                every.extend(_group_rules(group))
        if self.catch_all is not None:
            every.extend(_group_rules(self.catch_all))
        yield from sorted(every, key=lambda rule: rule.to_aclj(), reverse=True)


def _group_rules(group: RuleGroup) -> list[Rule]:
    rules = list(group.users.values())
    if group.general is not None:
        rules.append(group.general)
    return rules


def _common_prefix(a: str, b: str) -> str:
    """The longest common prefix of ``a`` and ``b``.

    >>> _common_prefix("com,example)/a", "com,example)/b")
    'com,example)/'
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]


def rule_files(paths: Sequence[str]) -> list[str]:
    """The ``.aclj`` files ``paths`` name: files as given, directories' ``*.aclj``
    sorted by name (pywb ``DirectoryAccessSource``). Raises :class:`AclFileError`
    (line 0) for a path that is neither."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(
                str(Path(path) / name)
                for name in sorted(os.listdir(path))
                if name.endswith(".aclj")
            )
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise AclFileError(
                path, 0, "no such file or directory; expected an .aclj file or a directory"
            )
    return files


def read_rule_files(paths: Sequence[str]) -> RuleSet:
    """Read every rule of ``paths`` (files and directories, :func:`rule_files`).

    Blank lines are skipped; any other line that does not parse raises
    :class:`AclFileError` with its file and line. Blocking: call it in a thread
    on the event loop. Files need not be sorted (pywb's must be: its binary
    search reads them in place); ``gateway acl`` writes them sorted.
    """
    files = rule_files(paths)
    rules: list[Rule] = []
    for name in files:
        try:
            with open(name, encoding="utf-8") as handle:
                for number, text in enumerate(handle, 1):
                    if text.strip():
                        rules.append(parse_rule_line(text, path=name, line=number))
        except OSError as exc:
            raise AclFileError(name, 0, f"cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise AclFileError(name, 0, f"not UTF-8: {exc}") from exc
    return RuleSet(rules, files)
