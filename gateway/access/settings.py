"""Access settings from the config: a collection's ``acl_paths``, ``default_access``
and ``embargo`` (named and meaning as in pywb's config), and the top-level
``access:`` section (``user_header``).

:mod:`gateway.config` reads the YAML and hands the values here; every problem
raises :class:`~gateway.errors.ConfigError` naming the YAML path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, cast

from gateway.access.rules import ACCESS_TYPES, Access
from gateway.access.timeutil import Period, pad_up, parse_period
from gateway.errors import ConfigError
from gateway.paths import absolute_path

__all__ = [
    "ACCESS_KEYS",
    "AccessConfig",
    "AccessSettings",
    "Embargo",
    "parse_access_config",
    "parse_access_settings",
]

#: The keys of a collection (or of a sequence step) that configure access.
ACCESS_KEYS: Final = ("acl_paths", "default_access", "embargo")
_EMBARGO_KEYS: Final = ("before", "after", "newer", "older")
_HEADER_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Embargo:
    """pywb's ``embargo``: the first of ``before``, ``after``, ``newer``, ``older``
    given decides (pywb ``AccessChecker.check_embargo``); a capture it covers
    gets ``access`` (default ``exclude``) unless its rule is ``exclude`` or
    ``allow_ignore_embargo``.

    ``kind`` is which one; ``timestamp`` a 14-digit timestamp padded up
    (``before``/``after``); ``period`` the ``newer``/``older`` period.
    """

    kind: str
    timestamp: str | None = None
    period: Period | None = None
    access: Access = "exclude"


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessConfig:
    """A collection's access control: absolute ``acl_paths`` (files and
    directories of ``.aclj`` files), ``default_access`` and ``embargo``.
    ``path`` is the YAML path of the collection, for errors."""

    acl_paths: tuple[str, ...] = ()
    default_access: Access = "allow"
    embargo: Embargo | None = None
    path: str = ""

    @property
    def enabled(self) -> bool:
        """True when anything can change what is served (pywb checks access only
        with ``acl_paths`` or ``embargo``; here a ``default_access`` alone counts)."""
        return bool(self.acl_paths) or self.embargo is not None or self.default_access != "allow"


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessSettings:
    """The top-level ``access:`` section.

    ``user_header``: the request header that names the user of per-user rules
    (``"user"`` on a rule), set by a proxy in front of the gateway. None (the
    default): no client-sent header changes what anyone may see, and only
    rules without ``user`` apply. pywb trusts ``X-Pywb-ACL-User`` from anyone.
    """

    user_header: str | None = None


def parse_access_settings(value: object, path: str) -> AccessSettings:
    """The ``access:`` mapping; raises :class:`ConfigError`."""
    if value is None:
        return AccessSettings()
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {value!r}")
    unknown = sorted(set(value) - {"user_header"})
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}", "unknown key; expected user_header")
    header = value.get("user_header")
    if header is None:
        return AccessSettings()
    if not isinstance(header, str) or not header or not set(header) <= _HEADER_CHARS:
        raise ConfigError(
            f"{path}.user_header",
            f"expected a header name (letters, digits, '-'), got {header!r}",
        )
    return AccessSettings(user_header=header)


def parse_access_config(data: dict[str, object], path: str) -> AccessConfig:
    """The access keys of one collection mapping (absent keys: no access control)."""
    raw_paths = data.get("acl_paths")
    paths: tuple[str, ...] = ()
    if raw_paths is not None:
        items = raw_paths if isinstance(raw_paths, list) else [raw_paths]
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                where = (
                    f"{path}.acl_paths[{i}]" if isinstance(raw_paths, list) else f"{path}.acl_paths"
                )
                raise ConfigError(
                    where, f"expected the path of an .aclj file or a directory, got {item!r}"
                )
        paths = tuple(absolute_path(cast("str", item).strip()) for item in items)
    default = data.get("default_access", "allow")
    if default not in ("allow", "block", "exclude"):
        raise ConfigError(
            f"{path}.default_access", f"{default!r}: expected one of allow, block, exclude"
        )
    embargo = _embargo(data.get("embargo"), f"{path}.embargo")
    return AccessConfig(acl_paths=paths, default_access=default, embargo=embargo, path=path)


def _embargo(value: object, path: str) -> Embargo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping with one of {', '.join(_EMBARGO_KEYS)}")
    unknown = sorted(set(value) - {*_EMBARGO_KEYS, "access"})
    if unknown:
        raise ConfigError(
            f"{path}.{unknown[0]}", f"unknown key; expected {', '.join(_EMBARGO_KEYS)} or access"
        )
    access = value.get("access", "exclude")
    if access not in ACCESS_TYPES:
        raise ConfigError(
            f"{path}.access", f"{access!r}: expected one of {', '.join(ACCESS_TYPES)}"
        )
    kind = next((key for key in _EMBARGO_KEYS if value.get(key)), None)
    if kind is None:
        raise ConfigError(path, f"expected one of {', '.join(_EMBARGO_KEYS)}")
    given = value[kind]
    if kind in ("before", "after"):
        text = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
        if not isinstance(text, str) or not text.isdigit() or len(text) > 14:
            raise ConfigError(
                f"{path}.{kind}", f"expected a timestamp of 1 to 14 digits, got {given!r}"
            )
        return Embargo(kind=kind, timestamp=pad_up(text), access=cast("Access", access))
    try:
        period = parse_period(given, kind)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    return Embargo(kind=kind, period=period, access=cast("Access", access))
