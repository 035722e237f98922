"""JobsSettings: the ``jobs:`` section of collections.yaml.

``config.py`` builds :class:`JobsSettings` from the YAML mapping by field name
(unknown keys are rejected there); :meth:`JobsSettings.__post_init__` raises
:class:`ValueError` naming the field and what was expected, which ``config.py``
turns into a :class:`~gateway.errors.ConfigError` carrying the YAML path.

Example::

    jobs:
      enabled: true                 # default: true when the store is used
      plugins: [my-jobs-plugin]     # entry points (group archive_gateway.jobs) or modules
      poll_s: 1.0
      scrub_interval_days: 30
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JobsSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsSettings:
    """How background work runs.

    - ``enabled``: run the orchestrator inside ``gateway serve``. None (the
      default) means "when the app opens the store"; ``gateway worker``
      runs it whatever this says.
    - ``plugins``: pluggy plugins, each the name of an entry point in the
      group ``archive_gateway.jobs`` or an importable module name (as
      pytest's ``-p``); they implement the hooks of :mod:`gateway.jobs.hooks`
      and may add actor types.
    - ``poll_s``: the longest the orchestrator sleeps before it reads the
      queues again (objects created by other processes are noticed within
      this time; work scheduled for a known time wakes it exactly then).
    - ``import_max_tick_s``: the tick limit (and lease) of one import step
      (verifying and copying one file, or indexing it).
    - ``import_max_concurrent``: imports run at once per process.
    - ``scrub_interval_days``: a closed WARC file is verified again this
      long after its last verification (a damaged one daily, or sooner when
      this is shorter).
    - ``scrub_max_tick_s``: one scrub tick verifies records for at most
      about this long, then records how far it got.
    - ``scrub_max_concurrent``: files verified at once per process.
    - ``migrate_max_tick_s``: the tick limit (and lease) of the layout
      migrator: a tick moves files for at most about a third of it (20 s at
      most), and one interrupted by a kill is taken up again once it ends.
    - ``replicate_interval_s``: how often the replication director looks
      for files with fewer safe copies than ``store.retention.copies`` (it
      waits while the batches it made are still being copied).
    - ``replicate_max_tick_s``: the tick limit (and lease) of a replication
      batch and of a copy, and of the director up to 600 s: a copy
      starts copies of its group for half of it and leaves the rest to its
      next tick, so one copy (of the largest file, to the slowest storage)
      must fit in the other half.
    """

    enabled: bool | None = None
    plugins: tuple[str, ...] = ()
    poll_s: float = 1.0
    import_max_tick_s: float = 3600.0
    import_max_concurrent: int = 1
    scrub_interval_days: float = 30.0
    scrub_max_tick_s: float = 10.0
    scrub_max_concurrent: int = 1
    migrate_max_tick_s: float = 600.0
    replicate_interval_s: float = 60.0
    replicate_max_tick_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in (
            "poll_s",
            "import_max_tick_s",
            "scrub_interval_days",
            "scrub_max_tick_s",
            "migrate_max_tick_s",
            "replicate_interval_s",
            "replicate_max_tick_s",
        ):
            value = getattr(self, name)
            if not value > 0:
                unit = "days" if name.endswith("_days") else "seconds"
                raise ValueError(f"{name}: {value:g} is not a positive number of {unit}")
        for name in ("import_max_concurrent", "scrub_max_concurrent"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: {getattr(self, name)} is below 1")
        for index, plugin in enumerate(self.plugins):
            if not plugin.strip():
                raise ValueError(f"plugins[{index}]: empty; expected a plugin name")
