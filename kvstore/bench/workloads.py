"""What ``python -m kvstore.bench`` measures: the workloads, their rows and their data.

This module owns the definitions every other part of the benchmark shares:
the workload names (:data:`WORKLOADS`), the table rows they produce in order
(:data:`ROW_ORDER`, :data:`WORKLOAD_ROWS`, :data:`UNITS`), the keys and values
written (:func:`key`, :func:`value`, :func:`batches`, :func:`pairs`) and the
slice-alternating timer two measurements share (:func:`alternate`). The code
that runs them lives by family: :mod:`kvstore.bench.loads` (load, get, scan,
memory), :mod:`kvstore.bench.writes` (durable puts, overwrite),
:mod:`kvstore.bench.txns` (transactions); :mod:`kvstore.bench.runner` runs
them on every store and :mod:`kvstore.bench.targets` judges kvstore's rows.

Data: ``n`` keys ``key(0) .. key(n-1)``, 16 ASCII hex bytes each, in a
pseudo-random order (an odd multiplier mod 2**64 is a bijection, so keys never
repeat), with 100-byte incompressible values sliced from a seeded pool.

Workloads (each store runs them in this order):

``load``
    every size in :attr:`Config.sizes`: batches of 1000 non-durable writes,
    then the store is made durable and flushed (kvstore: ``db.compact()``,
    everything merged into one sorted run); that final step is timed too.
    Each load runs in its own subprocess on an empty directory, which also
    gives its peak RSS (``memory``). Stopped at ``load_seconds``.
``get``
    random point gets over the largest loaded data set, after a close and
    reopen (for kvstore the data is then in SSTs, not in the memtable).
``scan``
    one full scan of that data set, in key order.
``put_durable``
    single-thread durable puts (each one on stable storage before the next),
    on an empty store. The raw append+fdatasync rate is measured again just
    before and after (row ``raw_fsync``): on a shared machine the disk's
    sync rate drifts, and kvstore's target compares it with its own.
``put_durable_mt``
    the same from :attr:`Config.threads` threads at once (kvstore group
    commit; every store's durable multi-threaded equivalent, see adapters).
``memory``
    peak RSS (``VmHWM``, see :func:`peak_rss_bytes`) of the subprocess that
    ran the largest load.
``txn_rmw``
    single-thread transactions that read 2 random keys of
    :attr:`Config.txn_keys` and write each back plus one, SERIALIZABLE,
    retried on conflict: non-durable (row ``txn_rmw``) and durable
    (``txn_rmw_durable``), each on a fresh store. Then contention (kvstore;
    sqlite3 for comparison): :attr:`Config.hot_threads` threads doing the same
    non-durable over :attr:`Config.hot_keys` hot keys, yielding the GIL
    between operations, at SNAPSHOT and at SERIALIZABLE: commits/s
    (``txn_hot_*``) and the abort rate, aborts / attempts
    (``txn_hot_*_aborts``). Every run checks that the counters add up to
    twice the commits (no lost update).
``txn_open100``
    kvstore only: non-durable SERIALIZABLE ``txn_rmw`` commits/s on a store
    where 100 transactions began, read a key and stay open for the whole
    measurement (``txn_open100``), against a store with none open
    (``txn_open0``); the two run in alternating slices, so drifting machine
    load hits both alike.
``overwrite``
    :attr:`Config.overwrite_puts` random non-durable single puts over
    :attr:`Config.overwrite_keys` keys, one thread, background compaction on:
    puts/s and the slowest single put (``overwrite_max_ms``); then random gets
    on the store as the workload left it (``get_after_overwrite``). kvstore
    then runs ``db.compact()``: live SST bytes / live data bytes
    (``space_amp``), random gets after it (``get_after_compact``) against a
    freshly loaded and compacted store of the same keys (``get_fresh``),
    measured in alternating slices.

Stores that do not run a row show "n/a" (see each adapter's ``not_run``).
Every workload stops at its time bound, so a full run takes about ten minutes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence

from kvstore.bench.adapters import ROW_GROUPS, Pair

MiB = 1 << 20
KEY_BYTES = 16
VALUE_BYTES = 100
#: bytes per append in the raw append+fdatasync measurement (about one small WAL frame)
RAW_RECORD_BYTES = 128

#: long-running transactions kept open in ``txn_open100``
OPEN_TXNS = 100

WORKLOADS = (
    "load",
    "get",
    "scan",
    "put_durable",
    "put_durable_mt",
    "memory",
    "txn_rmw",
    "txn_open100",
    "overwrite",
)
#: table rows in order; ``raw_fsync`` is measured around each store's ``put_durable``
ROW_ORDER = (
    "load",
    "get",
    "scan",
    "raw_fsync",
    "raw_overwrite",
    "put_durable",
    "put_durable_mt",
    "memory",
    "txn_rmw",
    "txn_rmw_durable",
    "txn_hot_snapshot",
    "txn_hot_snapshot_aborts",
    "txn_hot_serializable",
    "txn_hot_serializable_aborts",
    "txn_open0",
    "txn_open100",
    "overwrite",
    "overwrite_max_ms",
    "get_after_overwrite",
    "space_amp",
    "get_after_compact",
    "get_fresh",
)
#: the rows each workload (as named on the command line) produces
WORKLOAD_ROWS: dict[str, tuple[str, ...]] = {
    "txn_rmw": (
        ROW_GROUPS["txn_rmw"] + ROW_GROUPS["txn_hot_snapshot"] + ROW_GROUPS["txn_hot_serializable"]
    ),
    "txn_open100": ROW_GROUPS["txn_open"],
    "overwrite": ROW_GROUPS["overwrite"] + ROW_GROUPS["compact"],
}
#: units of rows that are not ops/s
UNITS = {
    "memory": "MiB",
    "txn_hot_snapshot_aborts": "%",
    "txn_hot_serializable_aborts": "%",
    "overwrite_max_ms": "ms",
    "space_amp": "x",
}

_MULT = 0x9E3779B97F4A7C15  # odd, so i -> i * _MULT mod 2**64 is a bijection
_MASK = (1 << 64) - 1
_POOL_BYTES = 1 << 20
_POOL = random.Random(20240601).randbytes(_POOL_BYTES)


def key(i: int) -> bytes:
    """The ``i``-th key: 16 hex bytes, scattered over the key space."""
    return b"%016x" % ((i * _MULT) & _MASK)


def value(i: int) -> bytes:
    """The ``i``-th value: 100 incompressible bytes."""
    off = (i * 7919) % (_POOL_BYTES - VALUE_BYTES)
    return _POOL[off : off + VALUE_BYTES]


def batches(n: int, size: int) -> Iterator[list[Pair]]:
    """``n`` pairs in batches of ``size``, generated as they are consumed."""
    for start in range(0, n, size):
        yield [(key(i), value(i)) for i in range(start, min(n, start + size))]


def pairs(first: int, count: int) -> Iterator[Pair]:
    return ((key(i), value(i)) for i in range(first, first + count))


def human(n: int) -> str:
    """1000 -> '1k', 1000000 -> '1M', 2500 -> '2500'."""
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def alternate(
    fns: Sequence[Callable[[int, float], int]], seconds: float, rounds: int = 5
) -> list[tuple[int, float]]:
    """Run each ``fn(round, deadline) -> ops`` in turns for ``seconds`` each in all.

    ``rounds`` slices per function, interleaved, so a machine whose load
    drifts (it may be shared) slows every function alike. Returns (ops,
    seconds) per function.
    """
    totals = [(0, 0.0)] * len(fns)
    slice_seconds = seconds / rounds
    for r in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            ops = fn(r, start + slice_seconds)
            n, sec = totals[i]
            totals[i] = (n + ops, sec + time.perf_counter() - start)
    return totals
