"""Editing one ``.aclj`` file as pywb's ``wb-manager acl`` does: add, remove, import.

:class:`AclFile` reads a file whole (every line must parse), changes its
rules in memory and writes it back sorted in reverse (descending) line order,
as pywb's binary search needs, atomically: a temporary file in the same
directory, written, fsynced, renamed over the file, and the directory fsynced
(a crash leaves the old file or the new one, never half of one).

A rule's key is the URL's SURT (:func:`~gateway.cdx.cdxj.canonical_urlkey`),
or the text as given when it already looks like a SURT prefix (pywb
``ACLManager.SURT_RX``: ``com,``, ``org,iana)/about``); ``exact`` adds ``###``.
Rules with the same key, exactness and user replace each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.access.rules import EXACT_SUFFIX, Access, Rule, parse_rule_line
from gateway.cdx.cdxj import canonical_urlkey

__all__ = ["DEFAULT_FILE", "AclFile", "rule_key"]

#: The file written in an ``acl_paths`` directory (pywb ``ACLManager.DEFAULT_FILE``).
DEFAULT_FILE: Final = "access-rules.aclj"
_SURT: Final = re.compile(r"([^:.]+[,)])+")


def rule_key(url_or_surt: str, *, exact: bool = False) -> str:
    """The key of a rule for ``url_or_surt`` (pywb ``ACLManager.to_key``).

    >>> rule_key("http://www.iana.org/about")
    'org,iana)/about'
    >>> rule_key("com,", exact=False)
    'com,'
    >>> rule_key("http://example.com/a", exact=True)
    'com,example)/a###'

    Raises ValueError when a URL cannot be canonicalized.
    """
    key = url_or_surt if _SURT.search(url_or_surt) else canonical_urlkey(url_or_surt)
    return key + EXACT_SUFFIX if exact else key


@dataclass(slots=True)
class AclFile:
    """The rules of one ``.aclj`` file, in memory, and where to write them back."""

    path: Path
    rules: list[Rule]

    @classmethod
    def read(cls, path: Path) -> AclFile:
        """Read ``path`` (a missing file has no rules); raises
        :class:`~gateway.access.rules.AclFileError` on a line that does not parse."""
        rules: list[Rule] = []
        if path.exists():
            with path.open(encoding="utf-8") as handle:
                for number, text in enumerate(handle, 1):
                    if text.strip():
                        rules.append(parse_rule_line(text, path=str(path), line=number))
        return cls(path, rules)

    def add(
        self,
        url: str,
        access: Access,
        *,
        exact: bool = False,
        user: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> tuple[Rule, Rule | None]:
        """Add a rule (``extra``: OutbackCDX keys such as ``message``); returns it and
        the rule it replaced, if any."""
        fields: dict[str, object] = {"access": access, "url": url}
        if user:
            fields["user"] = user
        fields.update(extra or {})
        rule = parse_rule_line(f"{rule_key(url, exact=exact)} - {json.dumps(fields)}")
        for i, old in enumerate(self.rules):
            if (old.key, old.exact, old.user) == (rule.key, rule.exact, rule.user):
                self.rules[i] = rule
                return rule, old
        self.rules.append(rule)
        return rule, None

    def remove(self, url: str, *, exact: bool = False, user: str | None = None) -> Rule | None:
        """Remove the rule of ``url`` (same key, exactness and user); returns it, or None."""
        key = rule_key(url, exact=exact)
        for i, old in enumerate(self.rules):
            if old.full_key == key and old.user == user:
                return self.rules.pop(i)
        return None

    def lines(self) -> list[str]:
        """The file's lines, sorted in reverse as pywb reads them."""
        return sorted((rule.text or rule.to_aclj() for rule in self.rules), reverse=True)

    def write(self) -> None:
        """Write the rules sorted, atomically (module docstring)."""
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        data = "".join(line + "\n" for line in self.lines()).encode("utf-8")
        fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
