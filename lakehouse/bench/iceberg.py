"""``python -m lakehouse.bench --only iceberg``: the Iceberg catalog against pyiceberg's own.

pyiceberg (the reader every measurement uses) against itself: on one side a
lakehouse table served by our REST catalog (``python -m lakehouse
serve-iceberg URL --port 0`` in a process of its own, as a user runs it;
``--iceberg-server thread`` serves it from a thread of this process instead)
or its metadata written by :func:`lakehouse.iceberg.write_metadata`; on the
other tables of pyiceberg's own ``SqlCatalog`` (sqlite in the bench root),
with the same schema (``id``, ``p``, ``name``, ``amount``), the same identity
partition on ``p``, the same rows and the same number of data files (one file
of ``--iceberg-rows-per-file`` rows per partition). The tables are built
untimed: ours by appends partitioned on ``p`` (one file per partition,
auto-compaction and inlining off), pyiceberg's by Parquet files written with
pyarrow and committed in one fast append per commit.

* **read**: ``load_table(t).scan().to_arrow()`` of a table of
  ``--iceberg-read-files`` files (one commit), ``RestCatalog`` against
  ``SqlCatalog``; both results, sorted by ``id``, must equal the rows
  ``lh.read`` returns;
* **load**: ``load_table(t)`` of a table of ``--iceberg-load-files`` files
  built by ``--iceberg-load-commits`` commits (ours: its metadata written
  once, untimed, before), 20 in a row per measurement, warm (the figure is
  per load); both must report the same total files and records (and, once,
  plan the same number of files). The same round also times 20 ``GET
  /v1/config`` of our server in a row (a ``requests`` session, as
  pyiceberg's): the HTTP round trip every REST load pays, the protocol's
  floor;
* **commit N**: one more version appending N files (``--iceberg-append-files``,
  default 100 and 1,000) to that table, the files written beforehand
  (untimed). Ours: ``write_metadata`` of the new version (the lakehouse
  append itself untimed). pyiceberg, two anchors: ``tbl.add_files(paths)``
  of the N files (its public API for committing written Parquet files: it
  checks that the table does not reference them yet (a scan of the table's
  manifests), reads their footers for the stats, then fast-appends), and a
  fast append of ``DataFile`` objects built beforehand from the same footers
  (untimed): the floor, pyiceberg's metadata work alone. Between them, for
  the reader, ``add_files(paths, check_duplicate_files=False)`` (no target).
  Each commits to a pyiceberg table of its own, built alike (``bench.load``,
  ``bench.load_nocheck``, ``bench.load_fast``: the same files), so all the
  tables grow alike; every new snapshot must say N added files and the same
  total files and records.

Every measurement runs its variants back to back in each round, the order
rotating round to round (``--repeats`` rounds after a warm-up one). Each
variant is reported as min / median (and max) wall seconds over the rounds,
with the median CPU seconds of this process and the server's; each ratio
(ours / anchor) is taken within a round and reported as the median of the
rounds with its spread (min-max). ``--iceberg-profile`` adds the top costs of
one ``write_metadata`` and of one load (client side through REST, and the
catalog's own work without HTTP) to the results and the report.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import json
import logging
import os
import pstats
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakehouse

log = logging.getLogger("lakehouse.bench")
NS = "bench"
READ, LOAD, FAST = f"{NS}.read", f"{NS}.load", f"{NS}.load_fast"
NOCHECK = f"{NS}.load_nocheck"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("name", pa.string()),
                    ("amount", pa.float64())])  # fmt: skip
PROPS = {"compaction.auto": "false", "inline.max_rows": "0"}
LOADS = 20  # loads (and config requests) in a row per timed measurement: the figure is per call
SERVER_START_S = 120.0  # how long the server process may take to say its port
#: the variants timed in each round
SQL, REST, FLOOR = "sqlcatalog", "rest", "http_floor"
ADD, ADD_NOCHECK, FAST_APPEND = "add_files", "add_files_nocheck", "fast_append"
OURS = "write_metadata"
NAMES = {
    SQL: "pyiceberg SqlCatalog",
    REST: "our REST catalog",
    FLOOR: "GET /v1/config (HTTP floor)",
    ADD: "pyiceberg add_files",
    ADD_NOCHECK: "pyiceberg add_files, check_duplicate_files=False",
    FAST_APPEND: "pyiceberg fast append of prebuilt DataFiles",
    OURS: "write_metadata",
}
#: the ratios of each measurement kind: (numerator, denominator), taken per round
RATIOS = {
    "read": ((REST, SQL),),
    "load": ((REST, SQL), (FLOOR, REST)),
    "commit": ((OURS, ADD), (OURS, ADD_NOCHECK), (OURS, FAST_APPEND)),
}
#: the issue's targets: (measurement kind, what, numerator, denominator, bound);
#: every one is numerator / denominator <= bound, on the median of the per-round ratios
TARGETS = (
    ("read", "pyiceberg reads {read} files: our REST catalog / its SqlCatalog", REST, SQL, 1.2),
    ("load", "load_table of {load} files: our REST catalog / its SqlCatalog", REST, SQL, 1.0),
    ("commit", "one version of {n} more files: write_metadata / pyiceberg add_files",
     OURS, ADD, 0.2),
    ("commit", "one version of {n} more files: write_metadata / pyiceberg fast append of "
     "prebuilt DataFiles (its metadata work alone; stricter than the issue)",
     OURS, FAST_APPEND, 0.2),
)  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    read_files: int = 1_000
    load_files: int = 10_000
    load_commits: int = 10
    append_files: tuple[int, ...] = (100, 1_000)
    rows_per_file: int = 10
    repeats: int = 5


QUICK = Sizes(read_files=50, load_files=200, load_commits=2, append_files=(10, 50), repeats=2)


def rows(start: int, files: int, per_file: int) -> pa.Table:
    """``files * per_file`` rows with ids from ``start``: file (partition) ``p`` holds
    ids ``start + p * per_file ..`` (contiguous), deterministic."""
    ids = np.arange(start, start + files * per_file, dtype=np.int64)
    p = ((ids - start) // per_file).astype(np.int32)
    names = pc.binary_join_element_wise("name-", pc.cast(pa.array(ids), pa.string()), "")
    return pa.table([pa.array(ids), pa.array(p), names, pa.array(ids * 0.25)], schema=SCHEMA)


def check(what: str, got: Any, want: Any) -> None:
    """A benchmark result that differs from the expected one is an error, not a number."""
    if got != want:
        raise AssertionError(f"{what}: {got!r}, expected {want!r}")


def same_rows(what: str, got: pa.Table, want: pa.Table) -> None:
    """``got`` holds exactly ``want``'s rows (column order and Arrow string flavour aside)."""
    check(f"{what}: rows", got.num_rows, want.num_rows)
    g = got.select(SCHEMA.names).sort_by("id")
    w = want.select(SCHEMA.names).sort_by("id")
    for name in SCHEMA.names:
        check(f"{what}: column {name}", g[name].to_pylist(), w[name].to_pylist())


def _totals(summary_: Any) -> tuple[int, int, int]:
    """(added files, total files, total records) of a snapshot summary (a mapping)."""
    get = summary_.get if hasattr(summary_, "get") else summary_.__getitem__
    return (int(get("added-data-files") or 0), int(get("total-data-files")),
            int(get("total-records")))  # fmt: skip


def spread(xs: Iterable[float]) -> dict[str, float]:
    v = list(xs)
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


# ---------------------------------------------------------------------------
# pyiceberg's side: its SqlCatalog on sqlite, files written with pyarrow
# ---------------------------------------------------------------------------
class PyIceberg:
    def __init__(self, path: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.path = path
        self.data = os.path.join(path, "files")
        os.makedirs(self.data, exist_ok=True)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse"
        )
        self.catalog.create_namespace(NS)
        self.written = 0
        self.tables: dict[str, Any] = {}  # loaded once: a commit refreshes the object

    def create(self, name: str) -> None:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.table import TableProperties
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

        schema = Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "p", IntegerType(), required=False),
            NestedField(3, "name", StringType(), required=False),
            NestedField(4, "amount", DoubleType(), required=False),
        )
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
        # the files carry no field ids (as ours): a name mapping, as add_files sets it
        props = {TableProperties.DEFAULT_NAME_MAPPING: schema.name_mapping.model_dump_json()}
        self.tables[name] = self.catalog.create_table(
            name, schema=schema, partition_spec=spec, properties=props
        )

    def write(self, batch: pa.Table, per_file: int) -> list[str]:
        """Write ``batch`` as one Parquet file per ``per_file`` rows (one partition
        each); their paths."""
        paths = []
        for off in range(0, batch.num_rows, per_file):
            path = os.path.join(self.data, f"{self.written:08d}.parquet")
            pq.write_table(batch.slice(off, per_file), path)
            paths.append(path)
            self.written += 1
        return paths

    def data_files(self, name: str, paths: list[str]) -> list[Any]:
        """The files' ``DataFile`` objects, built from their footers as ``add_files``
        builds them."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        tbl = self.tables[name]
        return [parquet_file_to_data_file(tbl.io, tbl.metadata, p) for p in paths]

    def _summary(self, name: str) -> Any:
        snap = self.tables[name].current_snapshot()
        assert snap is not None and snap.summary is not None
        return snap.summary

    def fast_append(self, name: str, files: list[Any]) -> Any:
        """Commit already-written files: one fast append (to the table loaded before, as a
        writer holds it); returns the new snapshot's summary."""
        tbl = self.tables[name]
        with tbl.transaction() as tx, tx.update_snapshot().fast_append() as fa:
            for f in files:
                fa.append_data_file(f)
        return self._summary(name)

    def add_files(self, name: str, paths: list[str], check: bool = True) -> Any:
        """Commit already-written files through the public API (``Table.add_files``:
        duplicate check unless ``check`` is false, footers read, fast append); the new
        snapshot's summary."""
        self.tables[name].add_files(paths, check_duplicate_files=check)
        return self._summary(name)

    def close(self) -> None:
        self.catalog.engine.dispose()


# ---------------------------------------------------------------------------
# our side: a lakehouse, its REST catalog, its metadata writer
# ---------------------------------------------------------------------------
_STARTED = re.compile(r"serving the Iceberg REST catalog of .* on (http://\S+)")


class ServerProcess:
    """``python -m lakehouse serve-iceberg URL --port 0`` in a process of its own, its
    log (the startup line says the port; then a line per request) in ``log_path``.
    :meth:`stop` sends SIGTERM (SIGKILL if it has not stopped 10 s later); on Linux
    the process also gets SIGTERM when this one dies without stopping it."""

    def __init__(self, url: str, log_path: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed by stop)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lakehouse", "serve-iceberg", url, "--port", "0"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                preexec_fn=_die_with_parent(),
            )
        except BaseException:
            self._log.close()
            raise
        try:
            self.url = self._wait_url()
        except BaseException:
            self.stop()
            raise
        log.info("iceberg catalog server: pid %d, %s", self.proc.pid, self.url)

    def _tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def _wait_url(self) -> str:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            with open(self.log_path, "rb") as f:
                m = _STARTED.search(f.read().decode(errors="replace"))
            if m and _listening(m.group(1)):  # the line comes before the socket listens
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the Iceberg catalog server exited ({self.proc.returncode}): {self._tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Iceberg catalog server did not say its port in {SERVER_START_S:g} s: "
                    f"{self._tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    log.warning("the catalog server (pid %d) ignored SIGTERM", self.proc.pid)
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self._log.close()


def _listening(url: str) -> bool:
    host, _, port = url.removeprefix("http://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child SIGTERM when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is loaded before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGTERM)
    return lambda: prctl(1, sig, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


class Ours:
    def __init__(self, path: str) -> None:
        self.url = path
        self.lh = lakehouse.open(path)
        with self.lh.begin() as txn:
            txn.create_namespace(NS)
        self.server: Any = None  # a ServerProcess or a lakehouse.iceberg.Server
        self.server_pid: int | None = None
        self.catalog: Any = None
        self.http: Any = None  # a requests session for the HTTP floor
        self.base = ""

    def create(self, name: str) -> None:
        with self.lh.begin() as txn:
            txn.create_table(name, SCHEMA, PROPS, partition_by=["p"])

    def append(self, name: str, batch: pa.Table) -> int:
        with self.lh.begin() as txn:
            txn.append(name, batch)
        assert txn.committed_version is not None
        return txn.committed_version

    def files(self, name: str) -> int:
        return int(self.lh.table_stats(name).files)

    def write_metadata(self, name: str) -> str:
        from lakehouse import iceberg

        return str(iceberg.write_metadata(self.lh, name))

    def serve(self, how: str = "process", log_dir: str | None = None) -> None:
        """Start the REST catalog (``process``: ``python -m lakehouse serve-iceberg``;
        ``thread``: :class:`lakehouse.iceberg.Server` in this process) and its clients."""
        import requests
        from pyiceberg.catalog.rest import RestCatalog

        if how == "process":
            self.server = ServerProcess(
                self.url, os.path.join(log_dir or os.path.dirname(self.url), "server.log")
            )
            self.server_pid = self.server.proc.pid
        else:
            from lakehouse import iceberg

            self.server = iceberg.Server(self.url, port=0)
            self.server.start()
        self.base = self.server.url
        self.catalog = RestCatalog("lakehouse", uri=self.base)
        self.http = requests.Session()

    def config(self) -> Any:
        """``GET /v1/config``: one HTTP round trip to the server, nothing read."""
        r = self.http.get(f"{self.base}/v1/config", timeout=30)
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        try:
            if self.http is not None:
                self.http.close()
            if self.server is not None:
                self.server.stop()
        finally:
            self.lh.close()


def _metadata_summary(location: str) -> Any:
    """The current snapshot's summary in a metadata JSON file (ours)."""
    with open(location.removeprefix("file://"), "rb") as f:
        meta = json.load(f)
    snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    return snap["summary"]


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------
class Rounds:
    """The timed variants of every measurement, round by round (round 0 is the
    warm-up: run, checked, not kept); the variants' order rotates each round."""

    def __init__(self) -> None:
        self.procs: list[Any] = []  # psutil processes whose CPU seconds count
        self.i = 0
        self.times: dict[str, dict[str, list[tuple[float, float]]]] = {}
        self.per: dict[str, int] = {}  # calls per timed run (the figures are per call)

    def watch(self, pid: int | None = None) -> None:
        try:
            import psutil

            self.procs.append(psutil.Process(pid))
        except Exception:  # no psutil, or the process is gone: wall time only
            pass

    def _cpu(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self.procs)

    def run(self, key: str, variants: dict[str, Callable[[], Any]], per: int = 1) -> dict[str, Any]:
        """Time each variant once (in this round's order); their results by name."""
        names = list(variants)
        k = self.i % len(names)
        got: dict[str, Any] = {}
        self.per[key] = per
        for name in names[k:] + names[:k]:
            c, t = self._cpu(), time.perf_counter()
            got[name] = variants[name]()
            wall, cpu = time.perf_counter() - t, self._cpu() - c
            if self.i > 0:
                self.times.setdefault(key, {}).setdefault(name, []).append((wall, cpu))
        return got

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, by in self.times.items():
            per = self.per[key]
            variants = {}
            for name, ts in by.items():
                v: dict[str, Any] = {"wall_s": spread(w / per for w, _ in ts)}
                cpu = statistics.median(c / per for _, c in ts)
                if self.procs:
                    v["cpu_s"] = cpu
                variants[name] = v
            ratios = {}
            for num, den in RATIOS[key.split("_")[0]]:
                if num in by and den in by:
                    ratios[f"{num}/{den}"] = spread(
                        a[0] / b[0] for a, b in zip(by[num], by[den], strict=True)
                    )
            out[key] = {"variants": variants, "ratios": ratios}
        return out


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------
def build(ours: Ours | None, ice: PyIceberg, name: str, files: int, commits: int,
          sz: Sizes, start: int = 0, twins: tuple[str, ...] = ()) -> dict[str, float]:  # fmt: skip
    """Create ``name`` on both sides (and pyiceberg's ``twins``, committed the same
    files) holding ``files`` files in ``commits`` commits; seconds each side took."""
    spent = {"ours": 0.0, "pyiceberg": 0.0}
    for t in (name, *twins):
        ice.create(t)
    if ours is not None:
        ours.create(name)
    per_commit = -(-files // commits)
    done = 0
    while done < files:
        n = min(per_commit, files - done)
        batch = rows(start + done * sz.rows_per_file, n, sz.rows_per_file)
        t0 = time.perf_counter()
        data_files = ice.data_files(name, ice.write(batch, sz.rows_per_file))
        for t in (name, *twins):
            ice.fast_append(t, data_files)
        spent["pyiceberg"] += time.perf_counter() - t0
        if ours is not None:
            t0 = time.perf_counter()
            ours.append(name, batch)
            spent["ours"] += time.perf_counter() - t0
        done += n
    if ours is not None:
        check(f"{name}: our data files", ours.files(name), files)
    return spent


def _profile(fn: Callable[[], Any], top: int = 12) -> list[str]:
    """The ``top`` costliest functions of one call of ``fn`` (by own time), as lines."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    total = st.total_tt  # type: ignore[attr-defined]
    rows_ = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [f"total {total * 1e3:,.1f} ms"]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows_:
        where = file.split("site-packages/")[-1].split("/work/main/")[-1]
        lines.append(f"{tt * 1e3:8.1f} ms own, {ct * 1e3:8.1f} ms cum, {nc:>7} calls  "
                     f"{func} ({where}:{line})")  # fmt: skip
    return lines


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While the bench runs (main thread only), SIGTERM raises SystemExit so the
    ``finally`` blocks stop the server process and remove the bench root."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    sz = sizes_of(args)
    how = getattr(args, "iceberg_server", "process")
    started = time.perf_counter()
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    res: dict[str, Any] = {"sizes": asdict(sz), "server": how, "missing": None}
    res["loadavg"] = {"start": list(os.getloadavg())}  # the machine may be shared
    try:
        import pyiceberg
    except ImportError as exc:
        raise SystemExit(f"the iceberg bench needs pyiceberg ({exc})") from None
    res["pyiceberg"] = pyiceberg.__version__
    with _sigterm_exits():
        ice = PyIceberg(os.path.join(root, "pyiceberg"))
        ours: Ours | None = None
        try:
            try:
                from lakehouse.iceberg import Server, write_metadata  # noqa: F401

                ours = Ours(os.path.join(root, "lh"))
            except ImportError as exc:
                res["missing"] = (
                    f"lakehouse.iceberg is not available ({exc}): pyiceberg's side only"
                )
            _measure(res, ours, ice, sz, args, root)
        finally:
            try:
                if ours is not None:
                    ours.close()
            finally:
                ice.close()
                shutil.rmtree(root, ignore_errors=True)
    res["targets"] = targets(res)
    res["loadavg"]["end"] = list(os.getloadavg())
    res["elapsed_s"] = time.perf_counter() - started
    return res


def _measure(res: dict[str, Any], ours: Ours | None, ice: PyIceberg, sz: Sizes,
             args: argparse.Namespace, root: str) -> None:  # fmt: skip
    # the tables, untimed
    res["build_s"] = {
        "read": build(ours, ice, READ, sz.read_files, 1, sz),
        "load": build(ours, ice, LOAD, sz.load_files, sz.load_commits, sz, start=1 << 32,
                      twins=(NOCHECK, FAST)),
    }  # fmt: skip
    want_read = rows(0, sz.read_files, sz.rows_per_file)
    rounds = Rounds()
    rounds.watch()  # this process: the clients (and the server too when it is a thread)
    if ours is not None:
        same_rows("lakehouse read", ours.lh.read(READ), want_read)
        t0 = time.perf_counter()
        for name in (READ, LOAD):
            ours.write_metadata(name)
        res["build_s"]["write_metadata_first_s"] = time.perf_counter() - t0
        ours.serve(res["server"], root)
        if ours.server_pid is not None:
            res["server_pid"] = ours.server_pid
            rounds.watch(ours.server_pid)

    def loads(load: Callable[[], Any]) -> Callable[[], Any]:
        """``LOADS`` calls in a row (one is a millisecond or two: below the noise)."""

        def many() -> Any:
            for _ in range(LOADS - 1):
                load()
            return load()

        return many

    def both(**variants: Callable[[], Any] | None) -> dict[str, Callable[[], Any]]:
        return {k: v for k, v in variants.items() if v is not None}

    o = ours
    load_total = sz.load_files
    next_id = 1 << 40
    load_location = o.write_metadata(LOAD) if o is not None else None
    for i in range(sz.repeats + 1):
        rounds.i = i
        got = rounds.run("read", both(
            sqlcatalog=lambda: ice.catalog.load_table(READ).scan().to_arrow(),
            rest=(lambda: o.catalog.load_table(READ).scan().to_arrow()) if o else None,
        ))  # fmt: skip
        same_rows("pyiceberg read (SqlCatalog)", got[SQL], want_read)
        if o is not None:
            same_rows("pyiceberg read (our REST catalog)", got[REST], want_read)
        got = rounds.run("load", both(
            sqlcatalog=loads(lambda: ice.catalog.load_table(LOAD)),
            rest=loads(lambda: o.catalog.load_table(LOAD)) if o else None,
            http_floor=loads(o.config) if o else None,
        ), per=LOADS)  # fmt: skip
        want = (load_total, load_total * sz.rows_per_file)
        check("SqlCatalog load: total files, records",
              _totals(got[SQL].current_snapshot().summary)[1:], want)  # fmt: skip
        if o is not None:
            check("REST load: metadata location", got[REST].metadata_location, load_location)
            check("REST load: total files, records",
                  _totals(got[REST].current_snapshot().summary)[1:], want)  # fmt: skip
            check(
                "GET /v1/config: has defaults, overrides",
                {"defaults", "overrides"} <= set(got[FLOOR]),
                True,
            )
        for n in sz.append_files:
            batch = rows(next_id, n, sz.rows_per_file)
            next_id += n * sz.rows_per_file
            paths = ice.write(batch, sz.rows_per_file)
            prebuilt = ice.data_files(FAST, paths)
            if o is not None:
                o.append(LOAD, batch)
            got = rounds.run(f"commit_{n}", both(
                add_files=partial(ice.add_files, LOAD, paths),
                add_files_nocheck=partial(ice.add_files, NOCHECK, paths, False),
                fast_append=partial(ice.fast_append, FAST, prebuilt),
                write_metadata=(lambda: o.write_metadata(LOAD)) if o else None,
            ))  # fmt: skip
            load_total += n
            want3 = (n, load_total, load_total * sz.rows_per_file)
            for v in (ADD, ADD_NOCHECK):
                check(f"pyiceberg {v} of {n}: added, total files, records",
                      _totals(got[v]), want3)  # fmt: skip
            check(f"pyiceberg fast append of {n}: added, total files, records",
                  _totals(got[FAST_APPEND]), want3)  # fmt: skip
            if o is not None:
                check(f"write_metadata of {n} more: added, total files, records",
                      _totals(_metadata_summary(got[OURS])), want3)  # fmt: skip
                load_location = got[OURS]
    # the loads, once, plan the same files (the metadata is really there, not just its summary)
    planned = len(list(ice.catalog.load_table(LOAD).scan().plan_files()))
    check("SqlCatalog: files planned", planned, load_total)
    if o is not None:
        check("REST: files planned", len(list(o.catalog.load_table(LOAD).scan().plan_files())),
              planned)  # fmt: skip
    res["load_files_at_end"] = load_total
    res["measurements"] = rounds.summary()
    if getattr(args, "iceberg_profile", False) and o is not None:
        res["profile"] = _profiles(o, ice, sz, next_id)


def _profiles(ours: Ours, ice: PyIceberg, sz: Sizes, next_id: int) -> dict[str, list[str]]:
    n = sz.append_files[-1]
    batch = rows(next_id, n, sz.rows_per_file)
    ours.append(LOAD, batch)
    paths = ice.write(batch, sz.rows_per_file)
    out = {
        f"write_metadata ({n} more files)": _profile(lambda: ours.write_metadata(LOAD)),
        f"pyiceberg add_files ({n} more files)": _profile(lambda: ice.add_files(LOAD, paths)),
        "REST load_table (client side)": _profile(lambda: ours.catalog.load_table(LOAD)),
    }
    what = "IcebergCatalog.load (the server's work without HTTP)"
    try:
        from lakehouse.iceberg.catalog import IcebergCatalog

        cat = IcebergCatalog(ours.url)  # as the server opens it: a reader of the URL
        ns, table = LOAD.split(".")
        out[f"{what}, first"] = _profile(lambda: cat.load(ns, table))
        out[f"{what}, again"] = _profile(lambda: cat.load(ns, table))
        cat.close()
    except Exception as exc:  # its constructor is not part of the contract
        out[what] = [f"n/a: {type(exc).__name__}: {exc}"]
    return out


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    sz, ms = res["sizes"], res.get("measurements", {})
    out = []
    for kind, what, num, den, bound in TARGETS:
        keys = [f"commit_{n}" for n in sz["append_files"]] if kind == "commit" else [kind]
        for key in keys:
            s = ms.get(key, {}).get("ratios", {}).get(f"{num}/{den}")
            v = None if s is None else s["median"]
            n = key.split("_")[-1]
            out.append({
                "key": key if kind != "commit" else f"{key}_{den}", "value": v, "spread": s,
                "target": f"<= {bound:g}x",
                "what": what.format(read=f"{sz['read_files']:,}", load=f"{sz['load_files']:,}",
                                    n=f"{int(n):,}" if n.isdigit() else n),
                "pass": None if v is None else v <= bound,
            })  # fmt: skip
    return out


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------
def _ms(s: float | None) -> str:
    if s is None:
        return "n/a"
    v = s * 1e3
    return f"{v:,.2f}" if v < 10 else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _side(v: dict[str, Any] | None) -> str:
    """min / median ms of a variant."""
    if v is None:
        return "n/a"
    w = v["wall_s"]
    return f"{_ms(w['min'])} / {_ms(w['median'])}"


def _x(s: dict[str, float] | None) -> tuple[str, str]:
    """(median, min-max) of a ratio."""
    if s is None:
        return "n/a", "n/a"
    return f"{s['median']:.3g}x", f"{s['min']:.3g}-{s['max']:.3g}"


def report(res: dict[str, Any]) -> str:
    sz, ms = res["sizes"], res.get("measurements", {})
    server = {
        "process": "`python -m lakehouse serve-iceberg` in its own process",
        "thread": "lakehouse.iceberg.Server in a thread of the bench",
    }[res["server"]]
    lines = [
        f"iceberg: pyiceberg {res['pyiceberg']} against itself; our server: {server}; "
        f"{sz['repeats']} rounds after a warm-up, order rotating; ms min / median; ratios "
        f"taken per round: median (spread = min-max); CPU: this process + the server; "
        f"{sz['rows_per_file']} rows per file",
        "",
        "| measurement | anchor (pyiceberg) | ms min / median | ours | ms min / median "
        "| ours / anchor | spread | CPU ratio | target |",
        "|:---|:---|---:|:---|---:|---:|:---|---:|:---|",
    ]
    bound = {(k, num, den): b for k, _, num, den, b in TARGETS}
    labels = {
        "read": f"read {sz['read_files']:,} files (load + scan)",
        "load": f"load_table, {sz['load_files']:,} files (per load, {LOADS} in a row, warm)",
    }
    for key, m in ms.items():
        kind = key.split("_")[0]
        label = labels.get(key) or f"commit {int(key.split('_')[1]):,} more files"
        for num, den in RATIOS[kind]:
            if num == FLOOR:
                continue
            v = m["variants"]
            a, b = v.get(den), v.get(num)
            r, rr = _x(m["ratios"].get(f"{num}/{den}"))
            cpu = "n/a"
            if a and b and "cpu_s" in a and a["cpu_s"] > 0:
                cpu = f"{b['cpu_s'] / a['cpu_s']:.3g}x"
            t = bound.get((kind, num, den))
            tgt = "-" if t is None else f"≤ {t:g}x"
            lines.append(f"| {label} | {NAMES[den].removeprefix('pyiceberg ')} | {_side(a)} "
                         f"| {NAMES[num]} | {_side(b)} | {r} | {rr} | {cpu} | {tgt} |")  # fmt: skip
    load = ms.get("load", {})
    floor, share = (
        load.get("variants", {}).get(FLOOR),
        load.get("ratios", {}).get(f"{FLOOR}/{REST}"),
    )
    if floor is not None and share is not None:
        lines.append(
            f"\nHTTP round-trip floor: GET /v1/config, {LOADS} in a row, {_side(floor)} ms per "
            f"request = {share['median']:.0%} of our load_table (per round "
            f"{share['min']:.0%}-{share['max']:.0%}): what any REST load pays for the protocol"
        )
    lines.append(
        "\ncommit: ours = write_metadata of the new version (the lakehouse append untimed); "
        "pyiceberg add_files = Table.add_files(paths) (duplicate check: a scan of the table's "
        "manifests; footers read; fast append), also without the duplicate check; fast "
        "append = DataFile objects built beforehand from the footers (untimed)"
    )
    lines.append("\ntargets (issue 24; ratio per round, median (min-max)):")
    for t in res["targets"]:
        v = "n/a" if t["spread"] is None else "{} ({})".format(*_x(t["spread"]))
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[t["pass"]]
        lines.append(f"- {t['what']}: {v} (target {t['target']}): {verdict}")
    if res.get("missing"):
        lines.append(f"\n{res['missing']}")
    b = res.get("build_s", {})
    if b:
        parts = [f"{k} table: ours {v['ours']:,.1f} s, pyiceberg {v['pyiceberg']:,.1f} s"
                 for k, v in b.items() if isinstance(v, dict)]  # fmt: skip
        if "write_metadata_first_s" in b:
            parts.append(f"first write_metadata of both {b['write_metadata_first_s']:,.1f} s")
        lines.append("\nbuilt (untimed above): " + "; ".join(parts))
    for what, prof in res.get("profile", {}).items():
        lines.append(f"\nprofile of one {what}:")
        lines += ["    " + x for x in prof]
    la = res.get("loadavg", {})
    took = f"\niceberg bench took {res['elapsed_s']:,.0f} s"
    if "end" in la:
        took += "; load average (1, 5, 15 min) at the start {}, at the end {}".format(
            *(", ".join(f"{x:.2f}" for x in la[k]) for k in ("start", "end"))
        )
    lines.append(took)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
def add_arguments(p: Any) -> None:
    d = Sizes()
    p.add_argument("--iceberg-read-files", type=int, default=d.read_files,
                   help="files of the table read (default: %(default)s)")  # fmt: skip
    p.add_argument("--iceberg-load-files", type=int, default=d.load_files,
                   help="files of the table loaded, then appended to")  # fmt: skip
    p.add_argument("--iceberg-load-commits", type=int, default=d.load_commits,
                   help="commits that build it (default: %(default)s)")  # fmt: skip
    p.add_argument("--iceberg-append-files", default=",".join(map(str, d.append_files)),
                   help="files of each measured new version (default: %(default)s)")  # fmt: skip
    p.add_argument("--iceberg-rows-per-file", type=int, default=d.rows_per_file)
    p.add_argument("--iceberg-repeats", "--repeats", dest="iceberg_repeats", type=int,
                   default=d.repeats,
                   help="rounds after the warm-up (default: %(default)s)")  # fmt: skip
    p.add_argument("--iceberg-server", choices=("process", "thread"), default="process",
                   help="our REST catalog: `python -m lakehouse serve-iceberg` in its "
                   "own process (default), or lakehouse.iceberg.Server in a thread of "
                   "the bench")  # fmt: skip
    p.add_argument("--iceberg-profile", action="store_true",
                   help="profile one write_metadata and one load (ours)")  # fmt: skip


def sizes_of(args: argparse.Namespace) -> Sizes:
    if getattr(args, "quick", False):
        return QUICK
    try:
        appends = tuple(int(x) for x in args.iceberg_append_files.split(",") if x.strip())
    except ValueError:
        raise SystemExit(
            f"--iceberg-append-files must be integers, not {args.iceberg_append_files!r}"
        ) from None
    sz = replace(Sizes(), read_files=args.iceberg_read_files,
                 load_files=args.iceberg_load_files, load_commits=args.iceberg_load_commits,
                 append_files=appends, rows_per_file=args.iceberg_rows_per_file,
                 repeats=args.iceberg_repeats)  # fmt: skip
    for what, v in (("read-files", sz.read_files), ("load-files", sz.load_files),
                    ("load-commits", sz.load_commits), ("rows-per-file", sz.rows_per_file),
                    ("repeats", sz.repeats), *(("append-files", n) for n in appends)):  # fmt: skip
        if v <= 0:
            raise SystemExit(f"--iceberg-{what} must be > 0")
    if not appends:
        raise SystemExit("--iceberg-append-files names no size")
    if len(set(appends)) != len(appends):
        raise SystemExit("--iceberg-append-files names a size twice")
    return sz
