"""``python -m lakehouse.bench --only data``: table data against pylance and deltalake.

Every system gets the same batches (``id``, ``name``, ``amount``; 1,000 rows
each by default) in fresh directories under the bench root (local disk), in
the same run, and every figure is the median over ``--data-rounds`` rounds
with its spread (min-max); ratios are taken per round, then summarised.
Within a round the systems take turns (appends in chunks, reads one at a
time, the starting system rotating), so a noisy neighbour slows them alike.

* **appends**: the table is created holding the first batch (its first
  version), then ``--appends`` appends of one batch each, one commit each:
  commits/s. Ours commits durably (fsync of the data file and of the
  kvstore WAL before returning); the anchors do not fsync at all, so the
  row "ours, fsync off" shows ours on their terms. Our tables have the
  default table settings (automatic compaction on, small writes inlined up
  to ``inline.max_rows``), as a user's would.
* **read latest**: all rows of the table after the appends (ours through
  the open lakehouse, the anchors by URI as a reader process would).
* **time travel**: all rows as of the first version, on that table (after
  ~300 versions) against the same read on a table with 2 versions.
* **delete 1%**: ``--deletes`` deletes of a disjoint ~1% of the rows each
  (``amount`` in a range: rows of every file), one commit each; data files
  on disk and live files are listed before and after. Ours must write no
  data file and keep every live file (deletion vectors), or the run fails.
* **integrity checks** (ours): the read latest and a ``scan_batches`` of
  it with the integrity checks on and off (``lakehouse.data.files.VERIFY``),
  alternating; the ratio checked / unchecked of the medians, per round.
* **concurrent appends**: ``--threads`` threads x ``--per-thread`` appends
  at once on a fresh table; how many commit (the system's own retries
  allowed, none added by us), and the rows then in the table.

The report ends with issue 22's ratios in its direction (ours over pylance
or deltalake, per round): commits/s, read latest, delete 1%.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import pyarrow as pa

import lakehouse
from kvstore.objstore.local import LocalStore
from lakehouse.bench.anchors import ANCHORS, System, files_under
from lakehouse.bench.report import NOFSYNC, summarise
from lakehouse.data import files as datafiles

log = logging.getLogger("lakehouse.bench")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
TABLE = "bench.t"


@dataclass(frozen=True)
class Sizes:
    appends: int = 300
    rows: int = 1000
    rounds: int = 3
    chunk: int = 25  # appends one system makes before the next takes its turn
    reads: int = 5
    tt_reads: int = 25  # reads of the first version (cheap, so more of them)
    deletes: int = 2
    threads: int = 8
    per_thread: int = 25


QUICK = Sizes(
    appends=12, rows=200, rounds=1, chunk=6, reads=2, tt_reads=3, deletes=1, threads=4, per_thread=3
)


class Ours(System):
    """A lakehouse table; ``durable=False`` also turns every fsync off."""

    name = "ours"

    def __init__(self, path: str, durable: bool = True) -> None:
        super().__init__(path)
        opts: dict[str, Any] = {}
        if not durable:
            self.name = NOFSYNC
            store = LocalStore(os.path.join(path, "data"), fsync=False)
            opts = {"durable": False, "kv_options": {"fsync": False}, "data_store": store}
        self.lh = lakehouse.open(path, **opts)

    def create(self, rows: pa.Table) -> None:
        with self.lh.begin() as txn:
            txn.create_namespace("bench")
            txn.create_table(TABLE, SCHEMA)
            txn.append(TABLE, rows)
        assert txn.committed_version is not None
        self.first_version = txn.committed_version

    def append(self, rows: pa.Table) -> None:
        with self.lh.begin() as txn:
            txn.append(TABLE, rows)

    def read_latest(self) -> pa.Table:
        return self.lh.read(TABLE)

    def read_first(self) -> pa.Table:
        with self.lh.at_version(self.first_version) as view:
            return view.read(TABLE)

    def delete(self, where: str) -> None:
        with self.lh.begin() as txn:
            txn.delete(TABLE, where)

    def count(self) -> int:
        return self.lh.table_stats(TABLE).rows

    def disk_files(self) -> set[str]:
        return files_under(self.path, suffix=".parquet", under="data")

    def live_files(self) -> set[str]:
        return {"data/" + f.path for f in self.lh.list_data_files(TABLE)}

    def close(self) -> None:
        self.lh.close()


def make_system(name: str, path: str) -> System:
    if name == "ours":
        return Ours(path)
    if name == NOFSYNC:
        return Ours(path, durable=False)
    return ANCHORS[name](path)


def make_batches(n: int, rows: int, seed: int = 7) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        names = pa.array([f"name-{x}" for x in ids.tolist()], pa.string())
        out.append(pa.table([ids, names, rng.uniform(0, 1000, rows)], schema=SCHEMA))
    return out


def delete_where(k: int) -> str:
    """The k-th 1% slice: ``amount`` is uniform in [0, 1000)."""
    return f"amount >= {10 * k} AND amount < {10 * (k + 1)}"


def rotate(items: list[Any], k: int) -> list[Any]:
    k %= max(len(items), 1)
    return items[k:] + items[:k]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


# ---------------------------------------------------------------------------
# one round
# ---------------------------------------------------------------------------
def appends(systems: list[System], batches: list[pa.Table], sz: Sizes) -> dict[str, float]:
    """The append workload: each system creates its table holding ``batches[0]``, then
    ``sz.appends`` appends of one batch each, in chunks of ``sz.chunk`` (the system
    going first rotating); commits/s of each, by name."""
    for s in systems:
        s.create(batches[0])
    spent = dict.fromkeys((s.name for s in systems), 0.0)
    for c, start in enumerate(range(1, sz.appends + 1, sz.chunk)):
        stop = min(start + sz.chunk, sz.appends + 1)
        for s in rotate(systems, c):
            t0 = time.perf_counter()
            for i in range(start, stop):
                s.append(batches[i])
            spent[s.name] += time.perf_counter() - t0
    return {name: sz.appends / t for name, t in spent.items()}


def _check_rows(s: System, t: pa.Table, want: int, what: str) -> None:
    if t.num_rows != want:
        raise AssertionError(f"{s.name}: {what} returned {t.num_rows} rows, expected {want}")


def _reads(
    systems: list[System], small: list[System], batches: list[pa.Table], sz: Sizes
) -> dict[str, dict[str, float]]:
    total = (sz.appends + 1) * sz.rows
    for s in small:
        s.create(batches[0])
        s.append(batches[1])
    times: dict[str, dict[str, list[float]]] = {
        k: {s.name: [] for s in systems} for k in ("latest", "first", "first_small")
    }
    for rep in range(sz.reads):
        for s in rotate(systems, rep):
            t, rows = timed(s.read_latest)
            _check_rows(s, rows, total, "read latest")
            times["latest"][s.name].append(t)
    # version 1 of both tables back to back, the one read first alternating,
    # apart from the big reads above (they leave caches cold)
    pairs = list(zip(systems, small))
    for rep in range(sz.tt_reads):
        for s, s2 in rotate(pairs, rep):
            for which in (("first", s), ("first_small", s2))[:: 1 if rep % 2 else -1]:
                t, rows = timed(which[1].read_first)
                _check_rows(which[1], rows, sz.rows, f"read of the first version ({which[0]})")
                times[which[0]][s.name].append(t)
    return {k: {n: statistics.median(v) for n, v in d.items()} for k, d in times.items()}


def _verify_cost(s: System, sz: Sizes) -> dict[str, float]:
    """Ours: the same reads with and without the integrity checks (page checksums,
    the size, footer and whole-file CRC against the commit),
    alternating; ratio of the medians (checked / unchecked) per way of reading."""
    assert isinstance(s, Ours)
    lh = s.lh
    ways: dict[str, Callable[[], Any]] = {
        "read": lambda: lh.read(TABLE),
        "scan_batches": lambda: lh.scan_batches(TABLE).read_all(),
    }
    times: dict[tuple[str, bool], list[float]] = {}
    try:
        for rep in range(max(3, sz.reads)):
            for verify in (True, False)[:: 1 if rep % 2 else -1]:
                datafiles.VERIFY = verify
                for way, fn in ways.items():
                    t, rows = timed(fn)
                    _check_rows(s, rows, (sz.appends + 1) * sz.rows, f"{way} (verify={verify})")
                    times.setdefault((way, verify), []).append(t)
    finally:
        datafiles.VERIFY = True
    return {
        way: statistics.median(times[way, True]) / statistics.median(times[way, False])
        for way in ways
    }


def _deletes(
    systems: list[System], batches: list[pa.Table], sz: Sizes
) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
    amounts = np.concatenate([b.column("amount").to_numpy() for b in batches[: sz.appends + 1]])
    times: dict[str, list[float]] = {s.name: [] for s in systems}
    files = {s.name: {"new_data_files": 0, "live_files_replaced": 0} for s in systems}
    for k in range(sz.deletes):
        lo, hi = 10 * k, 10 * (k + 1)
        gone = int(((amounts >= lo) & (amounts < hi)).sum())
        for s in rotate(systems, k):
            before, disk, live = s.count(), s.disk_files(), s.live_files()
            t0 = time.perf_counter()
            s.delete(delete_where(k))
            times[s.name].append(time.perf_counter() - t0)
            after = s.count()
            if after != before - gone:
                raise AssertionError(f"{s.name}: {before} rows, {after} after deleting {gone}")
            files[s.name]["new_data_files"] += len(s.disk_files() - disk)
            files[s.name]["live_files_replaced"] += len(live - s.live_files())
    if "ours" in files and any(files["ours"].values()):
        raise AssertionError(f"our delete rewrote data files: {files['ours']}")
    log.info("delete seconds: %s", times)
    return {n: statistics.median(v) for n, v in times.items()}, files


def _concurrent(s: System, batches: list[pa.Table], sz: Sizes) -> dict[str, Any]:
    s.create(batches[0])
    ok = [0] * sz.threads
    errors: Counter[str] = Counter()
    example: dict[str, str] = {}
    barrier = threading.Barrier(sz.threads + 1)
    lock = threading.Lock()

    def body(i: int) -> None:
        barrier.wait()
        for j in range(sz.per_thread):
            try:
                s.append(batches[1 + (i * sz.per_thread + j) % (len(batches) - 1)])
                ok[i] += 1
            except Exception as exc:
                with lock:
                    errors[type(exc).__name__] += 1
                    example.setdefault(type(exc).__name__, str(exc)[:300])

    threads = [threading.Thread(target=body, args=(i,)) for i in range(sz.threads)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    committed = sum(ok)
    rows = s.count()
    return {
        "committed": committed,
        "attempted": sz.threads * sz.per_thread,
        "per_s": committed / elapsed,
        "rows_match": rows == (committed + 1) * sz.rows,
        "errors": dict(errors),
        "error_examples": example,
    }


def one_round(root: str, names: list[str], batches: list[pa.Table], sz: Sizes) -> dict[str, Any]:
    made: list[System] = []

    def new(name: str, label: str) -> System:
        path = os.path.join(root, label, name.replace(", ", "-").replace(" ", "-"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        made.append(make_system(name, path))
        return made[-1]

    phases: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        phases[name] = now - clock[0]
        clock[0] = now

    try:
        main = [new(n, "big") for n in names]
        extra = [new(NOFSYNC, "big")] if "ours" in names else []
        out: dict[str, Any] = {"append_per_s": appends(main + extra, batches, sz)}
        lap("appends")
        for s in extra:
            s.close()
        small = [new(n, "small") for n in names]
        out["read_s"] = _reads(main, small, batches, sz)
        ours = [s for s in main if s.name == "ours"]
        if ours:
            out["verify_ratio"] = _verify_cost(ours[0], sz)
        lap("reads")
        out["delete_s"], out["delete_files"] = _deletes(main, batches, sz)
        lap("deletes")
        out["concurrent"] = {}
        for k, n in enumerate(names):
            out["concurrent"][n] = _concurrent(new(n, f"concurrent{k}"), batches, sz)
            lap(f"concurrent {n}")
        out["phase_s"] = phases
        return out
    finally:
        for s in made:
            s.close()
        shutil.rmtree(root, ignore_errors=True)


def warm_up(root: str, names: list[str], batches: list[pa.Table]) -> None:
    """First calls (imports, thread pools, caches) outside the measurements."""
    for n in names:
        s = make_system(n, os.path.join(root, "warm", n))
        try:
            s.create(batches[0])
            s.append(batches[1])
            s.read_latest()
            s.read_first()
            s.delete(delete_where(0))
        finally:
            s.close()
    shutil.rmtree(os.path.join(root, "warm"), ignore_errors=True)


# ---------------------------------------------------------------------------
def add_arguments(p: Any) -> None:
    d = Sizes()
    p.add_argument("--systems", default="ours,pylance,deltalake",
                   help="comma-separated: ours, pylance, deltalake")  # fmt: skip
    p.add_argument("--appends", type=int, default=d.appends)
    p.add_argument("--rows", type=int, default=d.rows, help="rows per append")
    p.add_argument("--data-rounds", type=int, default=d.rounds)
    p.add_argument(
        "--reads", type=int, default=d.reads, help="reads of the latest version per round"
    )
    p.add_argument("--tt-reads", type=int, default=d.tt_reads, help="reads of version 1 per round")
    p.add_argument("--deletes", type=int, default=d.deletes, help="1%% deletes per round")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--per-thread", type=int, default=d.per_thread)


def sizes_of(args: argparse.Namespace) -> Sizes:
    if getattr(args, "quick", False):
        return QUICK
    sz = Sizes(
        appends=args.appends, rows=args.rows, rounds=args.data_rounds, reads=args.reads,
        tt_reads=args.tt_reads,
        deletes=args.deletes, threads=args.threads, per_thread=args.per_thread,
    )  # fmt: skip
    for f in fields(sz):
        if getattr(sz, f.name) < 1:
            raise SystemExit(f"--{f.name.replace('_', '-')} must be >= 1")
    return replace(sz, chunk=min(sz.chunk, sz.appends))


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    sz = sizes_of(args)
    names, missing = [], {}
    for n in (x.strip() for x in args.systems.split(",") if x.strip()):
        if n != "ours" and n not in ANCHORS:
            raise SystemExit(f"unknown system {n!r} (ours, {', '.join(ANCHORS)})")
        try:
            make_system(n, os.path.join(root, "probe", n)).close() if n != "ours" else None
            names.append(n)
        except ImportError as exc:
            missing[n] = f"not installed ({exc})"
    shutil.rmtree(os.path.join(root, "probe"), ignore_errors=True)
    batches = make_batches(sz.appends + 1, sz.rows)
    warm_up(root, names, batches)
    rounds = []
    for r in range(sz.rounds):
        rounds.append(one_round(os.path.join(root, f"round{r}"), rotate(names, r), batches, sz))
        log.info("data round %d: appends/s %s; seconds %s", r + 1,
                 rounds[-1]["append_per_s"], rounds[-1]["phase_s"])  # fmt: skip
    return {"sizes": asdict(sz), "systems": names, "missing": missing, "rounds": rounds,
            "summary": summarise(rounds, names)}  # fmt: skip
