"""Replication: every closed WARC file in as many verified copies as the retention policy asks.

The Software Heritage archiver's model (copy status per file and storage:
``missing``, ``ongoing``, ``present``, ``corrupted``), run as background work:
the director, the batches and the copies (:mod:`~gateway.store.replication.director`)
run as three actor types of :mod:`gateway.jobs`, so the retention policy holds by
itself wherever an orchestrator runs (``gateway serve``, ``gateway worker``), and
``gateway store replicate`` drives the same objects from the command line
(:mod:`~gateway.store.replication.passes`).
"""
