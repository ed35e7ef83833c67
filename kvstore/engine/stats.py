"""``DB.stats()``: counters and sizes gathered from the engine's parts."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvstore import readpath as rp
from kvstore.cache import BlockCache
from kvstore.engine.commit import CommitPath
from kvstore.engine.compactor import Compactor
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.retention import Retention
from kvstore.engine.sstfiles import SstFiles


def engine_stats(
    commit: CommitPath,
    manifests: ManifestWriter,
    files: SstFiles,
    retention: Retention,
    compactor: Compactor,
    cache: BlockCache,
    counters: Counter[str],
) -> dict[str, Any]:
    st = commit.state
    health = commit.health
    wal = commit.wal
    lookups = cache.hits + cache.misses
    c = counters
    return {
        "last_seq": commit.visible_seq(),
        "durable_seq": commit.durable_seq,
        "fenced": health.fenced is not None,
        "writer_epoch": manifests.epoch,
        "manifest_id": manifests.current.id,
        "memtable_bytes": st.active.size,
        "memtable_entries": st.active.entries,
        "immutable_memtables": len(st.immutable),
        "immutable_bytes": sum(m.size for m in st.immutable),
        "l0_ssts": len(st.l0),
        "l0_bytes": sum(h.meta.size for h in st.l0),
        "sorted_runs": len(st.runs),
        "sorted_run_bytes": sum(h.meta.size for r in st.runs for h in r.ssts),
        "block_cache_bytes": cache.used,
        "block_cache_hits": cache.hits,
        "block_cache_misses": cache.misses,
        "block_cache_hit_rate": (cache.hits / lookups) if lookups else 0.0,
        "wal_syncs": wal.syncs,
        "open_snapshots": len(commit.snapshots),
        "writes": commit.write_count,
        "flushes": c["flushes"],
        "flushed_bytes": c["flushed_bytes"],
        "flush_errors": c["flush_errors"],
        "levels": {
            "l0": [h.meta.size for h in st.l0],
            "runs": [[len(r.ssts), sum(h.meta.size for h in r.ssts)] for r in st.runs],
        },
        "read_amplification": 1 + len(st.immutable) + len(st.l0) + len(st.runs),
        "write_amplification": write_amplification(commit.user_bytes, wal.appended, c),
        "space_amplification": space_amplification(st),
        "user_bytes_written": commit.user_bytes,
        "wal_bytes_written": wal.appended,
        "retention_watermark": retention.public_watermark(),
        "oldest_readable_seq": retention.floor_seq,
        "checkpoints": len(manifests.current.checkpoints),
        "compactions": c["compactions"],
        "trivial_moves": c["trivial_moves"],
        "compaction_error": None if compactor.error is None else repr(compactor.error),
        "l0_stalls": c["l0_stalls"],
        "l0_stall_ms": c["l0_stall_ms"],
        "write_slowdowns": c["write_slowdowns"],
        "gc_deleted_manifests": c["gc_deleted_manifests"],
        "compaction_input_bytes": c["compaction_input_bytes"],
        "compaction_output_bytes": c["compaction_output_bytes"],
        "compaction_errors": c["compaction_errors"],
        "gc_deleted_ssts": c["gc_deleted"],
        "obsolete_ssts": len(files.obsolete),
        "write_stalls": c["stalls"],
        "transactions_running": commit.oracle.running,
        "transaction_conflicts": c["conflicts"],
        "transactions_expired": commit.oracle.expirations,
        "oracle_tracked_keys": commit.oracle.tracked_keys(),
        "write_stall_ms": c["stall_ms"],
        "background_error": None if health.bg_error is None else repr(health.bg_error),
        "stopped": None if health.broken is None else str(health.broken),
    }


def write_amplification(user: int, wal_bytes: int, c: Counter[str]) -> float:
    """Bytes written to storage (WAL, flushes, compactions) per byte the user wrote."""
    if not user:
        return 0.0
    return (wal_bytes + c["flushed_bytes"] + c["compaction_output_bytes"]) / user


def space_amplification(st: rp.State) -> float:
    """Live SST bytes over the bottom run's bytes (1.0 when fully compacted)."""
    total = sum(h.meta.size for h in st.l0) + sum(h.meta.size for r in st.runs for h in r.ssts)
    bottom = sum(h.meta.size for h in st.runs[-1].ssts) if st.runs else 0
    return total / bottom if bottom else (1.0 if not total else float(len(st.l0)))
