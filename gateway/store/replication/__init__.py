"""Replication: every closed WARC file in as many verified copies as the retention policy asks.

The Software Heritage archiver's model (copy status per file and storage:
``missing``, ``ongoing``, ``present``, ``corrupted``), run as background work.
"""
