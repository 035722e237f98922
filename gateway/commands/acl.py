"""``gateway acl``: a collection's access rules, with pywb ``wb-manager acl`` meanings.

::

    gateway acl add [--config F] COLL URL ACCESS [-e] [-u USER] [--message M]
                    [--reason R] [--comment C] [--by NAME]
    gateway acl remove [--config F] COLL URL [-e] [-u USER]
    gateway acl list [--config F] COLL
    gateway acl match [--config F] COLL URL [-u USER] [--at TIMESTAMP]
    gateway acl importtxt [--config F] COLL FILE ACCESS

``add``, ``remove`` and ``importtxt`` write the collection's first
``acl_paths`` entry (``access-rules.aclj`` inside it when it is a directory),
sorted and atomically (:class:`~gateway.access.aclfile.AclFile`); a running
gateway picks the change up by itself. ``add`` stamps ``modified_at`` (now)
and ``modified_by`` (``--by``, else ``$USER``). ``list`` prints every rule
in force for the collection (all its files). ``match`` prints the rule that
decides for URL (for ``--user``, at capture time ``--at``, default now) and
the access that results, embargo and ``default_access`` included.

Exit status: 0 done; 1 ``remove`` found no such rule; 2 a bad config, a
collection without ``acl_paths``, a rule file that does not parse, or a bad
argument (an unknown access, a URL that cannot be canonicalized).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.access.settings import AccessConfig

__all__ = ["add_subcommands"]

DEFAULT_CONFIG = "collections.yaml"


class _Refused(Exception):
    """A reason to exit 2, printed as ``gateway acl OP: reason``."""


def _access_config(args: argparse.Namespace) -> AccessConfig:
    from gateway.config import load_config
    from gateway.errors import ConfigError

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise _Refused(f"bad config {args.config}: {exc}") from exc
    collection = config.collections.get(args.coll)
    if collection is None:
        names = ", ".join(config.collections) or "none"
        raise _Refused(f"no collection {args.coll!r} in {args.config} (collections: {names})")
    return collection.access


def _target(access: AccessConfig, args: argparse.Namespace) -> str:
    from pathlib import Path

    from gateway.access.aclfile import DEFAULT_FILE

    if not access.acl_paths:
        raise _Refused(
            f"collection {args.coll!r} has no acl_paths; add one to it in {args.config} "
            "(e.g. acl_paths: ./acl/)"
        )
    first = access.acl_paths[0]
    if Path(first).is_dir() or first.endswith("/"):
        return str(Path(first) / DEFAULT_FILE)
    return first


def _edit(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from gateway.access.aclfile import AclFile

    path = Path(_target(_access_config(args), args))
    acl = AclFile.read(path)
    stamp = {
        "modified_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "modified_by": args.by or os.environ.get("USER") or "unknown",
    }
    if args.op == "remove":
        removed = acl.remove(args.url, exact=args.exact_match, user=args.user)
        if removed is None:
            print(f"Rule to remove not found in {path}", file=sys.stderr)
            return 1
        acl.write()
        print(f"Removed Rule:\n    {removed.text or removed.to_aclj()}")
        return 0
    if args.op == "importtxt":
        count = 0
        with open(args.filename, encoding="utf-8") as handle:
            for line in handle:
                url = line.strip()
                if url and not url.startswith("#"):
                    acl.add(url, args.access, extra=stamp)
                    count += 1
        acl.write()
        print(f"Added or replaced {count} rules from {args.filename} in {path}")
        return 0
    extra = {
        name: value
        for name, value in (
            ("message", args.message),
            ("reason", args.reason),
            ("comment", args.comment),
        )
        if value
    }
    rule, replaced = acl.add(
        args.url, args.access, exact=args.exact_match, user=args.user, extra={**extra, **stamp}
    )
    acl.write()
    if replaced is not None:
        print(f"Existing Rule Found, Replacing:\n    {replaced.text}\nwith:")
    else:
        print("Added new Rule:")
    print(f"    {rule.to_aclj()}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from gateway.access.rules import read_rule_files

    access = _access_config(args)
    rules = read_rule_files(access.acl_paths)
    print(f"Rules for {args.coll} from {', '.join(rules.sources) or '(no files)'}:")
    for rule in rules.rules():
        print(rule.text or rule.to_aclj())
    return 0


def _match(args: argparse.Namespace) -> int:
    from gateway.access.aclfile import rule_key
    from gateway.access.policy import AccessPolicy
    from gateway.access.timeutil import now_timestamp, pad_up
    from gateway.cdx.query import TIMESTAMP_DIGITS

    access = _access_config(args)
    if args.at is not None and not TIMESTAMP_DIGITS.fullmatch(args.at):
        raise _Refused(f"--at {args.at!r}: expected a timestamp of 1 to 14 digits")
    policy = AccessPolicy.load(access)
    timestamp = pad_up(args.at) if args.at else now_timestamp()
    decision = policy.decide(rule_key(args.url), timestamp, args.user)
    print("Matched rule:")
    if decision.rule is None:
        print(f"    <No Match, Using Default Rule> (default_access: {access.default_access})")
    else:
        print(f"    {decision.rule.text or decision.rule.to_aclj()}")
    print(f"access: {decision.access} (capture time {timestamp}, user {args.user or '-'})")
    return 0


def _run(args: argparse.Namespace) -> int:
    from gateway.access.rules import AclFileError

    try:
        return {"list": _list, "match": _match}.get(args.op, _edit)(args)
    except (_Refused, AclFileError, ValueError, OSError) as exc:
        print(f"gateway acl {args.op}: {exc}", file=sys.stderr)
        return 2


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``gateway acl`` (its implementation is imported when it runs)."""
    acl = sub.add_parser("acl", help="a collection's access rules (pywb wb-manager acl)")
    ops = acl.add_subparsers(dest="op", required=True)
    accesses = ("allow", "block", "exclude", "allow_ignore_embargo")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = ops.add_parser(name, help=help_text)
        parser.add_argument("--config", default=DEFAULT_CONFIG, help="collections.yaml")
        parser.add_argument("coll", metavar="COLL", help="the collection")
        parser.set_defaults(run=_run)
        return parser

    add = command("add", "add or replace a rule")
    add.add_argument("url", metavar="URL", help="a URL, or a SURT prefix used as it is")
    add.add_argument("access", choices=accesses)
    add.add_argument("-e", "--exact-match", action="store_true", help="this URL key only")
    add.add_argument("-u", "--user", help="the rule applies to this user only")
    add.add_argument("--message", help="public message, shown with the 451")
    add.add_argument("--reason", help="private: why")
    add.add_argument("--comment", help="private: a note")
    add.add_argument("--by", help="who made the change (default $USER)")

    remove = command("remove", "remove a rule")
    remove.add_argument("url", metavar="URL")
    remove.add_argument("-e", "--exact-match", action="store_true")
    remove.add_argument("-u", "--user")
    remove.set_defaults(by=None)

    command("list", "print the rules in force")

    match = command("match", "print the rule that decides for a URL, and the access")
    match.add_argument("url", metavar="URL")
    match.add_argument("-u", "--user")
    match.add_argument("--at", metavar="TIMESTAMP", help="capture time (default now)")

    importtxt = command("importtxt", "add a rule for every URL of a file (one a line)")
    importtxt.add_argument("filename", metavar="FILE")
    importtxt.add_argument("access", choices=accesses)
    importtxt.set_defaults(by=None)
