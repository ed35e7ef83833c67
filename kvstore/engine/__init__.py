"""The engine's parts, each owning its state and its lock.

:class:`kvstore.DB` is a facade that builds them and hands out snapshots and
transactions; the parts know nothing of it. Lowest first::

    health      closed / fenced / stopped / background errors: every check
    sstfiles    SST handles, names in flight, the obsolete queue (GC's lock)
    manifests   the manifest writer: CAS, fencing, claims
    retention   pinned seqs, the watermark, the floor (pure rules + samples)
    commit      the commit path: seq, oracle check, WAL, memtable, publish
    checkpoints named manifests and the files they pin
    gc          deleting what nothing references, after a grace
    compactor   merging L0 and sorted runs
    flusher     frozen memtables to L0 SSTs
    recovery    opening a writer: claim, replay, first manifest
    protocol    what snapshots and transactions may call (:class:`Engine`)
"""
