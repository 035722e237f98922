"""``gateway token``: make a bearer token and the SHA-256 the config holds.

::

    gateway token new      print a new random token (43 characters, 256 bits)
    gateway token hash     read a token from standard input, print its SHA-256 (hex)

``hash`` reads the token from standard input, not from the command line,
so that it stays out of the shell's history and the process list; one
final newline is dropped (``echo`` adds one), and at a terminal it asks
without echoing. The digest goes in ``auth.tokens[].sha256``
(:mod:`gateway.access.tokens`, ``docs/access-tokens.md``). Exit status: 0,
or 2 when the input is not a token (RFC 6750 ``b64token`` syntax, at least
16 characters), said on standard error without repeating it.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_subcommands"]


def _new(args: argparse.Namespace) -> int:
    from gateway.access.tokens import new_token

    print(new_token())
    return 0


def _hash(args: argparse.Namespace) -> int:
    from gateway.access.tokens import check_token, token_sha256

    if sys.stdin.isatty():
        import getpass

        text = getpass.getpass("token: ")
    else:
        text = sys.stdin.read()
    token = text.removesuffix("\n").removesuffix("\r")
    problem = check_token(token)
    if problem is not None:
        print(f"gateway token hash: standard input is {problem}", file=sys.stderr)
        return 2
    print(token_sha256(token))
    return 0


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``token new`` and ``token hash`` on the ``gateway`` parser."""
    token = sub.add_parser("token", help="make bearer tokens and their SHA-256 for auth:")
    actions = token.add_subparsers(dest="token_command", required=True)
    new = actions.add_parser("new", help="print a new random token")
    new.set_defaults(run=_new)
    hash_ = actions.add_parser(
        "hash", help="read a token from standard input and print its SHA-256 (hex)"
    )
    hash_.set_defaults(run=_hash)
