"""``python -m lakehouse.bench --only meta``: metadata commit throughput and time-travel cost.

Rows (all on local disk under the bench root, a temp directory under /tmp by
default; durable unless noted):

* ``raw append+fdatasync``: one ``write`` of a commit-sized record plus
  ``fdatasync`` on a file in the same directory: what one durable commit
  cannot beat;
* ``lakehouse 1 thread``: ``alter_table(set_properties=...)`` transactions,
  each committed durably (one version each);
* ``lakehouse 8 threads``: the same, eight threads on eight tables (commits
  share fsyncs through the kvstore's group commit);
* ``pyiceberg SqlCatalog (sqlite)``: the same operation through pyiceberg's
  SQL catalog on a local sqlite file, 1 and 8 threads (if pyiceberg is
  installed: ``pip install "pyiceberg[sql-sqlite]"``, the ``bench`` extra);
* time travel after 10,000 versions: opening a view of version 1 and reading
  from it, against the same reads at the latest version.

The machine may be shared, so the throughput rows are measured in several
interleaved rounds (raw, 1 thread, 8 threads, raw, ...) and reported as
medians, with the ratios computed per round.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import lakehouse

log = logging.getLogger("lakehouse.bench")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


# ---------------------------------------------------------------------------
# throughput
# ---------------------------------------------------------------------------
def raw_fsync_rate(path: str, n: int, record_bytes: int = 700) -> float:
    """Appends + fdatasync per second on a file in ``path``."""
    os.makedirs(path, exist_ok=True)
    name = os.path.join(path, "raw-append.log")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    data = b"r" * record_bytes
    try:
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, data)
            os.fdatasync(fd)
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(name)


def _threads(n_threads: int, body: Callable[[int], None]) -> float:
    """Run ``body(i)`` on n threads started together; returns elapsed seconds."""
    barrier = threading.Barrier(n_threads + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            body(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


class _Commits:
    """Commit rates of one system: one thread on one table, or a thread per table."""

    def commit(self, table: int) -> None:
        raise NotImplementedError

    def single(self, n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            self.commit(0)
        return n / (time.perf_counter() - start)

    def threaded(self, n: int, n_threads: int = 8) -> float:
        per = max(1, n // n_threads)

        def body(i: int) -> None:
            for _ in range(per):
                self.commit(i)

        return per * n_threads / _threads(n_threads, body)


class LakehouseCommits(_Commits):
    def __init__(self, path: str, n_tables: int = 8, fsync: bool = True) -> None:
        shutil.rmtree(path, ignore_errors=True)
        self.lh = lakehouse.open(path, kv_options={"fsync": fsync})
        with self.lh.begin() as txn:
            txn.create_namespace("bench")
            for i in range(n_tables):
                txn.create_table(f"bench.t{i}", SCHEMA, {"owner": "bench"})
        self.counter = 0
        self.retries = 0

    def commit(self, table: int) -> None:
        self.counter += 1
        with self.lh.begin() as txn:
            txn.alter_table(f"bench.t{table}", set_properties={"n": str(self.counter)})
        self.retries += txn.attempts - 1

    def close(self) -> None:
        self.lh.close()


class IcebergCommits(_Commits):
    """The same operation through pyiceberg's SQL catalog on sqlite."""

    def __init__(self, path: str, n_tables: int = 8) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse"
        )
        self.catalog.create_namespace("bench")
        self.tables = [
            self.catalog.create_table(f"bench.t{i}", schema=SCHEMA) for i in range(n_tables)
        ]
        self.counter = 0

    def commit(self, table: int) -> None:
        self.counter += 1
        tx = self.tables[table].transaction()
        tx.set_properties(n=str(self.counter)).commit_transaction()

    def close(self) -> None:
        self.catalog.engine.dispose()


def throughput(root: str, n: int, rounds: int, iceberg_n: int) -> dict[str, Any]:
    lh = LakehouseCommits(os.path.join(root, "commits"))
    ice: IcebergCommits | None = None
    ice_error = None
    if iceberg_n:
        try:
            ice = IcebergCommits(os.path.join(root, "iceberg"))
        except ImportError as exc:
            ice_error = f"pyiceberg not installed ({exc})"
    raw, single, multi, ice1, ice8 = [], [], [], [], []
    try:
        for r in range(rounds):
            raw.append(raw_fsync_rate(root, n))
            single.append(lh.single(n))
            multi.append(lh.threaded(n * 2))
            if ice is not None:
                ice1.append(ice.single(iceberg_n))
                ice8.append(ice.threaded(iceberg_n))
            log.info(
                "round %d: raw %.0f/s, lakehouse 1 thread %.0f/s, 8 threads %.0f/s",
                r + 1,
                raw[-1],
                single[-1],
                multi[-1],
            )
    finally:
        lh.close()
        if ice is not None:
            ice.close()
    # CPU cost of one commit, without the disk: what bounds throughput once
    # fsyncs are shared (and what a quiet disk adds its fsync to)
    cpu = LakehouseCommits(os.path.join(root, "cpu"), fsync=False)
    try:
        cpu.single(max(10, n // 10))  # warm up
        started = time.process_time()
        cpu_rate = cpu.single(n)
        cpu_us = (time.process_time() - started) / n * 1e6
    finally:
        cpu.close()
    med = statistics.median
    out: dict[str, Any] = {
        "fsync_off_per_s": cpu_rate,
        "cpu_us_per_commit": cpu_us,
        "raw_fsync_per_s": med(raw),
        "lakehouse_1_thread_per_s": med(single),
        "lakehouse_8_threads_per_s": med(multi),
        "single_vs_raw": med(s / r for s, r in zip(single, raw)),
        "eight_vs_single": med(m / s for m, s in zip(multi, single)),
        "eight_vs_raw": med(m / r for m, r in zip(multi, raw)),
        "lost_races_retried": lh.retries,
        "rounds": rounds,
        "commits_per_round": n,
    }
    if ice is not None:
        out["iceberg_1_thread_per_s"] = med(ice1)
        out["iceberg_8_threads_per_s"] = med(ice8)
    elif ice_error:
        out["iceberg"] = ice_error
    return out


# ---------------------------------------------------------------------------
# time travel after many versions
# ---------------------------------------------------------------------------
def _reads(view: lakehouse.LakehouseView, table: str) -> None:
    view.describe_table(table).schema  # noqa: B018 - decoding the schema is part of a read
    view.describe_namespace("tt")


def _timed(fn: Callable[[], None], repeat: int) -> float:
    """Median seconds of ``fn`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_travel(root: str, versions: int, tables: int, repeat: int) -> dict[str, Any]:
    """Build ``versions`` versions round-robin over ``tables`` tables, then compare
    opening-and-reading version 1 with the same at the latest version."""
    path = os.path.join(root, f"timetravel-{tables}")
    shutil.rmtree(path, ignore_errors=True)
    lh = lakehouse.open(path, durable=False)
    try:
        with lh.begin() as txn:  # version 1
            txn.create_namespace("tt")
            for i in range(tables):
                txn.create_table(f"tt.t{i}", SCHEMA, {"v": "1"})
        start = time.perf_counter()
        for v in range(2, versions + 1):
            with lh.begin() as txn:
                txn.alter_table(f"tt.t{v % tables}", set_properties={"v": str(v)})
        build_s = time.perf_counter() - start
        lh.kvstore.flush()
        head = lh.version
        assert head == versions
        table = "tt.t0"
        with lh.at_version(1) as v1:  # correctness first
            assert v1.describe_table(table).properties == {"v": "1"}
            assert len(v1.list_tables("tt")) == tables
        result: dict[str, Any] = {"versions": versions, "tables": tables, "build_s": build_s}
        steps: tuple[tuple[Callable[[], object], str], ...] = (
            (lambda: None, "memtable+L0"),
            (lh.kvstore.compact, "compacted"),
        )
        for where, label in steps:
            where()

            def old() -> None:
                with lh.at_version(1) as view:
                    _reads(view, table)

            def latest() -> None:
                with lh.at_version(lh.version) as view:
                    _reads(view, table)

            for _ in range(3):  # warm caches
                old()
                latest()
            t_old = _timed(old, repeat)
            t_new = _timed(latest, repeat)
            result[label] = {
                "at_version_1_us": t_old * 1e6,
                "latest_us": t_new * 1e6,
                "ratio": t_old / t_new,
            }
        return result
    finally:
        lh.close()


# ---------------------------------------------------------------------------
def report(res: dict[str, Any]) -> str:
    t = res["throughput"]
    lines = [
        "durable metadata commits (alter table properties), local disk, "
        f"median of {t['rounds']} interleaved rounds",
        "",
        "| | commits/s | vs raw append+fdatasync |",
        "|---|---:|---:|",
        f"| raw append+fdatasync | {t['raw_fsync_per_s']:,.0f} | 1.00 |",
        f"| lakehouse, 1 thread | {t['lakehouse_1_thread_per_s']:,.0f} | "
        f"{t['single_vs_raw']:.2f} |",
        f"| lakehouse, 8 threads, different tables | {t['lakehouse_8_threads_per_s']:,.0f} | "
        f"{t['eight_vs_raw']:.2f} ({t['eight_vs_single']:.1f}x 1 thread) |",
        f"| lakehouse, 1 thread, fsync off ({t['cpu_us_per_commit']:.0f} µs CPU per commit) | "
        f"{t['fsync_off_per_s']:,.0f} | |",
    ]
    if "iceberg_1_thread_per_s" in t:
        lines += [
            f"| pyiceberg SqlCatalog (sqlite), 1 thread | {t['iceberg_1_thread_per_s']:,.0f} | "
            f"{t['iceberg_1_thread_per_s'] / t['raw_fsync_per_s']:.2f} |",
            f"| pyiceberg SqlCatalog (sqlite), 8 threads | {t['iceberg_8_threads_per_s']:,.0f} | "
            f"{t['iceberg_8_threads_per_s'] / t['raw_fsync_per_s']:.2f} |",
        ]
    elif "iceberg" in t:
        lines.append(f"| pyiceberg | {t['iceberg']} | |")
    lines.append("")
    for tt in res["time_travel"]:
        lines.append(
            f"time travel after {tt['versions']:,} versions over {tt['tables']} table(s) "
            f"(~{tt['versions'] // tt['tables']:,} versions of each table definition):"
        )
        lines += [
            "",
            "| data in | open+read version 1 | open+read latest | ratio |",
            "|---|---:|---:|---:|",
        ]
        for label in ("memtable+L0", "compacted"):
            r = tt[label]
            lines.append(
                f"| {label} | {r['at_version_1_us']:,.0f} µs | {r['latest_us']:,.0f} µs | "
                f"{r['ratio']:.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


#: --quick sizes (a smoke run of a few seconds)
QUICK = {"commits": 16, "rounds": 1, "iceberg_commits": 0, "versions": 60, "repeat": 5}


def add_arguments(p: Any) -> None:
    """The options of this benchmark, on an argparse parser or argument group."""
    p.add_argument("--commits", type=int, default=1000, help="commits per round and row")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iceberg-commits", type=int, default=200, help="0 skips pyiceberg")
    p.add_argument("--versions", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=200)


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    """Both parts at the sizes of ``args`` (``--quick`` overrides them), under ``root``."""
    sizes = {k: getattr(args, k) for k in QUICK}
    if getattr(args, "quick", False):
        sizes.update(QUICK)
    os.makedirs(root, exist_ok=True)
    return {
        "throughput": throughput(root, sizes["commits"], sizes["rounds"], sizes["iceberg_commits"]),
        "time_travel": [
            time_travel(root, sizes["versions"], tables, sizes["repeat"])
            for tables in (1000, 100, 1)
        ],
    }
