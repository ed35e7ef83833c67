"""The write family: ``put_durable``, ``put_durable_mt`` and ``overwrite``.

Durable puts from one thread (with the raw append+fdatasync rate measured
just before and after, row ``raw_fsync``) and from several threads at once;
then the random non-durable overwrite with background compaction on, its
slowest single put (and the longest CPython GC pause, :class:`GcPauses`), the
gets on the store it leaves and, for kvstore, ``compact()``: space
amplification and gets after it against a fresh load of the same keys.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import time
from array import array
from collections.abc import Callable

from kvstore.bench.adapters import Store
from kvstore.bench.machine import raw_append_fdatasync, raw_overwrite_fdatasync
from kvstore.bench.model import Config, Report, Row
from kvstore.bench.workloads import KEY_BYTES, VALUE_BYTES, alternate, key, pairs, value

#: distinct values the overwrite workload cycles through
OVERWRITE_VALUES = 1009


def put_durable(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
    os.makedirs(path)
    n0, s0 = raw_append_fdatasync(path, cfg.fsync_seconds / 2)
    o0, t0 = raw_overwrite_fdatasync(path, cfg.fsync_seconds / 2)
    store = cls(path)
    store.open()
    try:
        start = time.perf_counter()
        n = store.put_durable_many(pairs(1 << 40, cfg.put_ops), start + cfg.put_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    o1, t1 = raw_overwrite_fdatasync(path, cfg.fsync_seconds / 2)
    n1, s1 = raw_append_fdatasync(path, cfg.fsync_seconds / 2)
    shutil.rmtree(path, ignore_errors=True)
    note = f"raw rate {n0 / s0:,.0f}/s before, {n1 / s1:,.0f}/s after"
    report.add(Row(cls.name, "raw_fsync", None, (n0 + n1) / (s0 + s1), n0 + n1, s0 + s1, note))
    note = f"raw rate {o0 / t0:,.0f}/s before, {o1 / t1:,.0f}/s after"
    report.add(Row(cls.name, "raw_overwrite", None, (o0 + o1) / (t0 + t1), o0 + o1, t0 + t1, note))
    report.add(Row(cls.name, "put_durable", None, n / seconds, n, seconds))


def put_durable_mt(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
    streams = [pairs((t + 2) << 40, cfg.put_ops) for t in range(cfg.threads)]
    store = cls(path)
    store.open()
    try:
        start = time.perf_counter()
        n = store.put_durable_threads(streams, start + cfg.put_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    report.add(Row(cls.name, "put_durable_mt", None, n / seconds, n, seconds))


class GcPauses:
    """Within ``with``: the longest CPython cyclic-GC pass (it stops every thread) and
    how many full (generation 2) collections ran."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.full = 0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.longest = max(self.longest, time.perf_counter() - self._started)
        self.full += info["generation"] == 2

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def overwrite(cls: type[Store], path: str, cfg: Config, report: Report, compact: bool) -> None:
    n_keys = cfg.overwrite_keys
    rng = random.Random(cfg.seed + 3)
    keys = [key(i) for i in range(n_keys)]
    order = array("L", (rng.randrange(n_keys) for _ in range(cfg.overwrite_puts)))
    vals = [value(j) for j in range(OVERWRITE_VALUES)]
    stream = ((keys[i], vals[j % OVERWRITE_VALUES]) for j, i in enumerate(order))

    store = cls(path)
    store.open(bulk=True)  # non-durable: sqlite3 synchronous=OFF, LMDB sync=False
    fresh: Store | None = None
    try:
        with GcPauses() as gc_pauses:
            start = time.perf_counter()
            n, worst = store.put_many_max(stream, start + cfg.overwrite_seconds)
            seconds = time.perf_counter() - start
        written = sorted(set(order[:n]))
        note = "" if n == cfg.overwrite_puts else (f"time bound: {n} of {cfg.overwrite_puts} puts")
        st = store.stats()
        if st:
            note = "; ".join(
                x
                for x in (
                    note,
                    f"{st['write_stalls']} write stalls ({st['write_stall_ms']} ms), "
                    f"{st['flushes']} flushes, {st['compactions']} compactions",
                )
                if x
            )
        report.add(Row(cls.name, "overwrite", None, n / seconds, n, seconds, note))
        report.add(
            Row(
                cls.name,
                "overwrite_max_ms",
                None,
                worst * 1000,
                n,
                seconds,
                f"slowest CPython GC pass during the overwrite: {gc_pauses.longest * 1000:.1f} ms "
                f"({gc_pauses.full} full collections)",
            )
        )

        grng = random.Random(cfg.seed + 4)
        get_keys = [keys[written[grng.randrange(len(written))]] for _ in range(cfg.get_ops)]
        start = time.perf_counter()
        done, found = store.get_many(get_keys, start + cfg.get_seconds)
        seconds = time.perf_counter() - start
        if found != done:
            raise AssertionError(f"{done - found} of {done} overwritten keys were not found")
        note = ""
        after = store.stats()
        if st and after:
            note = (
                f"as left by the overwrite: {st['l0_ssts']} L0 SSTs + {st['sorted_runs']} runs "
                f"at the start, {after['l0_ssts']} + {after['sorted_runs']} at the end "
                f"({after['compactions'] - st['compactions']} background compactions finished "
                f"during the gets); block cache hit rate {after['block_cache_hit_rate']:.0%}"
            )
        report.add(Row(cls.name, "get_after_overwrite", None, done / seconds, done, seconds, note))
        if not compact:
            return

        start = time.perf_counter()
        live = store.compact()
        compact_seconds = time.perf_counter() - start
        data = len(written) * (KEY_BYTES + VALUE_BYTES)
        report.add(
            Row(
                cls.name,
                "space_amp",
                None,
                live / data,
                len(written),
                compact_seconds,
                f"{live:,} live SST bytes for {len(written):,} keys x "
                f"{KEY_BYTES + VALUE_BYTES} bytes; compact() took {compact_seconds:.1f}s",
            )
        )

        fresh = cls(path + "-fresh")
        fresh.open(bulk=True)
        fresh.load(
            (
                [(keys[i], vals[i % OVERWRITE_VALUES]) for i in written[a : a + cfg.batch]]
                for a in range(0, len(written), cfg.batch)
            ),
            time.perf_counter() + cfg.load_seconds,
        )  # kvstore: write batches, then compact()
        chunk = max(1, len(get_keys) // 5)
        found_total = [0, 0]
        pair = (store, fresh)

        def gets(i: int) -> Callable[[int, float], int]:
            def fn(r: int, deadline: float) -> int:
                d, f = pair[i].get_many(get_keys[r * chunk : (r + 1) * chunk], deadline)
                found_total[i] += d - f
                return d

            return fn

        (n0, s0), (n1, s1) = alternate([gets(0), gets(1)], cfg.get_seconds)
        if any(found_total):
            raise AssertionError(f"keys not found after compact / in the fresh load: {found_total}")
        report.add(Row(cls.name, "get_after_compact", None, n0 / s0, n0, s0))
        report.add(Row(cls.name, "get_fresh", None, n1 / s1, n1, s1))
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
        if fresh is not None:
            fresh.close()
            shutil.rmtree(fresh.path, ignore_errors=True)
