"""The workloads, the runner and the targets of ``python -m kvstore.bench``.

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

import gc
import importlib.metadata
import json
import logging
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kvstore.bench.adapters import (
    ROW_GROUPS,
    SERIALIZABLE,
    SNAPSHOT,
    STORES,
    Pair,
    Store,
)
from kvstore.options import Options

log = logging.getLogger("kvstore.bench")

MiB = 1 << 20
KEY_BYTES = 16
VALUE_BYTES = 100
#: kvstore's peak RSS during the largest load must stay under the memtable budget plus this
MEMORY_SLACK = 200 * MiB
#: bytes per append in the raw append+fdatasync measurement (about one small WAL frame)
RAW_RECORD_BYTES = 128

#: long-running transactions kept open in ``txn_open100``
OPEN_TXNS = 100
#: distinct values the overwrite workload cycles through
_OVERWRITE_VALUES = 1009

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


def memtable_budget() -> int:
    """Bytes kvstore's memtables may hold with default options (active + frozen)."""
    o = Options()
    return o.memtable_bytes * (1 + o.max_immutable_memtables)


@dataclass(frozen=True)
class Config:
    """What to run and each workload's bounds (defaults: the full run)."""

    sizes: tuple[int, ...] = (100_000, 1_000_000)
    stores: tuple[str, ...] = tuple(STORES)
    workloads: tuple[str, ...] = WORKLOADS
    #: directory to create the run's temporary data directory in (None: system temp)
    root: str | None = None
    batch: int = 1000
    threads: int = 8
    load_seconds: float = 150.0
    get_ops: int = 100_000
    get_seconds: float = 10.0
    scan_seconds: float = 30.0
    put_ops: int = 5_000
    put_seconds: float = 5.0
    fsync_seconds: float = 3.0
    #: txn_rmw / txn_open100: keys, transactions per run at most, seconds per run
    txn_keys: int = 10_000
    txn_ops: int = 1_000_000
    txn_seconds: float = 5.0
    #: contended txn_rmw: threads and hot keys
    hot_threads: int = 4
    hot_keys: int = 100
    #: overwrite: random puts over how many keys, and its time bound
    overwrite_puts: int = 1_000_000
    overwrite_keys: int = 100_000
    overwrite_seconds: float = 120.0
    seed: int = 1

    @classmethod
    def quick(cls, **overrides: Any) -> Config:
        """Small sizes and short bounds: a smoke run of every workload in seconds."""
        small = cls(
            sizes=(2_000, 10_000),
            load_seconds=20.0,
            get_ops=5_000,
            get_seconds=2.0,
            scan_seconds=5.0,
            put_ops=300,
            put_seconds=1.0,
            fsync_seconds=0.5,
            txn_keys=1_000,
            txn_seconds=1.0,
            overwrite_puts=20_000,
            overwrite_keys=2_000,
            overwrite_seconds=20.0,
        )
        return replace(small, **overrides)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.stores) - set(STORES))
        if unknown:
            raise ValueError(f"stores: unknown {', '.join(unknown)} (known: {', '.join(STORES)})")
        unknown = sorted(set(self.workloads) - set(WORKLOADS))
        if unknown:
            raise ValueError(
                f"workloads: unknown {', '.join(unknown)} (known: {', '.join(WORKLOADS)})"
            )
        if not self.sizes or any(n <= 0 for n in self.sizes):
            raise ValueError(f"sizes must be positive key counts, got {self.sizes}")
        if self.batch <= 0 or self.threads <= 0:
            raise ValueError("batch and threads must be positive")
        if self.txn_keys < 2 or self.hot_keys < 2 or self.hot_threads <= 0:
            raise ValueError("txn_keys and hot_keys must be >= 2, hot_threads positive")
        if self.overwrite_keys <= 0 or self.overwrite_puts <= 0:
            raise ValueError("overwrite_keys and overwrite_puts must be positive")


@dataclass
class Row:
    """One measurement: ``value`` is ops/s, or MiB for ``memory``."""

    store: str
    workload: str
    size: int | None
    value: float
    ops: int
    seconds: float
    note: str = ""

    @property
    def unit(self) -> str:
        return UNITS.get(self.workload, "ops/s")


@dataclass(frozen=True)
class Target:
    """A goal for kvstore on one table row; ``actual`` is a ratio (or MiB for memory)."""

    workload: str
    size: int | None
    text: str
    actual: float | None
    bound: float
    at_most: bool = False
    #: what ``actual`` is: "x" (a ratio), "MiB" or "ms"
    unit: str = "x"

    @property
    def passed(self) -> bool | None:
        if self.actual is None:
            return None
        return self.actual <= self.bound if self.at_most else self.actual >= self.bound


@dataclass
class Report:
    config: Config
    machine: dict[str, Any]
    raw_fsync_ops: float | None = None
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: (store, row workload) -> why that store does not run that row ("n/a")
    not_applicable: dict[tuple[str, str], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    @property
    def stores(self) -> list[str]:
        """Stores with at least one row, in table order."""
        seen = {r.store for r in self.rows} | {s for s, _ in self.not_applicable}
        return [s for s in STORES if s in seen]

    def row_keys(self) -> list[tuple[str, int | None]]:
        """The distinct (workload, size) rows, in table order."""
        keys = {(r.workload, r.size) for r in self.rows}
        keys |= {(w, None) for _, w in self.not_applicable}
        return sorted(keys, key=lambda k: (ROW_ORDER.index(k[0]), k[1] or 0))

    def value(self, store: str, workload: str, size: int | None) -> float | None:
        for r in self.rows:
            if (r.store, r.workload, r.size) == (store, workload, size):
                return r.value
        return None

    def row(self, store: str, workload: str, size: int | None) -> Row | None:
        for r in self.rows:
            if (r.store, r.workload, r.size) == (store, workload, size):
                return r
        return None

    def ratio(self, other: str, workload: str, size: int | None) -> float | None:
        """kvstore's value divided by ``other``'s on one row (None for raw_fsync, %, x rows)."""
        if workload == "raw_fsync" or UNITS.get(workload) in ("%", "x"):
            return None
        mine = self.value("kvstore", workload, size)
        theirs = self.value(other, workload, size)
        if mine is None or not theirs:
            return None
        return mine / theirs

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "config": asdict(self.config),
            "raw_append_fdatasync_ops_per_s": self.raw_fsync_ops,
            "rows": [asdict(r) | {"unit": r.unit} for r in self.rows],
            "ratios": [
                {
                    "workload": w,
                    "size": n,
                    **{f"kvstore/{s}": self.ratio(s, w, n) for s in self.stores if s != "kvstore"},
                }
                for w, n in self.row_keys()
            ],
            "targets": [asdict(t) | {"passed": t.passed} for t in self.targets],
            "skipped": self.skipped,
            "not_applicable": [
                {"store": s, "workload": w, "why": why}
                for (s, w), why in self.not_applicable.items()
            ],
            "errors": self.errors,
        }


def label(workload: str, size: int | None, cfg: Config) -> str:
    """The table's name for a row."""
    n = human(size) if size is not None else ""
    hot = f"txn RMW, {cfg.hot_threads} threads, {cfg.hot_keys} hot keys"
    ow = f"{human(cfg.overwrite_puts)} puts over {human(cfg.overwrite_keys)} keys"
    return {
        "load": f"load {n} (batched)",
        "get": f"random get, {n} keys, reopened",
        "scan": f"full scan, {n} keys",
        "raw_fsync": "raw append+fdatasync (around durable put)",
        "put_durable": "durable put, 1 thread",
        "put_durable_mt": f"durable put, {cfg.threads} threads",
        "memory": f"peak RSS of the {n} load (MiB)",
        "txn_rmw": "txn RMW 2 keys, SERIALIZABLE, non-durable",
        "txn_rmw_durable": "txn RMW 2 keys, SERIALIZABLE, durable",
        "txn_hot_snapshot": f"{hot}, SNAPSHOT (commits/s)",
        "txn_hot_snapshot_aborts": "  abort rate at SNAPSHOT (% of attempts)",
        "txn_hot_serializable": f"{hot}, SERIALIZABLE (commits/s)",
        "txn_hot_serializable_aborts": "  abort rate at SERIALIZABLE (% of attempts)",
        "txn_open0": "txn RMW, SERIALIZABLE, no other txn open",
        "txn_open100": f"txn RMW, SERIALIZABLE, {OPEN_TXNS} long txns open",
        "overwrite": f"overwrite: {ow}, non-durable",
        "overwrite_max_ms": "overwrite: slowest single put (ms)",
        "get_after_overwrite": "random get after the overwrite",
        "space_amp": "after compact(): live SST bytes / data bytes",
        "get_after_compact": "random get after overwrite + compact()",
        "get_fresh": f"random get, fresh load of the {human(cfg.overwrite_keys)} keys",
    }[workload]


def fmt_value(v: float | None, unit: str = "ops/s") -> str:
    """A table cell for a value of ``unit``."""
    if v is None:
        return "-"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "ms":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


# ----------------------------------------------------------------------------
# machine
# ----------------------------------------------------------------------------
def machine_info(data_dir: str) -> dict[str, Any]:
    versions: dict[str, str] = {"sqlite": sqlite3.sqlite_version}
    for dist in ("kvstore-lakehouse", "lmdb", "rocksdict", "slatedb"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError, AttributeError):
        mem_gib = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gib": None if mem_gib is None else round(mem_gib, 1),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
        "data_dir": data_dir,
    }


def raw_append_fdatasync(
    directory: str, seconds: float, max_ops: int = 1_000_000
) -> tuple[int, float]:
    """Appends of RAW_RECORD_BYTES, each followed by fdatasync: (appends, seconds)."""
    path = os.path.join(directory, "raw-append.bin")
    sync = getattr(os, "fdatasync", os.fsync)
    record = b"\x00" * RAW_RECORD_BYTES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        n = 0
        start = time.perf_counter()
        deadline = start + seconds
        while n < max_ops:
            os.write(fd, record)
            sync(fd)
            n += 1
            if time.perf_counter() >= deadline:
                break
        return n, time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def peak_rss_bytes() -> int:
    """This process's peak RSS.

    On Linux, ``VmHWM`` of the process's own address space: ``ru_maxrss``
    keeps the high-water mark from before ``exec``, so in the load subprocess
    it would report the benchmark parent's RSS at fork time whenever that is
    larger (it is, after the parent ran other workloads).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


# ----------------------------------------------------------------------------
# loads run in a subprocess (a fresh interpreter per store and size)
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadResult:
    loaded: int
    seconds: float
    peak_rss: int


_CHILD = "from kvstore.bench.workloads import child_main; child_main()"


def load_in_subprocess(store: str, path: str, n: int, cfg: Config) -> LoadResult:
    """Run one load in a new interpreter; returns what it loaded, its time and peak RSS."""
    out = path + ".result.json"
    spec = {
        "store": store,
        "path": path,
        "n": n,
        "batch": cfg.batch,
        "seconds": cfg.load_seconds,
        "out": out,
    }
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=cfg.load_seconds * 4 + 300,
    )
    if proc.stderr.strip():
        log.debug("%s load %d stderr:\n%s", store, n, proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(
            f"load subprocess exited with {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        )
    with open(out) as f:
        res = json.load(f)
    os.unlink(out)
    return LoadResult(res["loaded"], res["seconds"], res["peak_rss"])


def child_main() -> None:
    """Entry point of the load subprocess: argv[1] is the JSON spec; writes JSON to spec.out."""
    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(sys.argv[1])
    store = STORES[spec["store"]](spec["path"])
    store.open_for_load()
    start = time.perf_counter()
    loaded = store.load(batches(spec["n"], spec["batch"]), start + spec["seconds"])
    seconds = time.perf_counter() - start
    store.close()
    with open(spec["out"], "w") as f:
        json.dump({"loaded": loaded, "seconds": seconds, "peak_rss": peak_rss_bytes()}, f)


# ----------------------------------------------------------------------------
# the runner
# ----------------------------------------------------------------------------
def run(cfg: Config) -> Report:
    """Run ``cfg`` on every available store; all data is deleted afterwards."""
    if cfg.root is not None:
        os.makedirs(cfg.root, exist_ok=True)
    root = tempfile.mkdtemp(prefix="kvbench-", dir=cfg.root)
    report = Report(cfg, machine_info(root))
    try:
        n, seconds = raw_append_fdatasync(root, cfg.fsync_seconds)
        report.raw_fsync_ops = n / seconds
        log.info("raw append+fdatasync: %.0f ops/s", report.raw_fsync_ops)
        for name in cfg.stores:
            cls = STORES[name]
            reason = cls.missing()
            if reason is not None:
                report.skipped[name] = reason
                log.warning("skipping %s: %s", name, reason)
                continue
            store_dir = os.path.join(root, name)
            os.makedirs(store_dir)
            try:
                _run_store(cls, store_dir, cfg, report)
            finally:
                shutil.rmtree(store_dir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.targets = evaluate_targets(report)
    return report


def _attempt(report: Report, store: str, what: str, fn: Callable[[], None]) -> None:
    """Run one workload; a failure becomes an error line instead of ending the run."""
    try:
        fn()
    except Exception as exc:
        log.exception("%s: %s failed", store, what)
        report.errors.append(f"{store} {what}: {type(exc).__name__}: {exc}")


def _add(report: Report, row: Row) -> None:
    log.info(
        "%-8s %-27s %-6s %12.1f %s  (%d ops, %.2fs)%s",
        row.store,
        row.workload,
        human(row.size) if row.size else "",
        row.value,
        row.unit,
        row.ops,
        row.seconds,
        f"  [{row.note}]" if row.note else "",
    )
    report.rows.append(row)


def _run_store(cls: type[Store], store_dir: str, cfg: Config, report: Report) -> None:
    name = cls.name
    wanted = set(cfg.workloads)
    largest = max(cfg.sizes)
    dataset: tuple[str, int] | None = None  # (path, keys loaded) for get and scan

    sizes = sorted(set(cfg.sizes)) if "load" in wanted else []
    if not sizes and wanted & {"get", "scan", "memory"}:
        sizes = [largest]  # get/scan/memory still need the largest data set

    for n in sizes:
        path = os.path.join(store_dir, f"load-{n}")

        def load(n: int = n, path: str = path) -> None:
            nonlocal dataset
            res = load_in_subprocess(name, path, n, cfg)
            note = "" if res.loaded == n else f"time bound: loaded {res.loaded} of {n} keys"
            if "load" in wanted:
                _add(
                    report,
                    Row(name, "load", n, res.loaded / res.seconds, res.loaded, res.seconds, note),
                )
            if n == largest:
                dataset = (path, res.loaded)
                if "memory" in wanted:
                    _add(
                        report,
                        Row(name, "memory", n, res.peak_rss / MiB, res.loaded, res.seconds, note),
                    )

        _attempt(report, name, f"load {human(n)}", load)
        if n != largest:
            shutil.rmtree(path, ignore_errors=True)

    if dataset is not None:
        path, loaded = dataset
        if "get" in wanted:
            _attempt(report, name, "get", lambda: _get(cls, path, loaded, largest, cfg, report))
        if "scan" in wanted:
            _attempt(report, name, "scan", lambda: _scan(cls, path, loaded, largest, cfg, report))
        shutil.rmtree(path, ignore_errors=True)

    if "put_durable" in wanted:
        _attempt(
            report,
            name,
            "put_durable",
            lambda: _put_durable(cls, os.path.join(store_dir, "put1"), cfg, report),
        )
    if "put_durable_mt" in wanted:
        _attempt(
            report,
            name,
            "put_durable_mt",
            lambda: _put_durable_mt(cls, os.path.join(store_dir, "putmt"), cfg, report),
        )

    for group in sorted({g for w in wanted for g in _groups_of(w)}):
        why = cls.not_run.get(group)
        if why is not None:
            for row in ROW_GROUPS[group]:
                report.not_applicable[(name, row)] = why

    def runs(group: str) -> bool:
        return group not in cls.not_run

    if "txn_rmw" in wanted:
        if runs("txn_rmw"):
            for durable in (False, True):
                w = "txn_rmw_durable" if durable else "txn_rmw"
                p = os.path.join(store_dir, w)
                _attempt(report, name, w, partial(_txn_rmw, cls, p, durable, cfg, report))
        for isolation in (SNAPSHOT, SERIALIZABLE):
            w = f"txn_hot_{isolation}"
            if runs(w):
                p = os.path.join(store_dir, w)
                _attempt(report, name, w, partial(_txn_hot, cls, p, isolation, cfg, report))
    if "txn_open100" in wanted and runs("txn_open"):
        _attempt(
            report,
            name,
            "txn_open100",
            lambda: _txn_open(cls, os.path.join(store_dir, "open"), cfg, report),
        )
    if "overwrite" in wanted and runs("overwrite"):
        _attempt(
            report,
            name,
            "overwrite",
            lambda: _overwrite(
                cls, os.path.join(store_dir, "overwrite"), cfg, report, runs("compact")
            ),
        )


def _groups_of(workload: str) -> list[str]:
    """The row groups (adapters.ROW_GROUPS) that a command-line workload produces."""
    rows = set(WORKLOAD_ROWS.get(workload, ()))
    return [g for g, members in ROW_GROUPS.items() if rows & set(members)]


def _get(cls: type[Store], path: str, loaded: int, size: int, cfg: Config, report: Report) -> None:
    rng = random.Random(cfg.seed)
    keys = [key(rng.randrange(loaded)) for _ in range(cfg.get_ops)]
    store = cls(path)
    store.open()  # a reopen: the load ran (and closed the store) in a subprocess
    try:
        start = time.perf_counter()
        done, found = store.get_many(keys, start + cfg.get_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    if found != done:
        raise AssertionError(f"{done - found} of {done} loaded keys were not found")
    _add(report, Row(cls.name, "get", size, done / seconds, done, seconds))


def _scan(cls: type[Store], path: str, loaded: int, size: int, cfg: Config, report: Report) -> None:
    store = cls(path)
    store.open()
    try:
        start = time.perf_counter()
        n = store.scan_all(start + cfg.scan_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    note = ""
    if n < loaded:
        if seconds < cfg.scan_seconds:
            raise AssertionError(f"the scan returned {n} keys, {loaded} were loaded")
        note = f"time bound: scanned {n} of {loaded} keys"
    _add(report, Row(cls.name, "scan", size, n / seconds, n, seconds, note))


def _put_durable(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
    os.makedirs(path)
    n0, s0 = raw_append_fdatasync(path, cfg.fsync_seconds / 2)
    store = cls(path)
    store.open()
    try:
        start = time.perf_counter()
        n = store.put_durable_many(pairs(1 << 40, cfg.put_ops), start + cfg.put_seconds)
        seconds = time.perf_counter() - start
    finally:
        store.close()
    n1, s1 = raw_append_fdatasync(path, cfg.fsync_seconds / 2)
    shutil.rmtree(path, ignore_errors=True)
    note = f"raw rate {n0 / s0:,.0f}/s before, {n1 / s1:,.0f}/s after"
    _add(report, Row(cls.name, "raw_fsync", None, (n0 + n1) / (s0 + s1), n0 + n1, s0 + s1, note))
    _add(report, Row(cls.name, "put_durable", None, n / seconds, n, seconds))


def _put_durable_mt(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
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
    _add(report, Row(cls.name, "put_durable_mt", None, n / seconds, n, seconds))


class _GcPauses:
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

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def _alternate(
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


def _txn_rmw(cls: type[Store], path: str, durable: bool, cfg: Config, report: Report) -> None:
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
    _add(report, Row(cls.name, w, None, commits / seconds, commits, seconds, note))


def _txn_hot(cls: type[Store], path: str, isolation: str, cfg: Config, report: Report) -> None:
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
    _add(report, Row(cls.name, w, None, commits / seconds, commits, seconds))
    note = f"{aborts} aborts in {attempts} attempts"
    if cls.name == "sqlite3":
        note += " (BEGIN IMMEDIATE: writers wait in sqlite's sleeping busy handler instead)"
    _add(report, Row(cls.name, w + "_aborts", None, rate, attempts, seconds, note))


def _txn_open(cls: type[Store], path: str, cfg: Config, report: Report) -> None:
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

        (n0, s0), (n1, s1) = _alternate([phase(0), phase(1)], cfg.txn_seconds)
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
    _add(report, Row(cls.name, "txn_open0", None, n0 / s0, n0, s0))
    note = f"{still_open} transactions still open at the end"
    if counts[1][1]:
        note += f"; {counts[1][1]} aborts (retried)"
    _add(report, Row(cls.name, "txn_open100", None, n1 / s1, n1, s1, note))


def _overwrite(cls: type[Store], path: str, cfg: Config, report: Report, compact: bool) -> None:
    n_keys = cfg.overwrite_keys
    rng = random.Random(cfg.seed + 3)
    keys = [key(i) for i in range(n_keys)]
    order = array("L", (rng.randrange(n_keys) for _ in range(cfg.overwrite_puts)))
    vals = [value(j) for j in range(_OVERWRITE_VALUES)]
    stream = ((keys[i], vals[j % _OVERWRITE_VALUES]) for j, i in enumerate(order))

    store = cls(path)
    store.open(bulk=True)  # non-durable: sqlite3 synchronous=OFF, LMDB sync=False
    fresh: Store | None = None
    try:
        with _GcPauses() as gc_pauses:
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
        _add(report, Row(cls.name, "overwrite", None, n / seconds, n, seconds, note))
        _add(
            report,
            Row(
                cls.name,
                "overwrite_max_ms",
                None,
                worst * 1000,
                n,
                seconds,
                f"slowest CPython GC pass during the overwrite: {gc_pauses.longest * 1000:.1f} ms "
                f"({gc_pauses.full} full collections)",
            ),
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
        _add(
            report,
            Row(cls.name, "get_after_overwrite", None, done / seconds, done, seconds, note),
        )
        if not compact:
            return

        start = time.perf_counter()
        live = store.compact()
        compact_seconds = time.perf_counter() - start
        data = len(written) * (KEY_BYTES + VALUE_BYTES)
        _add(
            report,
            Row(
                cls.name,
                "space_amp",
                None,
                live / data,
                len(written),
                compact_seconds,
                f"{live:,} live SST bytes for {len(written):,} keys x "
                f"{KEY_BYTES + VALUE_BYTES} bytes; compact() took {compact_seconds:.1f}s",
            ),
        )

        fresh = cls(path + "-fresh")
        fresh.open(bulk=True)
        fresh.load(
            (
                [(keys[i], vals[i % _OVERWRITE_VALUES]) for i in written[a : a + cfg.batch]]
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

        (n0, s0), (n1, s1) = _alternate([gets(0), gets(1)], cfg.get_seconds)
        if any(found_total):
            raise AssertionError(f"keys not found after compact / in the fresh load: {found_total}")
        _add(report, Row(cls.name, "get_after_compact", None, n0 / s0, n0, s0))
        _add(report, Row(cls.name, "get_fresh", None, n1 / s1, n1, s1))
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
        if fresh is not None:
            fresh.close()
            shutil.rmtree(fresh.path, ignore_errors=True)


# ----------------------------------------------------------------------------
# targets
# ----------------------------------------------------------------------------
def evaluate_targets(report: Report) -> list[Target]:
    """kvstore's goals, on the rows this report has."""
    out: list[Target] = []
    vs_sqlite = {
        "load": 1.5,
        "get": 1.5,
        "scan": 0.75,
        "txn_rmw": 2.0,
        "txn_rmw_durable": 2.0,
        "overwrite": 1.0,
        "get_after_overwrite": 1.5,
    }
    vs_slatedb = {
        "load",
        "get",
        "scan",
        "put_durable",
        "put_durable_mt",
        "txn_rmw",
        "txn_rmw_durable",
    }

    def kv(w: str) -> float | None:
        return report.value("kvstore", w, None)

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    for w, n in report.row_keys():
        if w in vs_sqlite:
            out.append(
                Target(
                    w, n, f">= {vs_sqlite[w]}x sqlite3", report.ratio("sqlite3", w, n), vs_sqlite[w]
                )
            )
        if w == "put_durable":
            raw = report.value("kvstore", "raw_fsync", None) or report.raw_fsync_ops
            out.append(Target(w, n, ">= 0.9x raw append+fdatasync", div(kv(w), raw), 0.9))
        if w == "put_durable_mt":
            out.append(
                Target(
                    w, n, ">= 4x kvstore 1-thread durable put", div(kv(w), kv("put_durable")), 4.0
                )
            )
        if w == "memory":
            limit = (memtable_budget() + MEMORY_SLACK) / MiB
            out.append(
                Target(
                    w,
                    n,
                    f"<= {limit:.0f} MiB (memtable budget + 200 MiB)",
                    report.value("kvstore", w, n),
                    limit,
                    at_most=True,
                    unit="MiB",
                )
            )
        if w == "txn_open100":
            out.append(Target(w, n, ">= 0.5x with none open", div(kv(w), kv("txn_open0")), 0.5))
        if w == "overwrite_max_ms":
            out.append(Target(w, n, "< 1000 ms", kv(w), 1000.0, at_most=True, unit="ms"))
        if w == "space_amp":
            out.append(Target(w, n, "<= 1.5x live data", kv(w), 1.5, at_most=True))
        if w == "get_after_compact":
            out.append(
                Target(
                    w,
                    n,
                    "fresh load / this <= 1.25x",
                    div(kv("get_fresh"), kv(w)),
                    1.25,
                    at_most=True,
                )
            )
        if w in vs_slatedb:
            out.append(Target(w, n, ">= 10x slatedb", report.ratio("slatedb", w, n), 10.0))
    return out
