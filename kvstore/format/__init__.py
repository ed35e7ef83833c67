"""Persisted byte formats. Each module packs exactly one format.

* :mod:`kvstore.format.wal`: WAL frames and the write records inside them
* :mod:`kvstore.format.wal_id`: ``wal.id``, the identity of a WAL location
* :mod:`kvstore.format.block`: SST blocks: the stored envelope, the data block codec
* :mod:`kvstore.format.sst`: the SST file layout (index, props, footer), ``build_sst``
* :mod:`kvstore.format.sst_reader`: ``SstReader``, checked random access to one SST
* :mod:`kvstore.format.bloom`: the bloom filter
* :mod:`kvstore.format.manifest`: the manifest envelope and its JSON body

Every format has a magic or a version and a crc32c, except ``wal.id`` (a few
bytes of JSON written in one call); ``docs/format/`` has the byte layouts and
the rule for a torn tail.
"""
