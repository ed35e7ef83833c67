"""The workloads, the runner and the targets of ``python -m kvstore.bench``.

Data: ``n`` keys ``key(0) .. key(n-1)``, 16 ASCII hex bytes each, in a
pseudo-random order (an odd multiplier mod 2**64 is a bijection, so keys never
repeat), with 100-byte incompressible values sliced from a seeded pool.

Workloads (each store runs them in this order):

``load``
    every size in :attr:`Config.sizes`: batches of 1000 non-durable writes,
    then the store is made durable and flushed; that final step is timed too.
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
    peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``) of the subprocess that ran
    the largest load.

Every workload stops at its time bound, so a full run takes a few minutes.
"""

from __future__ import annotations

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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kvstore.bench.adapters import STORES, Pair, Store
from kvstore.options import Options

log = logging.getLogger("kvstore.bench")

MiB = 1 << 20
KEY_BYTES = 16
VALUE_BYTES = 100
#: kvstore's peak RSS during the largest load must stay under the memtable budget plus this
MEMORY_SLACK = 200 * MiB
#: bytes per append in the raw append+fdatasync measurement (about one small WAL frame)
RAW_RECORD_BYTES = 128

WORKLOADS = ("load", "get", "scan", "put_durable", "put_durable_mt", "memory")
#: table rows in order; ``raw_fsync`` is measured around each store's ``put_durable``
ROW_ORDER = ("load", "get", "scan", "raw_fsync", "put_durable", "put_durable_mt", "memory")

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
        return "MiB" if self.workload == "memory" else "ops/s"


@dataclass(frozen=True)
class Target:
    """A goal for kvstore on one table row; ``actual`` is a ratio (or MiB for memory)."""

    workload: str
    size: int | None
    text: str
    actual: float | None
    bound: float
    at_most: bool = False

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
    errors: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    @property
    def stores(self) -> list[str]:
        """Stores with at least one row, in table order."""
        seen = {r.store for r in self.rows}
        return [s for s in STORES if s in seen]

    def row_keys(self) -> list[tuple[str, int | None]]:
        """The distinct (workload, size) rows, in table order."""
        keys = {(r.workload, r.size) for r in self.rows}
        return sorted(keys, key=lambda k: (ROW_ORDER.index(k[0]), k[1] or 0))

    def value(self, store: str, workload: str, size: int | None) -> float | None:
        for r in self.rows:
            if (r.store, r.workload, r.size) == (store, workload, size):
                return r.value
        return None

    def ratio(self, other: str, workload: str, size: int | None) -> float | None:
        """kvstore's value divided by ``other``'s on one row (None for raw_fsync)."""
        if workload == "raw_fsync":
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
            "errors": self.errors,
        }


def label(workload: str, size: int | None, threads: int) -> str:
    """The table's name for a row."""
    n = human(size) if size is not None else ""
    return {
        "load": f"load {n} (batched)",
        "get": f"random get, {n} keys, reopened",
        "scan": f"full scan, {n} keys",
        "raw_fsync": "raw append+fdatasync (around durable put)",
        "put_durable": "durable put, 1 thread",
        "put_durable_mt": f"durable put, {threads} threads",
        "memory": f"peak RSS of the {n} load (MiB)",
    }[workload]


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
    store.open(bulk=True)
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
        "%-8s %-16s %-6s %12.1f %s  (%d ops, %.2fs)%s",
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


# ----------------------------------------------------------------------------
# targets
# ----------------------------------------------------------------------------
def evaluate_targets(report: Report) -> list[Target]:
    """kvstore's goals, on the rows this report has."""
    out: list[Target] = []
    vs_sqlite = {"load": 1.5, "get": 1.5, "scan": 0.75}
    for w, n in report.row_keys():
        if w in vs_sqlite:
            out.append(
                Target(
                    w, n, f">= {vs_sqlite[w]}x sqlite3", report.ratio("sqlite3", w, n), vs_sqlite[w]
                )
            )
        if w == "raw_fsync":
            continue
        if w == "put_durable":
            kv = report.value("kvstore", w, n)
            raw = report.value("kvstore", "raw_fsync", None) or report.raw_fsync_ops
            out.append(
                Target(
                    w,
                    n,
                    ">= 0.9x raw append+fdatasync",
                    kv / raw if kv is not None and raw else None,
                    0.9,
                )
            )
        if w == "put_durable_mt":
            mt = report.value("kvstore", w, n)
            one = report.value("kvstore", "put_durable", None)
            out.append(
                Target(
                    w,
                    n,
                    ">= 4x kvstore 1-thread durable put",
                    mt / one if mt is not None and one else None,
                    4.0,
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
                )
            )
        else:
            out.append(Target(w, n, ">= 10x slatedb", report.ratio("slatedb", w, n), 10.0))
    return out
