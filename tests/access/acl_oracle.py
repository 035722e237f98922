"""A naive oracle for access decisions: every rule looked at, in pywb's terms.

Independent of :mod:`gateway.access`'s search: it tries every rule of a list
for one capture (exact key, then the longest key that is a prefix of the
urlkey, then ``*,``; a user's own rule before the general rule of the same
key) and applies pywb ``AccessChecker.wrap_iter``'s order: the rule's date
fields (outside them ``default_access``), then the embargo, then
``allow_ignore_embargo`` listed as ``allow``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OracleRule:
    key: str
    access: str
    exact: bool = False
    user: str | None = None
    before: str | None = None  # 14 digits
    after: str | None = None

    def line(self) -> str:
        fields = {"access": self.access}
        if self.user:
            fields["user"] = self.user
        if self.before:
            fields["before"] = self.before
        if self.after:
            fields["after"] = self.after
        import json

        return f"{self.key}{'###' if self.exact else ''} - {json.dumps(fields)}"


def find(rules: list[OracleRule], urlkey: str, user: str | None) -> OracleRule | None:
    def best(candidates: list[OracleRule]) -> OracleRule | None:
        own = [r for r in candidates if user is not None and r.user == user]
        general = [r for r in candidates if r.user is None]
        chosen = own or general
        return chosen[-1] if chosen else None

    exact = best([r for r in rules if r.exact and r.key == urlkey])
    if exact is not None:
        return exact
    prefixes = sorted(
        {r.key for r in rules if not r.exact and r.key != "*," and urlkey.startswith(r.key)},
        key=len,
        reverse=True,
    )
    for key in prefixes:
        found = best([r for r in rules if not r.exact and r.key == key])
        if found is not None:
            return found
    return best([r for r in rules if not r.exact and r.key == "*,"])


def decide(
    rules: list[OracleRule],
    urlkey: str,
    timestamp: str,
    *,
    default: str = "allow",
    user: str | None = None,
    embargo_before: str | None = None,
) -> str:
    """``allow``, ``block`` or ``exclude`` for one capture (14-digit timestamp)."""
    rule = find(rules, urlkey, user)
    access = default if rule is None else rule.access
    outside_before = rule is not None and rule.before and timestamp >= rule.before
    outside_after = rule is not None and rule.after and timestamp <= rule.after
    if outside_before or outside_after:
        access = default
    if (
        embargo_before is not None
        and access not in ("allow_ignore_embargo", "exclude")
        and timestamp < embargo_before
    ):
        access = "exclude"
    return "allow" if access == "allow_ignore_embargo" else access
