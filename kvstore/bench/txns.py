"""The transaction family: ``txn_rmw`` (with the contended ``txn_hot_*``) and ``txn_open100``.

Every transaction reads two counters and writes each back plus one, retried
on conflict: single-threaded non-durable and durable (:func:`rmw`), several
threads over a few hot keys at SNAPSHOT and SERIALIZABLE with the abort rate
(:func:`hot`), and kvstore alone with 100 long transactions held open
against none (:func:`long_open`). Every run checks afterwards that the
counters add up to twice the commits (no lost update).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from kvstore.bench.adapters import SERIALIZABLE, Store
from kvstore.bench.model import Config, Report, Row
from kvstore.bench.workloads import OPEN_TXNS, alternate, key


def _key_pairs(rng: random.Random, n_keys: int, count: int) -> Iterator[tuple[bytes, bytes]]:
    """``count`` pairs of two distinct random keys among ``key(0) .. key(n_keys - 1)``."""
    rand = rng.randrange
    for _ in range(count):
        a = rand(n_keys)
        b = rand(n_keys - 1)
        yield key(a), key(b + (b >= a))  # b skips a: two distinct keys


def _populate_counters(store: Store, n_keys: int, batch: int) -> None:
    """``key(0) .. key(n_keys - 1)`` = b"0" (untimed)."""
    for start in range(0, n_keys, batch):
        store.write_batch([(key(i), b"0") for i in range(start, min(n_keys, start + batch))])


def _check_counters(store: Store, n_keys: int, commits: int, what: str) -> None:
    """Every commit added one to two counters: they must add up to ``2 * commits``."""
    total = 0
    for i in range(n_keys):
        v = store.get(key(i))
        total += int(v or b"0")
    if total != 2 * commits:
        raise AssertionError(
            f"{what}: the counters add up to {total}, {commits} commits should give "
            f"{2 * commits} (lost or phantom updates)"
        )


def rmw(cls: type[Store], path: str, durable: bool, cfg: Config, report: Report) -> None:
    store = cls(path)
    store.open(bulk=not durable)  # sqlite3 and LMDB: durability is how the store is opened
    try:
        _populate_counters(store, cfg.txn_keys, cfg.batch)
        stream = _key_pairs(random.Random(cfg.seed), cfg.txn_keys, cfg.txn_ops)
        start = time.perf_counter()
        commits, aborts = store.rmw_many(
            stream, start + cfg.txn_seconds, durable=durable, isolation=SERIALIZABLE
        )
        seconds = time.perf_counter() - start
        _check_counters(store, cfg.txn_keys, commits, f"{cls.name} txn_rmw")
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    note = f"{aborts} aborts (retried)" if aborts else ""
    w = "txn_rmw_durable" if durable else "txn_rmw"
    report.add(Row(cls.name, w, None, commits / seconds, commits, seconds, note))


def hot(cls: type[Store], path: str, isolation: str, cfg: Config, report: Report) -> None:
    store = cls(path)
    store.open(bulk=True)
    try:
        _populate_counters(store, cfg.hot_keys, cfg.batch)
        streams = [
            _key_pairs(random.Random(cfg.seed * 1000 + t), cfg.hot_keys, cfg.txn_ops)
            for t in range(cfg.hot_threads)
        ]
        start = time.perf_counter()
        commits, aborts = store.rmw_threads(streams, start + cfg.txn_seconds, isolation=isolation)
        seconds = time.perf_counter() - start
        _check_counters(store, cfg.hot_keys, commits, f"{cls.name} txn_hot_{isolation}")
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    attempts = commits + aborts
    rate = 100.0 * aborts / attempts if attempts else 0.0
    w = f"txn_hot_{isolation}"
    report.add(Row(cls.name, w, None, commits / seconds, commits, seconds))
    note = f"{aborts} aborts in {attempts} attempts"
    if cls.name == "sqlite3":
        note += " (BEGIN IMMEDIATE: writers wait in sqlite's sleeping busy handler instead)"
    report.add(Row(cls.name, w + "_aborts", None, rate, attempts, seconds, note))


def long_open(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
    """Non-durable SERIALIZABLE RMW with none open vs with OPEN_TXNS long transactions open."""
    stores = [cls(f"{path}-0"), cls(f"{path}-{OPEN_TXNS}")]
    for st in stores:
        st.open(bulk=True)
    held: list[Any] = []
    try:
        for st in stores:
            _populate_counters(st, cfg.txn_keys, cfg.batch)
        rng = random.Random(cfg.seed + 5)
        held = stores[1].begin_readers([key(rng.randrange(cfg.txn_keys)) for _ in range(OPEN_TXNS)])
        streams = [
            _key_pairs(random.Random(cfg.seed + 10 + i), cfg.txn_keys, cfg.txn_ops)
            for i in range(2)
        ]
        counts = [[0, 0], [0, 0]]  # commits, aborts per store

        def phase(i: int) -> Callable[[int, float], int]:
            def fn(_round: int, deadline: float) -> int:
                c, a = stores[i].rmw_many(
                    streams[i], deadline, durable=False, isolation=SERIALIZABLE
                )
                counts[i][0] += c
                counts[i][1] += a
                return c

            return fn

        (n0, s0), (n1, s1) = alternate([phase(0), phase(1)], cfg.txn_seconds)
        still_open = stores[1].end_readers(held)
        held = []
        for i, st in enumerate(stores):
            _check_counters(st, cfg.txn_keys, counts[i][0], f"{cls.name} txn_open")
    finally:
        if held:
            stores[1].end_readers(held)
        for st in stores:
            st.close()
            shutil.rmtree(st.path, ignore_errors=True)
    if still_open < OPEN_TXNS:
        raise AssertionError(
            f"only {still_open} of the {OPEN_TXNS} long transactions were still open at the end"
        )
    report.add(Row(cls.name, "txn_open0", None, n0 / s0, n0, s0))
    note = f"{still_open} transactions still open at the end"
    if counts[1][1]:
        note += f"; {counts[1][1]} aborts (retried)"
    report.add(Row(cls.name, "txn_open100", None, n1 / s1, n1, s1, note))
