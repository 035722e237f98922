"""The query side: collections of index groups and sequences, and what serves them.

- :mod:`~gateway.index.group`       ``IndexGroup``: members queried concurrently, merged
- :mod:`~gateway.index.breaker`     ``Breaker``: a member's circuit breaker
- :mod:`~gateway.index.collection`  ``Collection``: steps, sequence fallback, ``find_record``
- :mod:`~gateway.index.fuzzy`       fuzzy rules and widened lookups (pywb ``FuzzyMatcher``)
- :mod:`~gateway.index.ia_cdx`      the IA dialect's pipeline, paging and output
- :mod:`~gateway.index.indexer`     CDXJ indexes of WARC files (cdxj-indexer)
- :mod:`~gateway.index.eager`       coroutines timed only if they wait

The vocabulary these speak (``CdxRecord``, ``CaptureQuery``) is :mod:`gateway.cdx`.
"""
