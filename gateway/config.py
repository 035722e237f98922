"""The collection schema: collections.yaml -> frozen, typed config objects.

This module reads the config's YAML (:mod:`gateway.yaml_load`; a ``fuzzy:``
rules file is read by :mod:`gateway.index.fuzzy`), as pywb's distributed
archive config::

    collections:
      web: ./archive/indexes/                # shorthand: an index source
      pywb:
        index: ./indexes/                    # any source spec
        resource: ./warcs/                   # one resolver spec or a list
      many:
        index_group:                         # members queried concurrently
          local: ./indexes/
          ia: cdx+https://web.archive.org/cdx
        timeout: 2.5                         # float seconds, default 5
      fallback:
        sequence:                            # steps tried in order
          - name: local
            index: ./indexes/
            resource: ./warcs/
          - index_group: {...}
        fuzzy: false                         # or a pywb rules.yaml; default true
        acl_paths: ./acl/                    # access control (pywb): .aclj files or dirs,
        default_access: allow                # default_access, embargo (gateway.access)
    access:
      user_header: X-Acl-User                # who may name the user of per-user rules

A source spec is a shorthand string (selected by prefix: ``file://``,
``redis://``, ``memento+``, ``cdx+``, ``$live``; a plain path is a file or
directory index) or a mapping with ``type:`` and that type's fields. Unknown
keys and wrong types are errors; every :class:`~gateway.errors.ConfigError`
names the YAML path, e.g. ``collections.web.sequence[1].index: ...``. Paths
are made absolute by their config objects, at load (:mod:`gateway.paths`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from gateway.access.settings import (
    ACCESS_KEYS,
    AccessConfig,
    AccessSettings,
    parse_access_config,
    parse_access_settings,
)
from gateway.access.tokens import AuthSettings, parse_auth
from gateway.cdx.hosts import HostError, normalize_base_url
from gateway.clients import ClientSettings
from gateway.errors import ConfigError
from gateway.index.fuzzy import DEFAULT_RULES, FuzzyRules, load_rules
from gateway.jobs.settings import JobsSettings
from gateway.loaders.resolvers import RESOLVER_TYPES, resolver_kind_for_shorthand
from gateway.replay_settings import ReplaySettings
from gateway.sources import SOURCE_SHORTHANDS, SOURCE_TYPES
from gateway.storage import STORAGE_TYPES
from gateway.storage.settings import (
    PRIMARY,
    STORAGE_NAME,
    RetentionPolicy,
    SettingError,
    StorageSpec,
    check_retention,
)
from gateway.store.settings import DedupPolicy, PublishSettings, StoreSettings, check_publish
from gateway.yaml_load import coerce, mapping, reject_unknown, safe_load

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "CollectionConfig",
    "GatewayConfig",
    "MementoSettings",
    "ResolverSpec",
    "SourceSpec",
    "StepConfig",
    "load_config",
    "parse_config",
]

DEFAULT_TIMEOUT_S: Final = 5.0
#: Seconds to load one capture's record before the next capture is tried.
DEFAULT_LOAD_TIMEOUT_S: Final = 30.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
#: Path segments the API owns; a collection cannot be called one of these.
RESERVED_NAMES: Final = frozenset({"_status", "status", "health", "metrics"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """One index source: its registry ``type`` and typed ``config``."""

    type: str
    config: Any
    path: str
    #: Every capture this member serves is also written into the store.
    record: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolverSpec:
    """One ``resource:`` entry: a resolver ``type`` and typed ``config``."""

    type: str
    config: Any
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepConfig:
    """A step: named members (config order), their timeout and resource resolvers."""

    name: str
    members: tuple[tuple[str, SourceSpec], ...]
    timeout_s: float
    resolvers: tuple[ResolverSpec, ...]
    is_group: bool
    path: str
    #: Record every capture of every member of this step into the store.
    record: bool = False
    #: With ``record``: serve the store's capture when it is newer than this.
    skip_if_updated_days: float | None = None
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectionConfig:
    name: str
    steps: tuple[StepConfig, ...]
    is_sequence: bool
    #: Dedup policy for captures this collection records (None: the store's).
    dedup: DedupPolicy | None = None
    #: Fuzzy matching rules (``fuzzy:``; None: off).
    fuzzy: FuzzyRules | None = DEFAULT_RULES
    #: Access control (``acl_paths``, ``default_access``, ``embargo``; pywb's keys).
    access: AccessConfig = dataclasses.field(default_factory=AccessConfig)

    @property
    def records(self) -> bool:
        """True when any step or member records into the store."""
        return any(
            step.record or any(spec.record for _, spec in step.members) for step in self.steps
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MementoSettings:
    """The ``memento:`` section: how the RFC 7089 endpoints answer.

    ``timemap_page_size``: mementos per TimeMap page; longer TimeMaps are
    paged with ``rel="timemap"`` links carrying ``from``/``until``.
    ``public_url``: the base URL clients reach the gateway at
    (``https://archive.example.org``, a path allowed: ``.../gw``); the
    URIs the gateway writes (``Location``, ``Link``, TimeMaps) start with it.
    When unset they start with the request's scheme and its validated
    ``Host`` (:mod:`gateway.api.host`). Validated and normalised at load
    (:func:`~gateway.cdx.hosts.normalize_base_url`: ASCII host, no final ``/``).
    """

    timemap_page_size: int = 10_000
    public_url: str | None = None

    def __post_init__(self) -> None:
        if self.timemap_page_size < 1:
            raise ValueError(f"timemap_page_size {self.timemap_page_size}: expected 1 or more")
        if self.public_url is not None:
            try:
                normalized = normalize_base_url(self.public_url)
            except HostError as exc:
                raise SettingError("public_url", str(exc)) from None
            object.__setattr__(self, "public_url", normalized)


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """The whole file: collections in file order, upstream client settings."""

    collections: Mapping[str, CollectionConfig]
    client: ClientSettings
    memento: MementoSettings = dataclasses.field(default_factory=MementoSettings)
    #: In-browser replay (``replay:``, docs/replay.md).
    replay: ReplaySettings = dataclasses.field(default_factory=ReplaySettings)
    store: StoreSettings = dataclasses.field(default_factory=StoreSettings)
    #: True when the file has a ``store:`` section.
    store_configured: bool = False
    #: Background work (``jobs:``, :mod:`gateway.jobs`).
    jobs: JobsSettings = dataclasses.field(default_factory=JobsSettings)
    #: Bearer tokens and the routes that require them (``auth:``, :mod:`gateway.access.tokens`).
    auth: AuthSettings = dataclasses.field(default_factory=AuthSettings)
    #: The ``access:`` section (``user_header``).
    access: AccessSettings = dataclasses.field(default_factory=AccessSettings)
    source_file: str = "<string>"

    @property
    def uses_store(self) -> bool:
        """Whether the app must open the store: configured, ``$store`` used, or recording."""
        return (
            self.store_configured
            or any(coll.records for coll in self.collections.values())
            or any(
                spec.type == "store"
                for coll in self.collections.values()
                for step in coll.steps
                for _, spec in step.members
            )
        )


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate ``path``; raises :class:`ConfigError` (YAML path, problem)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the config file: {exc.strerror}") from exc
    return parse_config(text, source_file=str(path))


def parse_config(text: str, *, source_file: str = "<string>") -> GatewayConfig:
    """Validate YAML text; raises :class:`ConfigError` naming the YAML path of the problem."""
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(source_file, f"not valid YAML{where}: {exc}") from exc
    if data is None:
        data = {}
    root = mapping(data, "(top level)")
    reject_unknown(
        root,
        {"collections", "client", "memento", "replay", "store", "jobs", "auth", "access"},
        "(top level)",
    )
    collections_data = mapping(root.get("collections") or {}, "collections")
    collections: dict[str, CollectionConfig] = {}
    for name, value in collections_data.items():
        path = f"collections.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise ConfigError(
                path,
                f"invalid collection name {name!r}; expected letters, digits, '_', '.', '-' "
                f"(not one of {', '.join(sorted(RESERVED_NAMES))})",
            )
        collections[name] = _collection(name, value, path)
    client = _dataclass(ClientSettings, root.get("client") or {}, "client")
    store = _store(root.get("store") or {}, "store")
    memento = _dataclass(MementoSettings, root.get("memento") or {}, "memento")
    replay = _dataclass(ReplaySettings, root.get("replay") or {}, "replay")
    jobs = _dataclass(JobsSettings, root.get("jobs") or {}, "jobs")
    auth = parse_auth(root["auth"], "auth") if "auth" in root else AuthSettings()
    access = parse_access_settings(root.get("access"), "access")
    return GatewayConfig(
        collections=collections,
        client=client,
        memento=memento,
        replay=replay,
        store=store,
        store_configured="store" in root,
        jobs=jobs,
        auth=auth,
        access=access,
        source_file=source_file,
    )


# --------------------------------------------------------------------------- collections
_STEP_KEYS: Final = {
    "index",
    "index_group",
    "timeout",
    "resource",
    "name",
    "record",
    "skip_if_updated_days",
    "load_timeout",
}
_DEDUP_POLICIES: Final = ("keep", "revisit", "skip")


def _collection(name: str, value: object, path: str) -> CollectionConfig:
    if isinstance(value, str):
        member = (name, _source(value, path))
        step = StepConfig(
            name=name,
            members=(member,),
            timeout_s=DEFAULT_TIMEOUT_S,
            resolvers=(),
            is_group=False,
            path=path,
        )
        return CollectionConfig(name=name, steps=(step,), is_sequence=False)
    data = dict(mapping(value, path))
    fuzzy = _fuzzy(data.pop("fuzzy", True), f"{path}.fuzzy")
    access = parse_access_config({key: data.pop(key) for key in ACCESS_KEYS if key in data}, path)
    dedup = data.pop("dedup", None)
    if dedup is not None and dedup not in _DEDUP_POLICIES:
        raise ConfigError(f"{path}.dedup", f"{dedup!r} is not one of {', '.join(_DEDUP_POLICIES)}")
    if "sequence" in data:
        reject_unknown(data, {"sequence"}, path)
        steps_data = data["sequence"]
        if not isinstance(steps_data, list) or not steps_data:
            raise ConfigError(f"{path}.sequence", "expected a non-empty list of steps")
        steps = []
        names: set[str] = set()
        for i, step_data in enumerate(steps_data):
            step_path = f"{path}.sequence[{i}]"
            step_map = mapping(step_data, step_path)
            step_name = step_map.get("name", f"step{i + 1}")
            if not isinstance(step_name, str) or not _NAME.fullmatch(step_name):
                raise ConfigError(f"{step_path}.name", f"invalid step name {step_name!r}")
            if step_name in names:
                raise ConfigError(f"{step_path}.name", f"duplicate step name {step_name!r}")
            names.add(step_name)
            steps.append(_step(step_name, step_map, step_path))
        return CollectionConfig(
            name=name,
            steps=tuple(steps),
            is_sequence=True,
            dedup=dedup,
            fuzzy=fuzzy,
            access=access,
        )
    if "name" in data:
        raise ConfigError(f"{path}.name", "unknown key; 'name' belongs to sequence steps")
    return CollectionConfig(
        name=name,
        steps=(_step(name, data, path),),
        is_sequence=False,
        dedup=dedup,
        fuzzy=fuzzy,
        access=access,
    )


def _fuzzy(value: object, path: str) -> FuzzyRules | None:
    """``fuzzy: true`` (the default rules), ``false``, or a pywb-format rules file."""
    if value is True:
        return DEFAULT_RULES
    if value is False:
        return None
    if isinstance(value, str) and value:
        return load_rules(value, path)
    raise ConfigError(
        path, f"expected true, false or the path of a pywb-format rules file, got {value!r}"
    )


def _step(name: str, data: Mapping[str, object], path: str) -> StepConfig:
    reject_unknown(data, _STEP_KEYS, path)
    has_index, has_group = "index" in data, "index_group" in data
    if has_index == has_group:
        raise ConfigError(path, "expected exactly one of 'index' or 'index_group'")
    if has_index:
        members: tuple[tuple[str, SourceSpec], ...] = (
            (name, _source(data["index"], f"{path}.index")),
        )
    else:
        group_path = f"{path}.index_group"
        group = mapping(data["index_group"], group_path)
        if not group:
            raise ConfigError(group_path, "expected at least one member")
        for member in group:
            if not isinstance(member, str) or not _NAME.fullmatch(member):
                raise ConfigError(f"{group_path}.{member}", f"invalid member name {member!r}")
        members = tuple(
            (member, _source(spec, f"{group_path}.{member}")) for member, spec in group.items()
        )
    load_timeout = data.get("load_timeout", DEFAULT_LOAD_TIMEOUT_S)
    if (
        isinstance(load_timeout, bool)
        or not isinstance(load_timeout, int | float)
        or load_timeout <= 0
    ):
        raise ConfigError(
            f"{path}.load_timeout",
            f"expected a positive number of seconds, got {load_timeout!r}",
        )
    timeout = data.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(
            f"{path}.timeout", f"expected a positive number of seconds, got {timeout!r}"
        )
    resolvers = _resolvers(data.get("resource"), f"{path}.resource")
    record = data.get("record", False)
    if not isinstance(record, bool):
        raise ConfigError(f"{path}.record", f"expected true or false, got {record!r}")
    skip_days = data.get("skip_if_updated_days")
    if skip_days is not None:
        if isinstance(skip_days, bool) or not isinstance(skip_days, int | float) or skip_days < 0:
            raise ConfigError(
                f"{path}.skip_if_updated_days", f"expected a number of days >= 0, got {skip_days!r}"
            )
        if not record:
            raise ConfigError(
                f"{path}.skip_if_updated_days", "only applies to a recording step (record: true)"
            )
    return StepConfig(
        name=name,
        members=members,
        timeout_s=float(timeout),
        resolvers=resolvers,
        is_group=has_group,
        path=path,
        record=record,
        skip_if_updated_days=float(skip_days) if skip_days is not None else None,
        load_timeout_s=float(load_timeout),
    )


# --------------------------------------------------------------------------- sources
def _shorthand_kinds() -> list[tuple[str, str]]:
    pairs = [
        (prefix, kind)
        for kind, shorthand in SOURCE_SHORTHANDS.items()
        for prefix in shorthand.prefixes
    ]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def _expected_sources() -> str:
    return (
        "a file or directory path, "
        + ", ".join(
            f"{prefix}..." if not prefix.startswith("$") else prefix
            for prefix, _ in sorted(_shorthand_kinds())
        )
        + f", or a mapping with type: one of {', '.join(SOURCE_TYPES)}"
    )


def _kind_by_suffix(text: str) -> str:
    """The type of a plain path: the first whose ``shorthand_suffixes`` it ends with, else file."""
    for kind, shorthand in SOURCE_SHORTHANDS.items():
        if shorthand.suffixes and text.endswith(shorthand.suffixes):
            return kind
    return "file"


def _source(value: object, path: str) -> SourceSpec:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ConfigError(path, f"empty source; expected {_expected_sources()}")
        kind = next((k for prefix, k in _shorthand_kinds() if text.startswith(prefix)), None)
        if kind is None:
            if re.match(r"^[a-z][a-z0-9+.\-]*://", text) or text.startswith("$"):
                raise ConfigError(path, f"unknown source {text!r}; expected {_expected_sources()}")
            kind = "file"
        if kind == "file":
            kind = _kind_by_suffix(text)
        factory = SOURCE_TYPES[kind]
        try:
            config = factory.config_type.from_shorthand(text)
        except ValueError as exc:
            raise ConfigError(path, str(exc)) from exc
        return SourceSpec(type=kind, config=config, path=path)
    data = mapping(value, path, expected=f"a source: {_expected_sources()}")
    type_name = data.get("type")
    if not isinstance(type_name, str) or type_name not in SOURCE_TYPES:
        raise ConfigError(
            f"{path}.type",
            f"unknown source type {type_name!r}; expected one of {', '.join(SOURCE_TYPES)}",
        )
    record = data.get("record", False)
    if not isinstance(record, bool):
        raise ConfigError(f"{path}.record", f"expected true or false, got {record!r}")
    rest = {k: v for k, v in data.items() if k not in ("type", "record")}
    config = _dataclass(SOURCE_TYPES[type_name].config_type, rest, path)
    return SourceSpec(type=type_name, config=config, path=path, record=record)


def _resolvers(value: object, path: str) -> tuple[ResolverSpec, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    specs = []
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]" if isinstance(value, list) else path
        if isinstance(item, str):
            kind = resolver_kind_for_shorthand(item)
            try:
                config = RESOLVER_TYPES[kind].config_type.from_shorthand(item)
            except ValueError as exc:
                raise ConfigError(item_path, str(exc)) from exc
        else:
            data = mapping(item, item_path, expected="a resource path, URL prefix or mapping")
            kind = data.get("type")  # type: ignore[assignment]
            if kind not in RESOLVER_TYPES:
                raise ConfigError(
                    f"{item_path}.type",
                    f"unknown resource type {kind!r}; expected one of {', '.join(RESOLVER_TYPES)}",
                )
            rest = {k: v for k, v in data.items() if k != "type"}
            config = _dataclass(RESOLVER_TYPES[kind].config_type, rest, item_path)
        specs.append(ResolverSpec(type=kind, config=config, path=item_path))
    return tuple(specs)


# --------------------------------------------------------------------------- store
#: Keys that would put secrets in the config; S3 credentials come from the environment.
_CREDENTIAL_KEYS: Final = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "access_key", "secret_key", "credentials"}
)


def _store(value: object, path: str) -> StoreSettings:
    """``store:``, with ``storages`` and ``retention`` (gateway/storage/settings.py)."""
    data = dict(mapping(value, path))
    storages = _storages(data.pop("storages", None) or {}, f"{path}.storages")
    retention = _dataclass(RetentionPolicy, data.pop("retention", None) or {}, f"{path}.retention")
    try:
        check_retention(retention, storages)
    except SettingError as exc:
        raise ConfigError(f"{path}.retention.{exc.field}", exc.problem) from exc
    publish_data = data.pop("publish", None)
    publish = None
    if publish_data is not None:
        publish = _dataclass(PublishSettings, publish_data, f"{path}.publish")
        try:
            publish = check_publish(publish, storages)
        except SettingError as exc:
            raise ConfigError(f"{path}.publish.{exc.field}", exc.problem) from exc
    return dataclasses.replace(
        _dataclass(StoreSettings, data, path),
        storages=storages,
        retention=retention,
        publish=publish,
    )


def _storages(value: object, path: str) -> dict[str, StorageSpec]:
    expected = f"a mapping of storage names to {{type: {' | '.join(STORAGE_TYPES)}, ...}}"
    specs: dict[str, StorageSpec] = {}
    for name, item in mapping(value, path, expected=expected).items():
        item_path = f"{path}.{name}"
        if name == PRIMARY or not STORAGE_NAME.fullmatch(name):
            raise ConfigError(
                item_path,
                f"invalid storage name {name!r}; expected 1-64 letters, digits, '_', '.', '-' "
                f"(not {PRIMARY!r}: the store's own copy goes by that name)",
            )
        data = mapping(item, item_path, expected="a storage mapping with type:")
        kind = data.get("type")
        if not isinstance(kind, str) or kind not in STORAGE_TYPES:
            raise ConfigError(
                f"{item_path}.type",
                f"unknown storage type {kind!r}; expected one of {', '.join(STORAGE_TYPES)}",
            )
        for key in data:
            if key.lower() in _CREDENTIAL_KEYS:
                raise ConfigError(
                    f"{item_path}.{key}",
                    "credentials never go in the config; set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the gateway's environment",
                )
        rest = {k: v for k, v in data.items() if k != "type"}
        config = _dataclass(STORAGE_TYPES[kind].config_type, rest, item_path)
        specs[name] = StorageSpec(type=kind, config=config, path=item_path)
    return specs


# --------------------------------------------------------------------------- generic
_T = typing.TypeVar("_T")


def _dataclass(cls: type[_T], data: object, path: str) -> _T:
    """Build a config dataclass from a mapping, checking keys and field types."""
    given = mapping(data, path)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    reject_unknown(given, set(fields), path)
    hints = typing.get_type_hints(cls)
    values: dict[str, object] = {}
    for name, field in fields.items():
        if name not in given:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise ConfigError(f"{path}.{name}", "missing required key")
            continue
        values[name] = coerce(given[name], hints[name], f"{path}.{name}")
    try:
        return cls(**values)
    except SettingError as exc:  # names its field: point the path at it
        raise ConfigError(f"{path}.{exc.field}", exc.problem) from exc
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from exc
