"""``python -m lakehouse.bench --only iceberg``: the Iceberg catalog against pyiceberg's own.

pyiceberg (the reader every measurement uses) against itself: on one side a
lakehouse table served by our REST catalog (:class:`lakehouse.iceberg.Server`,
in a background thread of this process, through a reader of the lakehouse's
URL) or its metadata written by :func:`lakehouse.iceberg.write_metadata`; on
the other a table of pyiceberg's own ``SqlCatalog`` (sqlite in the bench
root), with the same schema (``id``, ``p``, ``name``, ``amount``), the same
identity partition on ``p``, the same rows and the same number of data files
(one file of ``--iceberg-rows-per-file`` rows per partition). Both tables are
built untimed: ours by appends partitioned on ``p`` (one file per partition,
auto-compaction and inlining off), pyiceberg's by Parquet files written with
pyarrow and committed as ``DataFile`` objects in one fast append per commit.

* **read**: ``load_table(t).scan().to_arrow()`` of a table of
  ``--iceberg-read-files`` files (one commit), ``RestCatalog`` against
  ``SqlCatalog``; both results, sorted by ``id``, must equal the rows
  ``lh.read`` returns;
* **load**: ``load_table(t)`` of a table of ``--iceberg-load-files`` files
  built by ``--iceberg-load-commits`` commits (ours: its metadata written
  once, untimed, before), 20 in a row per measurement (the figure is per
  load); both must report the same total files and records
  (and, once, plan the same number of files);
* **commit N**: one more version appending N files (``--iceberg-append-files``,
  default 100 and 1,000) to that table: ours ``write_metadata`` of the new
  version (the append itself untimed), pyiceberg's fast append of N
  ``DataFile`` objects built beforehand from the files' footers (untimed: the
  cheapest pyiceberg commit of already-written files; ``add_files`` also
  reads the footers). Both snapshots must say N added files and the same
  total.

Each measurement is a pair, the order alternating round to round
(``--iceberg-repeats`` rounds after a warm-up one); the ratio (ours /
pyiceberg) is taken per round and reported as median (min-max) with the
medians of wall and CPU seconds. ``--iceberg-profile`` adds the top costs of
one ``write_metadata`` and of one load (client side through REST, and the
catalog's own work without HTTP) to the results and the report.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lakehouse

log = logging.getLogger("lakehouse.bench")
NS = "bench"
READ, LOAD = f"{NS}.read", f"{NS}.load"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("name", pa.string()),
                    ("amount", pa.float64())])  # fmt: skip
PROPS = {"compaction.auto": "false", "inline.max_rows": "0"}
LOADS = 20  # loads per timed pair of the load measurement
#: the issue's targets: (key, what, bound); every one is ours / pyiceberg <= bound
TARGETS = (
    ("read", "pyiceberg reads {read} files: our REST catalog / its SqlCatalog", 1.2),
    ("load", "load_table of {load} files: our REST catalog / its SqlCatalog", 1.0),
    ("commit", "one version of {n} more files: write_metadata / pyiceberg's fast append", 0.2),
)


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
    """:func:`lakehouse.spark.bench_common.check` (imported when called: it imports pyspark)."""
    from lakehouse.spark import bench_common

    bench_common.check(what, got, want)


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

    def data_files(self, name: str, batch: pa.Table, per_file: int) -> list[Any]:
        """Write ``batch`` as one Parquet file per ``per_file`` rows (one partition
        each) and return their ``DataFile`` objects, built from the footers as
        ``add_files`` builds them."""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        tbl = self.tables[name]
        paths = []
        for off in range(0, batch.num_rows, per_file):
            path = os.path.join(self.data, f"{self.written:08d}.parquet")
            pq.write_table(batch.slice(off, per_file), path)
            paths.append(path)
            self.written += 1
        return [parquet_file_to_data_file(tbl.io, tbl.metadata, p) for p in paths]

    def fast_append(self, name: str, files: list[Any]) -> Any:
        """Commit already-written files: one fast append (to the table loaded before, as a
        writer holds it); returns the new snapshot's summary."""
        tbl = self.tables[name]
        with tbl.transaction() as tx, tx.update_snapshot().fast_append() as fa:
            for f in files:
                fa.append_data_file(f)
        snap = tbl.current_snapshot()
        assert snap is not None and snap.summary is not None
        return snap.summary

    def close(self) -> None:
        self.catalog.engine.dispose()


# ---------------------------------------------------------------------------
# our side: a lakehouse, its REST catalog, its metadata writer
# ---------------------------------------------------------------------------
class Ours:
    def __init__(self, path: str) -> None:
        self.url = path
        self.lh = lakehouse.open(path)
        with self.lh.begin() as txn:
            txn.create_namespace(NS)
        self.server: Any = None
        self.catalog: Any = None

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

    def serve(self) -> None:
        from pyiceberg.catalog.rest import RestCatalog

        from lakehouse import iceberg

        self.server = iceberg.Server(self.url, port=0)
        self.server.start()
        self.catalog = RestCatalog("lakehouse", uri=self.server.url)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.lh.close()


def _metadata_summary(location: str) -> Any:
    """The current snapshot's summary in a metadata JSON file (ours)."""
    with open(location.removeprefix("file://"), "rb") as f:
        meta = json.load(f)
    snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    return snap["summary"]


def _nothing() -> None:
    """Our side of a pair when lakehouse.iceberg is not there (its times are dropped)."""


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------
def build(ours: Ours | None, ice: PyIceberg, name: str, files: int, commits: int,
          sz: Sizes, start: int = 0) -> dict[str, float]:  # fmt: skip
    """Create ``name`` on both sides holding ``files`` files in ``commits`` commits;
    seconds each side took."""
    spent = {"ours": 0.0, "pyiceberg": 0.0}
    ice.create(name)
    if ours is not None:
        ours.create(name)
    per_commit = -(-files // commits)
    done = 0
    while done < files:
        n = min(per_commit, files - done)
        batch = rows(start + done * sz.rows_per_file, n, sz.rows_per_file)
        t0 = time.perf_counter()
        ice.fast_append(name, ice.data_files(name, batch, sz.rows_per_file))
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


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    sz = sizes_of(args)
    started = time.perf_counter()
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    res: dict[str, Any] = {"sizes": asdict(sz), "missing": None}
    try:
        import pyiceberg
    except ImportError as exc:
        raise SystemExit(f"the iceberg bench needs pyiceberg ({exc})") from None
    res["pyiceberg"] = pyiceberg.__version__
    ice = PyIceberg(os.path.join(root, "pyiceberg"))
    ours: Ours | None = None
    try:
        from lakehouse.iceberg import Server, write_metadata  # noqa: F401

        ours = Ours(os.path.join(root, "lh"))
    except ImportError as exc:
        res["missing"] = f"lakehouse.iceberg is not available ({exc}): pyiceberg's side only"
    try:
        _measure(res, ours, ice, sz, args)
    finally:
        if ours is not None:
            ours.close()
        ice.close()
        shutil.rmtree(root, ignore_errors=True)
    res["targets"] = targets(res)
    res["elapsed_s"] = time.perf_counter() - started
    return res


def _measure(res: dict[str, Any], ours: Ours | None, ice: PyIceberg, sz: Sizes,
             args: argparse.Namespace) -> None:  # fmt: skip
    from lakehouse.spark.bench_common import Clock, Pairs, summary

    # the tables, untimed
    res["build_s"] = {
        "read": build(ours, ice, READ, sz.read_files, 1, sz),
        "load": build(ours, ice, LOAD, sz.load_files, sz.load_commits, sz, start=1 << 32),
    }
    want_read = rows(0, sz.read_files, sz.rows_per_file)
    if ours is not None:
        same_rows("lakehouse read", ours.lh.read(READ), want_read)
        t0 = time.perf_counter()
        for name in (READ, LOAD):
            ours.write_metadata(name)
        res["build_s"]["write_metadata_first_s"] = time.perf_counter() - t0
        ours.serve()
    clock = Clock(None)
    try:
        import psutil

        clock.procs = [psutil.Process()]  # this process: the server thread is in it too
    except ImportError:
        pass
    keys = ["read", "load", *(f"commit_{n}" for n in sz.append_files)]
    pairs = Pairs(clock, keys)

    def ours_read() -> pa.Table:
        assert ours is not None
        return ours.catalog.load_table(READ).scan().to_arrow()

    def ours_load() -> Any:
        assert ours is not None
        return ours.catalog.load_table(LOAD)

    def loads(load: Callable[[], Any]) -> Callable[[], Any]:
        """``LOADS`` loads in a row (one is a millisecond or two: below the noise)."""

        def many() -> Any:
            for _ in range(LOADS - 1):
                load()
            return load()

        return many

    load_total = sz.load_files
    next_id = 1 << 40
    load_location = ours.write_metadata(LOAD) if ours is not None else None
    for i in range(sz.repeats + 1):
        pairs.round(i)
        a, b = pairs.run(
            "read",
            lambda: ice.catalog.load_table(READ).scan().to_arrow(),
            ours_read if ours else _nothing,
        )
        same_rows("pyiceberg read (SqlCatalog)", a, want_read)
        if ours is not None:
            same_rows("pyiceberg read (our REST catalog)", b, want_read)
        a, b = pairs.run("load", loads(lambda: ice.catalog.load_table(LOAD)),
                         loads(ours_load) if ours else _nothing)  # fmt: skip
        check("SqlCatalog load: total files", _totals(a.current_snapshot().summary)[1], load_total)
        if ours is not None:
            check("REST load: metadata location", b.metadata_location, load_location)
            got, want = (_totals(t.current_snapshot().summary)[1:] for t in (b, a))
            check("REST load: total files, records", got, want)
        for n in sz.append_files:
            batch = rows(next_id, n, sz.rows_per_file)
            next_id += n * sz.rows_per_file
            files = ice.data_files(LOAD, batch, sz.rows_per_file)
            if ours is not None:
                ours.append(LOAD, batch)
            a, b = pairs.run(
                f"commit_{n}",
                lambda files=files: ice.fast_append(LOAD, files),  # type: ignore[misc]
                (lambda: ours.write_metadata(LOAD)) if ours is not None else _nothing,
            )
            load_total += n
            check(f"pyiceberg commit of {n}: added, total files", _totals(a)[:2], (n, load_total))
            if ours is not None:
                mine = _totals(_metadata_summary(b))
                check(f"write_metadata of {n} more: added, total files, records", mine, _totals(a))
                load_location = b
    # the loads, once, plan the same files (the metadata is really there, not just its summary)
    a = ice.catalog.load_table(LOAD)
    planned = len(list(a.scan().plan_files()))
    check("SqlCatalog: files planned", planned, load_total)
    if ours is not None:
        check("REST: files planned", len(list(ours_load().scan().plan_files())), planned)
    res["load_files_at_end"] = load_total
    per_load = (
        [(w / LOADS, c / LOADS) for w, c in pairs.times["load"][0]],
        [(w / LOADS, c / LOADS) for w, c in pairs.times["load"][1]],
    )
    pairs.times["load"] = per_load  # each pair timed LOADS loads: the figures are per load
    res["pairs"] = {k: summary(*v) for k, v in pairs.times.items() if v[0]}
    if ours is None:
        for v in res["pairs"].values():
            for k in ("lakehouse_s", "ratio", "ratio_range", "cpu_lakehouse_s", "cpu_ratio"):
                v.pop(k, None)
    if getattr(args, "iceberg_profile", False) and ours is not None:
        res["profile"] = _profiles(ours, sz, next_id)


def _profiles(ours: Ours, sz: Sizes, next_id: int) -> dict[str, list[str]]:
    n = sz.append_files[-1]
    ours.append(LOAD, rows(next_id, n, sz.rows_per_file))
    out = {
        f"write_metadata ({n} more files)": _profile(lambda: ours.write_metadata(LOAD)),
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
    sz, pairs = res["sizes"], res.get("pairs", {})
    out = []
    for key, what, bound in TARGETS:
        names = [f"commit_{n}" for n in sz["append_files"]] if key == "commit" else [key]
        for name in names:
            p = pairs.get(name, {})
            v = p.get("ratio")
            n = name.split("_")[-1]
            out.append({
                "key": name, "value": v, "range": p.get("ratio_range"), "target": f"<= {bound:g}x",
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


def report(res: dict[str, Any]) -> str:
    sz = res["sizes"]
    labels = {
        "read": f"read {sz['read_files']:,} files (load + scan)",
        "load": f"load_table, {sz['load_files']:,} files (per load, {LOADS} in a row)",
    }
    labels.update({f"commit_{n}": f"commit {n:,} more files" for n in sz["append_files"]})
    lines = [
        f"iceberg: pyiceberg {res['pyiceberg']} against itself; {sz['repeats']} rounds after a "
        f"warm-up, wall ms median (min-max), CPU ms median (this process, server included); "
        f"{sz['rows_per_file']} rows per file",
        "",
        "| measurement | pyiceberg SqlCatalog ms | ours ms | CPU ms (SqlCatalog / ours) "
        "| ours / SqlCatalog |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, p in res.get("pairs", {}).items():
        a, b = p["plain_s"], p.get("lakehouse_s")
        ours = "n/a" if b is None else f"{_ms(b['median'])} ({_ms(b['min'])}-{_ms(b['max'])})"
        rr = p.get("ratio_range")
        ratio = "n/a" if rr is None else f"{p['ratio']:.3g} ({rr[0]:.3g}-{rr[1]:.3g})"
        cpu = f"{_ms(p.get('cpu_plain_s'))} / {_ms(p.get('cpu_lakehouse_s'))}"
        lines.append(f"| {labels.get(key, key)} | {_ms(a['median'])} ({_ms(a['min'])}-"
                     f"{_ms(a['max'])}) | {ours} | {cpu} | {ratio} |")  # fmt: skip
    lines.append(
        "\nours: REST = our catalog server through pyiceberg's RestCatalog; commit = "
        "write_metadata of the new version. pyiceberg: commit = one fast append of "
        "DataFile objects built beforehand (its cheapest commit of written files)"
    )
    lines.append("\ntargets (issue 24):")
    for t in res["targets"]:
        v = "n/a" if t["value"] is None else f"{t['value']:.3g}x"
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
    lines.append(f"\niceberg bench took {res['elapsed_s']:,.0f} s")
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
    return sz
