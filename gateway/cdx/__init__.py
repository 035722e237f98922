"""The CDX vocabulary every layer speaks: captures, queries and their stream operations.

- :mod:`~gateway.cdx.cdxj`          ``CdxRecord``: CDXJ and legacy CDX lines, urlkeys
- :mod:`~gateway.cdx.query`         ``CaptureQuery``: the Index and Resource API parameters
- :mod:`~gateway.cdx.hosts`         client hosts and URLs validated and normalised (IDNA, UTS #46)
- :mod:`~gateway.cdx.ia_query`      ``IaQuery``: the IA CDX server's parameters
- :mod:`~gateway.cdx.cdxops`        streaming operations over captures (pywb ``cdxops``)
- :mod:`~gateway.cdx.client_regex`  client regexes compiled for RE2
- :mod:`~gateway.cdx.memento`       RFC 7089 datetimes and RFC 8288 Link values
"""
