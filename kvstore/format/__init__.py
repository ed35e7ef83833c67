"""Persisted byte formats. Each module packs exactly one format.

* :mod:`kvstore.format.wal`: WAL frames and the write records inside them
* :mod:`kvstore.format.sst`: SST data blocks, index, bloom, properties, footer
* :mod:`kvstore.format.bloom`: the bloom filter
* :mod:`kvstore.format.manifest`: the manifest envelope and its JSON body

Every format has a magic or a version and a crc32c; ``docs/format/`` has the
byte layouts and the rule for a torn tail.
"""
