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

The parts: :mod:`~lakehouse.bench.iceberg_tables` (the tables' names, schema, rows
and checks), :mod:`~lakehouse.bench.iceberg_anchor` (pyiceberg's ``SqlCatalog``),
:mod:`~lakehouse.bench.iceberg_server` (our side and its server process),
:mod:`~lakehouse.bench.iceberg_report` (the rounds, targets and report); this
module builds the tables, runs the rounds and holds the options.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from lakehouse.bench.iceberg_anchor import PyIceberg
from lakehouse.bench.iceberg_report import (
    ADD,
    ADD_NOCHECK,
    FAST_APPEND,
    FLOOR,
    LOADS,
    OURS,
    REST,
    SQL,
    Rounds,
    profile,
    report,
    targets,
)
from lakehouse.bench.iceberg_server import Ours, ServerProcess
from lakehouse.bench.iceberg_tables import (
    FAST,
    LOAD,
    NOCHECK,
    READ,
    check,
    metadata_summary,
    rows,
    same_rows,
    totals,
)

#: what ``lakehouse.bench`` and the tests use of the split modules, here as before the split
__all__ = ["FAST", "LOAD", "READ", "Ours", "PyIceberg", "Rounds", "ServerProcess", "report",
           "rows", "same_rows"]  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    read_files: int = 1_000
    load_files: int = 10_000
    load_commits: int = 10
    append_files: tuple[int, ...] = (100, 1_000)
    rows_per_file: int = 10
    repeats: int = 5


QUICK = Sizes(read_files=50, load_files=200, load_commits=2, append_files=(10, 50), repeats=2)


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
              totals(got[SQL].current_snapshot().summary)[1:], want)  # fmt: skip
        if o is not None:
            check("REST load: metadata location", got[REST].metadata_location, load_location)
            check("REST load: total files, records",
                  totals(got[REST].current_snapshot().summary)[1:], want)  # fmt: skip
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
                      totals(got[v]), want3)  # fmt: skip
            check(f"pyiceberg fast append of {n}: added, total files, records",
                  totals(got[FAST_APPEND]), want3)  # fmt: skip
            if o is not None:
                check(f"write_metadata of {n} more: added, total files, records",
                      totals(metadata_summary(got[OURS])), want3)  # fmt: skip
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
        f"write_metadata ({n} more files)": profile(lambda: ours.write_metadata(LOAD)),
        f"pyiceberg add_files ({n} more files)": profile(lambda: ice.add_files(LOAD, paths)),
        "REST load_table (client side)": profile(lambda: ours.catalog.load_table(LOAD)),
    }
    what = "IcebergCatalog.load (the server's work without HTTP)"
    try:
        from lakehouse.iceberg.catalog import IcebergCatalog

        cat = IcebergCatalog(ours.url)  # as the server opens it: a reader of the URL
        ns, table = LOAD.split(".")
        out[f"{what}, first"] = profile(lambda: cat.load(ns, table))
        out[f"{what}, again"] = profile(lambda: cat.load(ns, table))
        cat.close()
    except Exception as exc:  # its constructor is not part of the contract
        out[what] = [f"n/a: {type(exc).__name__}: {exc}"]
    return out


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
