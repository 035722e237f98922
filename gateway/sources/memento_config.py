"""The settings of a remote Memento source: three URL templates and a page budget.

``memento+URL`` (or a plain ``http(s)://`` URL) expands as pywb's
``MementoIndexSource.from_timegate_url`` does; the mapping form
``{type: memento, timegate_url, timemap_url, replay_url, timemap_page_budget}``
is built by :mod:`gateway.config` from :class:`MementoSourceConfig`'s fields.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Final, Self
from urllib.parse import quote

__all__ = ["DEFAULT_TIMEMAP_PAGE_BUDGET", "MementoSourceConfig", "fill_template"]

#: TimeMap pages read per lookup unless configured otherwise.
DEFAULT_TIMEMAP_PAGE_BUDGET: Final = 10
_TEMPLATE_FIELDS: Final = frozenset({"url", "timestamp"})


@dataclass(frozen=True, slots=True, kw_only=True)
class MementoSourceConfig:
    """A remote Memento archive: three URL templates and a TimeMap page budget.

    ``timegate_url`` and ``timemap_url`` must contain ``{url}``;
    ``replay_url`` (a raw, unrewritten memento, e.g. wayback's ``id_``) must
    contain ``{url}`` and ``{timestamp}`` (14 digits). A ``{url}`` after a
    ``?`` is percent-encoded when filled (pywb ``res_template``).
    ``timemap_page_budget`` (at least 1) bounds the TimeMap pages read per lookup.
    """

    timegate_url: str
    timemap_url: str
    replay_url: str
    timemap_page_budget: int = DEFAULT_TIMEMAP_PAGE_BUDGET

    def __post_init__(self) -> None:
        _check_template("timegate_url", self.timegate_url, {"url"})
        _check_template("timemap_url", self.timemap_url, {"url"})
        _check_template("replay_url", self.replay_url, {"url", "timestamp"})
        if self.timemap_page_budget < 1:
            raise ValueError(
                f"timemap_page_budget: {self.timemap_page_budget} is too small; "
                "expected at least 1 page"
            )

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """``memento+URL`` or ``URL`` -> templates as pywb's ``from_timegate_url`` builds them.

        >>> c = MementoSourceConfig.from_shorthand("memento+http://arc.example/web/")
        >>> c.timegate_url, c.timemap_url, c.replay_url
        ('http://arc.example/web/{url}', 'http://arc.example/web/timemap/link/{url}', \
'http://arc.example/web/{timestamp}id_/{url}')

        A missing trailing ``/`` is added (pywb would glue the URL to the last
        path segment). Raises :class:`ValueError` unless ``URL`` is http(s).
        """
        base = text.removeprefix("memento+")
        if not base.startswith(("http://", "https://")) or len(base.split("/", 3)[2]) == 0:
            raise ValueError(
                f"{text!r}: expected memento+http(s)://host/path/ (the archive's TimeGate prefix)"
            )
        if "{" in base or "}" in base:
            raise ValueError(
                f"{text!r}: the shorthand takes a URL prefix, not a template; use the "
                "mapping form {type: memento, timegate_url: ..., timemap_url: ..., replay_url: ...}"
            )
        if not base.endswith("/"):
            base += "/"
        return cls(
            timegate_url=base + "{url}",
            timemap_url=base + "timemap/link/{url}",
            replay_url=base + "{timestamp}id_/{url}",
        )


def _check_template(name: str, value: str, needed: set[str]) -> None:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{name}: {value!r} is not an http(s) URL template")
    try:
        used = {field for _, field, _, _ in string.Formatter().parse(value) if field is not None}
    except ValueError as exc:
        raise ValueError(f"{name}: {value!r} is not a valid template: {exc}") from exc
    unknown = used - _TEMPLATE_FIELDS
    if unknown:
        raise ValueError(
            f"{name}: unknown placeholder {{{sorted(unknown)[0]}}} in {value!r}; "
            "expected {url} and {timestamp} only"
        )
    missing = needed - used
    if missing:
        raise ValueError(
            f"{name}: {value!r} lacks {', '.join('{' + m + '}' for m in sorted(missing))}"
        )


def fill_template(template: str, url: str, timestamp: str = "") -> str:
    """Fill ``{url}``/``{timestamp}``; ``{url}`` after ``?`` is quoted (pywb ``res_template``).

    >>> fill_template("http://a/{timestamp}id_/{url}", "http://b/?c=d", "20140126200624")
    'http://a/20140126200624id_/http://b/?c=d'
    >>> fill_template("http://a/timemap?url={url}", "http://b/?c=d")
    'http://a/timemap?url=http%3A//b/%3Fc%3Dd'
    """
    question = template.find("?")
    if 0 <= question < template.find("{url}"):
        url = quote(url)
    return template.format(url=url, timestamp=timestamp)
