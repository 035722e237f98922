"""Regular expressions a client sends, compiled for RE2: linear time, bounded memory.

pywb (``~`` filters of ``/index``, ``/resource`` and the memento routes) and
the IA CDX server (``filter`` on ``/cdx``) run client patterns on
backtracking engines, where ``(.*.*)*Z`` against a long URL takes minutes and
holds the event loop the whole time. The gateway compiles every
client-supplied pattern with RE2 (the ``google-re2`` bindings), whose
matching time is linear in the length of the text whatever the pattern, and
whose memory per pattern is capped (:data:`MAX_PATTERN_MEMORY_BYTES`). RE2
has no backreferences and no lookaround (``(a)\\1``, ``(?=a)``): such a
pattern is a 400 naming the filter and RE2's reason. Python's ``\\Z`` is
RE2's ``\\z``; both are accepted.

Bounds, each a 400 when passed: :data:`MAX_PATTERN_CHARS` characters per
pattern, :data:`MAX_FILTERS` filters per request, and repeat counts up to
:data:`MAX_REPEAT` (RE2's own limit; RE2 reads a count too large to parse,
``x{99999999999}``, as literal text, which would silently match something
else than asked).

Patterns are compiled once per distinct text (an LRU of
:data:`_CACHE_SIZE`), so a replay client asking the same filter again and
again costs one compilation. Fuzzy-matching rules from an operator's rules
file are not client input: they stay on Python's ``re``
(:mod:`gateway.index.fuzzy`).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

import re2

from gateway.errors import BadRequest

__all__ = [
    "MAX_FILTERS",
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_MEMORY_BYTES",
    "MAX_REPEAT",
    "ClientRegex",
    "check_filter_count",
    "compile_client_regex",
]

#: Longest pattern accepted, in characters.
MAX_PATTERN_CHARS: Final = 1024
#: Most ``filter`` parameters in one request (each is run on every capture).
MAX_FILTERS: Final = 32
#: Largest ``{n}`` / ``{n,m}`` repeat count (RE2's ``kMaxRepeat``).
MAX_REPEAT: Final = 1000
#: RE2's memory budget per compiled pattern (program and DFA cache); a
#: pattern that needs more does not compile. Past the DFA's share RE2 falls
#: back to its NFA, still linear.
MAX_PATTERN_MEMORY_BYTES: Final = 1 << 20
_CACHE_SIZE: Final = 256

#: ``{`` of a repeat outside a character class, after any escapes were skipped.
_REPEAT: Final = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")


class ClientRegex:
    """A compiled client pattern: does it match at the start of a text, or all of it.

    Texts go to RE2 as UTF-8 bytes: google-re2 maps every match of a ``str``
    back to character offsets, which costs twice the match itself, and the
    filters only need a yes or no.
    """

    __slots__ = ("_regexp",)

    def __init__(self, regexp: Any) -> None:
        self._regexp = regexp

    def match(self, text: str) -> bool:
        """True when the pattern matches at the start of ``text`` (``re.match``)."""
        return self._regexp.match(text.encode("utf-8", "surrogatepass")) is not None

    def fullmatch(self, text: str) -> bool:
        """True when the pattern matches all of ``text`` (``re.fullmatch``)."""
        return self._regexp.fullmatch(text.encode("utf-8", "surrogatepass")) is not None


def check_filter_count(count: int, param: str = "filter") -> None:
    """Raise :class:`BadRequest` (``param``) past :data:`MAX_FILTERS` filters.

    >>> check_filter_count(MAX_FILTERS)
    >>> check_filter_count(MAX_FILTERS + 1)
    Traceback (most recent call last):
    gateway.errors.BadRequest: filter: 33 filters given; at most 32 are accepted
    """
    if count > MAX_FILTERS:
        raise BadRequest(param, f"{count} filters given; at most {MAX_FILTERS} are accepted")


def compile_client_regex(pattern: str, *, param: str = "filter", filter_text: str) -> ClientRegex:
    """``pattern`` compiled with RE2; raises :class:`BadRequest` (``param``) naming
    ``filter_text`` and why when it cannot be (see the module docstring).

    >>> compile_client_regex("text/.*", filter_text="~mime:text/.*").match("text/html")
    True
    >>> compile_client_regex("(?=a)", filter_text="~url:(?=a)")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    gateway.errors.BadRequest: filter: '~url:(?=a)': not a regular expression RE2 accepts (...)...
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadRequest(
            param,
            f"{_cut(filter_text)!r}: regular expression of {len(pattern)} characters; "
            f"at most {MAX_PATTERN_CHARS} are accepted",
        )
    return _compile(pattern, param, filter_text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(pattern: str, param: str, filter_text: str) -> ClientRegex:
    _check_repeats(pattern, param, filter_text)
    try:
        compiled = ClientRegex(re2.compile(pattern.replace("\\Z", "\\z"), _OPTIONS))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise BadRequest(
            param,
            f"{_cut(filter_text)!r}: not a regular expression RE2 accepts ({_cut(str(reason))}); "
            "RE2 has no backreferences or lookaround",
        ) from None
    return compiled


def _check_repeats(pattern: str, param: str, filter_text: str) -> None:
    """Refuse repeat counts past :data:`MAX_REPEAT` (one linear pass over ``pattern``)."""
    i, end, in_class = 0, len(pattern), False
    while i < end:
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # a literal ] first in a class
                i += 1
            continue
        elif char == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is not None:
                counts = [int(n) for n in repeat.groups("") if n]
                if max(counts) > MAX_REPEAT:
                    raise BadRequest(
                        param,
                        f"{_cut(filter_text)!r}: repeat count {max(counts)} is past the "
                        f"largest RE2 accepts, {MAX_REPEAT}",
                    )
                i = repeat.end()
                continue
        i += 1


def _cut(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters: a message never echoes a client's input at length."""
    return text if len(text) <= limit else text[:limit] + "..."


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY_BYTES
    options.log_errors = False  # RE2 would print the client's pattern to stderr
    return options


_OPTIONS: Final = _options()
