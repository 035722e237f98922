"""Fuzzy matching: an exact lookup that found nothing, tried again wider.

The behaviour of pywb's ``FuzzyMatcher`` (pywb/warcserver/index/fuzzymatcher.py),
which replay depends on: a page asks for ``app.js?_=1390766400`` (a cache
buster) or ``page?utm_source=feed``, and the archive holds ``app.js`` or
``page``. When an exact lookup has no captures, the first rule whose urlkey
prefix and pattern match the query's urlkey builds a wider query:

- the URL is cut after the rule's ``replace`` marker (``?`` by default, kept
  only when the rule adds filters; a ``/`` before a dropped ``?`` goes too);
- the match type is the rule's (``prefix`` by default; ``domain`` queries the
  host's parent domain);
- each group of the pattern becomes a filter from the rule's templates
  (``urlkey:{0}``: the urlkey contains the group);
- at most ``fuzzy_search_limit`` captures (100) are read.

Captures found through a site rule are all accepted. Through the generic
rule (``url_prefix: ''``) a capture is accepted, as in pywb's
``match_general_fuzzy_query``, when

- the requested URL names a file (its last path segment has an extension not
  listed in ``not_exts``), or the capture's MIME type is listed in ``mimes``,
  or it was a non-GET request, and the capture's URL is the requested URL
  without its query, with or without another query; or
- the capture's urlkey equals the requested urlkey once the ``url_normalize``
  rules (cache busters, ``utm_*``, JSONP callbacks, ``fbclid``) are applied to
  both, one after the other.

Accepted captures carry ``"is_fuzzy": "1"``. Rules files use pywb's
``rules.yaml`` format (``default_filters`` and ``rules`` entries with
``fuzzy_lookup``; other keys such as ``rewrite`` are ignored), so pywb's own
file can be given. :data:`DEFAULT_RULES` holds only the generic rule and
pywb's default filters.

Deliberate differences from pywb: the wider query keeps the request's
``closest`` order and its filters (pywb drops both, so its fuzzy answer is in
key order and may break the client's filter), and only ``matchType=exact``
lookups are widened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, cast
from urllib.parse import urlsplit

import yaml

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import MATCH_TYPES, CaptureQuery, CdxFilter, MatchType, key_range
from gateway.errors import BadRequest, ConfigError
from gateway.yaml_load import safe_load

__all__ = ["DEFAULT_RULES", "FUZZY_FIELD", "FuzzyRule", "FuzzyRules", "Widened", "load_rules"]

#: The field that marks a capture found by fuzzy matching (pywb's name).
FUZZY_FIELD: Final = "is_fuzzy"

ReType = Literal["search", "findall", "sub"]
_RE_TYPES: Final[tuple[ReType, ...]] = ("search", "findall", "sub")
_DEFAULT_FILTERS: Final = ("urlkey:{0}",)
#: A formatted filter that every capture passes (``urlkey`` contains ``""``).
_PASS_ALL: Final = "urlkey:"


@dataclass(frozen=True, slots=True)
class FuzzyRule:
    """One ``fuzzy_lookup`` rule of a rules file (pywb ``FuzzyRule``).

    ``url_prefixes`` are urlkey prefixes (``""``: every urlkey); ``pattern`` is
    matched against the urlkey as ``re_type`` says; ``filters`` are filter
    templates in pywb syntax, ``{0}`` standing for each group; ``replace`` is
    where the URL is cut (or, for ``re_type: sub``, the replacement).
    """

    url_prefixes: tuple[str, ...]
    pattern: re.Pattern[str]
    replace: str = "?"
    filters: tuple[str, ...] = _DEFAULT_FILTERS
    match_type: MatchType = "prefix"
    re_type: ReType = "search"

    @property
    def is_generic(self) -> bool:
        """True for the catch-all rule, whose captures are checked one by one."""
        return self.url_prefixes == ("",)

    def groups(self, urlkey: str) -> tuple[str, ...] | None:
        """The pattern's groups in ``urlkey`` (None: the rule does not apply)."""
        if self.re_type == "findall":
            found = self.pattern.findall(urlkey)
            return tuple(g if isinstance(g, str) else "".join(g) for g in found)
        if self.re_type == "sub":
            return ()
        match = self.pattern.search(urlkey)
        return None if match is None else tuple(g or "" for g in match.groups())


@dataclass(frozen=True, slots=True)
class Widened:
    """The wider lookup for an empty exact one, and how to check its captures.

    What the generic rule compares each capture with is worked out once, here:
    ``url_no_query`` (the URL asked, without its query), ``names_file``
    (True or False when its last path segment has an extension: whether that
    makes it a file; None without one) and ``wanted_keys`` (the urlkey asked
    after each ``url_normalize`` rule, applied one after the other).
    """

    rules: FuzzyRules
    rule: FuzzyRule
    original: CaptureQuery
    query: CaptureQuery
    url_no_query: str
    names_file: bool | None
    wanted_keys: tuple[str, ...]

    def accepts(self, capture: CdxRecord) -> bool:
        """True when ``capture`` may stand in for the original URL (module docstring;
        for the generic rule pywb's ``match_general_fuzzy_query``)."""
        if not self.rule.is_generic:
            return True
        if capture.status == "204" and "__pywb_method=options" in capture.urlkey:
            return False
        check_query = self.names_file
        if check_query is None:
            rules = self.rules
            check_query = (
                capture.mime in rules.mimes
                or bool(capture.get("requestBody"))
                or bool(capture.get("method"))
            )
        url, bare = capture.url, self.url_no_query
        if check_query and (url == bare or url.startswith(bare + "?")):
            return True
        found = capture.urlkey
        pairs = zip(self.rules.normalize, self.wanted_keys, strict=True)
        for (pattern, replacement), wanted in pairs:
            found = pattern.sub(replacement, found)
            if wanted == found:
                return True
        return False


@dataclass(frozen=True, slots=True)
class FuzzyRules:
    """A rules file: the rules in order and the generic rule's default filters."""

    rules: tuple[FuzzyRule, ...]
    search_limit: int | None = 100
    not_exts: frozenset[str] = frozenset()
    mimes: frozenset[str] = frozenset()
    normalize: tuple[tuple[re.Pattern[str], str], ...] = ()

    def describe(self) -> str:
        """One line for ``gateway check-config``: what the rules hold."""
        sites = sum(1 for rule in self.rules if not rule.is_generic)
        generic = "with" if any(rule.is_generic for rule in self.rules) else "without"
        limit = f"at most {self.search_limit}" if self.search_limit is not None else "all"
        return (
            f"on: {sites} site rule(s) {generic} the generic rule, "
            f"{len(self.normalize)} normalization(s), {limit} candidates per lookup"
        )

    def widen(self, query: CaptureQuery) -> Widened | None:
        """The wider query for ``query`` when it is exact and a rule applies, else None.

        The wider query keeps everything else of ``query`` (closest, time
        range, filters, output) and adds the rule's filters; its limit is
        ``search_limit`` when set. None too when the widened URL or a rule
        filter made from the URL cannot be parsed.
        """
        if query.match_type != "exact" or not query.allow_fuzzy:
            return None
        urlkey = query.key
        for rule in self.rules:
            if not urlkey.startswith(rule.url_prefixes):
                continue
            groups = rule.groups(urlkey)
            if groups is None:
                continue
            try:
                return self._widened(rule, groups, query)
            except (ValueError, BadRequest):
                # The widened URL does not parse, or a rule's filter filled in
                # with the client's URL is no pattern RE2 takes: no wider lookup.
                return None
        return None

    def _widened(self, rule: FuzzyRule, groups: tuple[str, ...], query: CaptureQuery) -> Widened:
        url = query.url
        filters = {template.format(group) for group in groups for template in rule.filters}
        if rule.re_type == "sub":
            url = rule.pattern.sub(rule.replace, url)
            filters = set()
        else:
            # pywb: without filters of its own the rule drops the '?' (and a '/' before it).
            bare = (not filters or filters == {_PASS_ALL}) and rule.replace == "?"
            cut = url.find(rule.replace)
            if cut > 0:
                end = cut + len(rule.replace)
                if bare:
                    end -= 1
                    if url[end - 1] == "/":
                        end -= 1
                url = url[:end]
            elif not bare:
                url += rule.replace[0]
        if rule.match_type == "domain":
            url = urlsplit(url if "://" in url else f"http://{url}").netloc.split(".", 1)[-1]
        key, end_key = key_range(url, rule.match_type)
        added = tuple(CdxFilter.parse(text) for text in sorted(filters) if text != _PASS_ALL)
        wider = query.evolve(
            url=url,
            match_type=rule.match_type,
            key=key,
            end_key=end_key,
            filters=query.filters + added,
            limit=self.search_limit if self.search_limit is not None else query.limit,
            fuzzy=True,
        )
        url_no_query = query.url.split("?", 1)[0]
        ext = os.path.splitext(url_no_query.rsplit("/", 1)[-1])[1][1:]
        wanted_keys = []
        wanted = query.key
        for pattern, replacement in self.normalize:
            wanted = pattern.sub(replacement, wanted)
            wanted_keys.append(wanted)
        return Widened(
            self,
            rule,
            query,
            wider,
            url_no_query=url_no_query,
            names_file=(ext not in self.not_exts) if ext else None,
            wanted_keys=tuple(wanted_keys),
        )


# ------------------------------------------------------------------ rules files
def load_rules(path: str | Path, where: str) -> FuzzyRules:
    """Read a pywb-format rules file; ``where`` is the YAML path that named it.

    Raises :class:`ConfigError` naming ``where``, the file and the place in it.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(where, f"cannot read fuzzy rules file {path}: {exc.strerror}") from exc
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(where, f"fuzzy rules file {path} is not valid YAML: {exc}") from exc
    try:
        return parse_rules(data)
    except _RulesError as exc:
        raise ConfigError(where, f"fuzzy rules file {path}: {exc.where}: {exc.problem}") from exc


class _RulesError(ValueError):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def parse_rules(data: object) -> FuzzyRules:
    """Rules from the parsed YAML of a pywb ``rules.yaml``; raises ValueError naming the place."""
    if not isinstance(data, Mapping):
        raise _RulesError("(top level)", "expected a mapping with 'rules' and 'default_filters'")
    defaults = data.get("default_filters") or {}
    if not isinstance(defaults, Mapping):
        raise _RulesError("default_filters", "expected a mapping")
    limit = defaults.get("fuzzy_search_limit")
    try:
        search_limit = None if limit is None else int(limit)
    except (TypeError, ValueError):
        raise _RulesError(
            "default_filters.fuzzy_search_limit", f"expected an integer, got {limit!r}"
        ) from None
    normalize = []
    for i, item in enumerate(_list(defaults.get("url_normalize"), "default_filters.url_normalize")):
        at = f"default_filters.url_normalize[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("match"), str):
            raise _RulesError(at, "expected a mapping with 'match' (a regex) and 'replace'")
        normalize.append((_regex(item["match"], f"{at}.match"), str(item.get("replace") or "")))
    rules: list[FuzzyRule] = []
    for i, item in enumerate(_list(data.get("rules"), "rules")):
        at = f"rules[{i}]"
        if not isinstance(item, Mapping):
            raise _RulesError(at, "expected a mapping")
        if item.get("fuzzy_lookup") is not None:
            rules.append(_rule(item, at))
    return FuzzyRules(
        rules=tuple(rules),
        search_limit=search_limit,
        not_exts=frozenset(map(str, _list(defaults.get("not_exts"), "default_filters.not_exts"))),
        mimes=frozenset(map(str, _list(defaults.get("mimes"), "default_filters.mimes"))),
        normalize=tuple(normalize),
    )


def _rule(item: Mapping[str, object], at: str) -> FuzzyRule:
    prefixes = item.get("url_prefix")
    prefix_list = prefixes if isinstance(prefixes, list) else [prefixes]
    if not all(isinstance(p, str) for p in prefix_list):
        raise _RulesError(f"{at}.url_prefix", "expected a urlkey prefix or a list of them")
    config = item["fuzzy_lookup"]
    if not isinstance(config, Mapping):
        return FuzzyRule(
            tuple(cast(list[str], prefix_list)), _pattern(config, f"{at}.fuzzy_lookup")
        )
    at = f"{at}.fuzzy_lookup"
    match_type = config.get("type", "prefix")
    if match_type not in MATCH_TYPES:
        raise _RulesError(f"{at}.type", f"{match_type!r} is not one of {', '.join(MATCH_TYPES)}")
    re_type = config.get("re_type", "search")
    if re_type not in _RE_TYPES:
        raise _RulesError(f"{at}.re_type", f"{re_type!r} is not one of {', '.join(_RE_TYPES)}")
    filters = config.get("filter", list(_DEFAULT_FILTERS))
    filter_list = filters if isinstance(filters, list) else [filters]
    if not all(isinstance(f, str) for f in filter_list):
        raise _RulesError(f"{at}.filter", "expected a filter template or a list of them")
    for template in filter_list:
        try:
            CdxFilter.parse(template.format(""))
        except (IndexError, KeyError, ValueError, BadRequest) as exc:
            raise _RulesError(f"{at}.filter", f"{template!r}: {exc}") from None
    replace = config.get("replace", "?")
    if not isinstance(replace, str) or (not replace and re_type != "sub"):
        raise _RulesError(f"{at}.replace", f"expected a non-empty string, got {replace!r}")
    return FuzzyRule(
        url_prefixes=tuple(cast(list[str], prefix_list)),
        pattern=_pattern(config.get("match"), f"{at}.match"),
        replace=replace,
        filters=tuple(cast(list[str], filter_list)),
        match_type=cast(MatchType, match_type),
        re_type=cast(ReType, re_type),
    )


def _pattern(config: object, at: str) -> re.Pattern[str]:
    """pywb ``make_regex``: a regex, a list of query args, or ``{regex, args}``."""
    if isinstance(config, list):
        return _regex(_args_regex(config, at), at)
    if isinstance(config, Mapping):
        regex = config.get("regex", "")
        if not isinstance(regex, str):
            raise _RulesError(f"{at}.regex", f"expected a regex, got {regex!r}")
        return _regex(regex + _args_regex(_list(config.get("args"), f"{at}.args"), at), at)
    if not isinstance(config, str):
        raise _RulesError(
            at, f"expected a regex, a list of query args or a mapping, got {config!r}"
        )
    return _regex(config, at)


def _args_regex(args: Sequence[object], at: str) -> str:
    """Query args, sorted, each captured as ``name=value`` in that order."""
    if not all(isinstance(a, str) for a in args):
        raise _RulesError(at, "expected query argument names")
    return ".*".join(f"[?&]({re.escape(str(name))}=[^&]+)" for name in sorted(map(str, args)))


def _regex(text: str, at: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise _RulesError(at, f"invalid regex {text!r}: {exc}") from None


def _list(value: object, at: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _RulesError(at, "expected a list")
    return value


#: The generic rule and pywb's default filters (pywb/rules.yaml, ``default_filters``).
DEFAULT_RULES: Final = FuzzyRules(
    rules=(FuzzyRule(("",), re.compile("()")),),
    search_limit=100,
    # Extensions of scripts, not files: their query selects the answer.
    not_exts=frozenset({"asp", "aspx", "jsp", "php", "pl", "exe", "dll"}),
    # Streaming manifests and Flash, whose query is noise.
    mimes=frozenset(
        {
            "application/x-shockwave-flash",
            "application/dash+xml",
            "application/x-mpegURL",
            "application/vnd.apple.mpegurl",
        }
    ),
    normalize=tuple(
        (re.compile(pattern), replacement)
        for pattern, replacement in (
            # cache busters: _=, cb=, uncache= with a number
            (r"[?&](_|cb|uncache)=([\d]+)(?=&|$)", ""),
            # Google Analytics campaign arguments
            (r"[?&]utm_[^=]+=[^&]+(?=&|$)", ""),
            # JSONP callbacks named with a random suffix
            (r"[?&](callback=jsonp)[^&]+(?=&|$)", r"\1"),
            # jQuery's callback=jQuery123_456
            (r"[?&]((?:\w+)=jquery)[\d]+_[\d]+", r"\1"),
            # any *bust*/*ts* argument whose value looks like a timestamp
            (r"[?&](\w*(bust|ts)\w*=1[\d]{12,15})(?=&|$)", ""),
            # a Facebook click ID and everything after it
            (r"[?&]fbclid=.*", ""),
        )
    ),
)
