"""``python -m lakehouse.bench --only scale``: many small files, against pylance and DuckLake.

Every system gets the same appends of 100 rows (``id``, ``ts``, ``name``,
``amount``; ids grow with the appends, append ``k`` is on day ``k // 10``),
one commit and one data file each, in fresh directories under the bench
root (local disk), side by side in the same run: the systems take turns in
chunks of ``--scale-chunk`` appends (the one going first rotating), so a
noisy neighbour slows them alike. At each checkpoint (100, 1,000 and
10,000 files; ``--full`` adds 30,000) every system is measured, one after
the other:

* **append ms**: the median of the last ``--scale-tail`` appends before the
  checkpoint (ours commits durably, with fsync; pylance does not fsync;
  DuckLake commits through DuckDB's catalog file);
* **read latest ms**: every row (ours ``lh.read``, pylance
  ``lance.dataset(uri).to_table()``, DuckLake ``SELECT *`` into Arrow);
* **``id = x`` ms**: the one row with that id, for ``--scale-reads`` ids
  spread over the table (ours ``read(where="id = x")``, pylance
  ``to_table(filter=...)``, DuckLake ``WHERE id = ?``);
* **version 1 ms**: every row as of the first version (one file).

Median of ``--scale-reads`` reads each. Our table for these has
auto-compaction off (``compaction.auto = "false"``); two more tables of ours
take the same appends: one with the defaults (auto-compaction on), whose
read latest is measured, and one partitioned by ``day(ts)`` (1,000 days at
10,000 files), whose read of one day (10 files) is measured at every
checkpoint. After the last checkpoint our first table gets
``alter_table(sort_keys=["id"])`` and ``compact``, and ``id = x`` is
measured again. Whatever the lakehouse does not support yet (partitioning,
sort keys) is reported as n/a, not as a failure.

A system whose appends and reads have taken ``--scale-budget`` seconds, or
would take longer to reach the next checkpoint (extrapolated from its
latest appends), stops there; the report says where. DuckLake runs in its
own virtualenv (``make .venv-ducklake``, see
:mod:`lakehouse.bench.ducklake_side`); without it the report says it is not
available.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import logging
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import IO, Any

import pyarrow as pa

import lakehouse
from lakehouse.bench.data import rotate, timed
from lakehouse.bench.ducklake_side import EPOCH, SCHEMA, batch

log = logging.getLogger("lakehouse.bench")
TABLE = "bench.t"
OURS, DEFAULTS, PARTITIONED = "ours", "ours, defaults", "ours, day-partitioned"
ANCHOR_NAMES = ("pylance", "ducklake")
NO_AUTO = {"compaction.auto": "false"}
#: the issue's targets: (key, what, bound, "<=" or ">=")
TARGETS = (
    ("partition_read", "read of one day (partitioned): {big} files / {small} files", 2.0, "<="),
    ("point_vs_lance", "`id = x` at {big} files (auto-compaction off): ours / pylance", 0.1, "<="),
    ("point_compacted", "`id = x` compacted with sort_keys=[id] / before compaction", 0.1, "<="),
    ("latest_vs_lance", "read latest at {big} files, defaults: ours / pylance", 1.0, "<="),
    ("latest_vs_ducklake", "read latest at {big} files, defaults: ours / ducklake", 0.5, "<="),
    ("first_growth", "version 1 at {big} files / at {small} files (ours)", 1.5, "<="),
    ("append_vs_lance", "appends at {big} files: ours commits/s / pylance commits/s", 10.0, ">="),
)


@dataclass(frozen=True)
class Sizes:
    checkpoints: tuple[int, ...] = (100, 1_000, 10_000)
    rows: int = 100
    per_day: int = 10  # appends per day in the partitioned table
    reads: int = 5
    chunk: int = 50  # appends one system makes before the next takes its turn
    tail: int = 50  # the append figure is the median of this many last appends
    budget_s: float = 600.0  # per system


QUICK = Sizes(checkpoints=(20, 50), reads=2, chunk=10, tail=10, budget_s=120.0)
FULL_EXTRA = 30_000


class Unsupported(Exception):
    """What a table of ours needs is not in the lakehouse yet (the report says n/a)."""


def day_where(d: int) -> str:
    lo, hi = (EPOCH + datetime.timedelta(days=x) for x in (d, d + 1))
    return f"ts >= '{lo:%Y-%m-%d}' AND ts < '{hi:%Y-%m-%d}'"


def point_ids(files: int, sz: Sizes) -> list[int]:
    """``sz.reads`` ids spread over a table of ``files`` appends (the same for every system)."""
    total = files * sz.rows
    return [min(total - 1, (2 * j + 1) * total // (2 * sz.reads) + 37) for j in range(sz.reads)]


# ---------------------------------------------------------------------------
# the systems
# ---------------------------------------------------------------------------
class Side:
    """One table of one system, driven through appends and measurements."""

    name = ""
    #: what :meth:`measure` returns: latest, point, first, day
    measures: tuple[str, ...] = ("latest", "point", "first")

    def __init__(self, path: str, sz: Sizes) -> None:
        self.path, self.sz = path, sz

    def create(self) -> None:
        """Create the table holding batch 0 (its first version)."""
        raise NotImplementedError

    def appends(self, start: int, stop: int) -> list[float]:
        """Append batches ``start..stop-1``, one commit each; seconds of each."""
        times = []
        for k in range(start, stop):
            rows = batch(k, self.sz.rows, self.sz.per_day)
            t0 = time.perf_counter()
            self.append(rows)
            times.append(time.perf_counter() - t0)
        return times

    def append(self, rows: pa.Table) -> None:
        raise NotImplementedError

    def read_latest(self) -> pa.Table:
        raise NotImplementedError

    def read_point(self, x: int) -> pa.Table:
        raise NotImplementedError

    def read_first(self) -> pa.Table:
        raise NotImplementedError

    def read_day(self, d: int) -> pa.Table:
        raise NotImplementedError

    def measure(self, files: int, ids: list[int], day: int) -> dict[str, float]:
        """Median seconds of each of :attr:`measures` at ``files`` appends."""
        sz, out = self.sz, {}
        day_rows = min(sz.per_day, max(0, files - day * sz.per_day)) * sz.rows
        reads: dict[str, tuple[list[Callable[[], pa.Table]], int]] = {
            "latest": ([self.read_latest] * sz.reads, files * sz.rows),
            "point": ([functools.partial(self.read_point, x) for x in ids], 1),
            "first": ([self.read_first] * sz.reads, sz.rows),
            "day": ([functools.partial(self.read_day, day)] * sz.reads, day_rows),
        }
        for what in self.measures:
            fns, want = reads[what]
            times = []
            for fn in fns:
                t, rows = timed(fn)
                if rows.num_rows != want:
                    raise AssertionError(
                        f"{self.name}: read {what} at {files} files returned {rows.num_rows} "
                        f"rows, expected {want}"
                    )
                times.append(t)
            out[what] = statistics.median(times)
        return out

    def close(self) -> None:
        pass


class Ours(Side):
    """A lakehouse table: ``OURS`` (auto-compaction off), ``DEFAULTS`` or ``PARTITIONED``."""

    def __init__(self, path: str, sz: Sizes, name: str) -> None:
        super().__init__(path, sz)
        self.name = name
        self.measures = {OURS: ("latest", "point", "first"), DEFAULTS: ("latest",),
                         PARTITIONED: ("day",)}[name]  # fmt: skip
        self.lh = lakehouse.open(path)
        self.first_version = 0

    def create(self) -> None:
        props = None if self.name == DEFAULTS else dict(NO_AUTO)
        layout: dict[str, Any] = {"partition_by": ["day(ts)"]} if self.name == PARTITIONED else {}
        with self.lh.begin() as txn:
            txn.create_namespace("bench")
            try:
                txn.create_table(TABLE, SCHEMA, props, **layout)
            except (TypeError, NotImplementedError) as exc:
                raise Unsupported(f"create_table(partition_by=['day(ts)']): {exc}") from exc
            txn.append(TABLE, batch(0, self.sz.rows, self.sz.per_day))
        assert txn.committed_version is not None
        self.first_version = txn.committed_version
        if layout and not self.lh.describe_table(TABLE).partition_by:
            raise Unsupported("create_table(partition_by=['day(ts)']) made no partition spec")

    def append(self, rows: pa.Table) -> None:
        with self.lh.begin() as txn:
            txn.append(TABLE, rows)

    def read_latest(self) -> pa.Table:
        return self.lh.read(TABLE)

    def read_point(self, x: int) -> pa.Table:
        return self.lh.read(TABLE, where=f"id = {x}")

    def read_first(self) -> pa.Table:
        with self.lh.at_version(self.first_version) as view:
            return view.read(TABLE)

    def read_day(self, d: int) -> pa.Table:
        return self.lh.read(TABLE, where=day_where(d))

    def close(self) -> None:
        self.lh.close()


class Lance(Side):
    """pylance, by URI as a reader process would (no handle kept between calls)."""

    name = "pylance"

    def __init__(self, path: str, sz: Sizes) -> None:
        import lance

        super().__init__(path, sz)
        self._lance = lance

    def create(self) -> None:
        self._lance.write_dataset(batch(0, self.sz.rows, self.sz.per_day), self.path, mode="create")

    def append(self, rows: pa.Table) -> None:
        self._lance.write_dataset(rows, self.path, mode="append")

    def read_latest(self) -> pa.Table:
        return self._lance.dataset(self.path).to_table()

    def read_point(self, x: int) -> pa.Table:
        return self._lance.dataset(self.path).to_table(filter=f"id = {x}")

    def read_first(self) -> pa.Table:
        return self._lance.dataset(self.path, version=1).to_table()


def ducklake_python(explicit: str | None = None) -> str | None:
    """The python of the DuckLake virtualenv: ``explicit``, ``$LAKEHOUSE_DUCKLAKE_PYTHON``,
    or ``.venv-ducklake/bin/python`` in the checkout or the current directory."""
    if explicit or os.environ.get("LAKEHOUSE_DUCKLAKE_PYTHON"):
        return explicit or os.environ["LAKEHOUSE_DUCKLAKE_PYTHON"]
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(lakehouse.__file__)))
    for top in (checkout, os.getcwd()):
        py = os.path.join(top, ".venv-ducklake", "bin", "python")
        if os.path.exists(py):
            return py
    return None


class DuckLake(Side):
    """DuckLake in a subprocess of its own virtualenv (:mod:`lakehouse.bench.ducklake_side`)."""

    name = "ducklake"

    def __init__(self, path: str, sz: Sizes, python: str) -> None:
        super().__init__(path, sz)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ducklake_side.py")
        os.makedirs(path, exist_ok=True)
        self._err: IO[str] = open(os.path.join(path, "stderr.txt"), "w+")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [python, "-I", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._err, text=True, bufsize=1,
        )  # fmt: skip
        self.info: dict[str, Any] = {}

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self._err.seek(0)
            tail = self._err.read()[-1500:].strip()
            raise RuntimeError(f"the DuckLake process ended ({self._proc.poll()}): {tail}")
        res: dict[str, Any] = json.loads(line)
        if "error" in res:
            raise RuntimeError(f"DuckLake {op}: {res['error']}")
        return res

    def create(self) -> None:
        self.info = self._call(
            "create", root=os.path.join(self.path, "lake"), rows=self.sz.rows,
            per_day=self.sz.per_day,
        )  # fmt: skip

    def appends(self, start: int, stop: int) -> list[float]:
        return list(self._call("append", start=start, stop=stop)["times"])

    def measure(self, files: int, ids: list[int], day: int) -> dict[str, float]:
        res = self._call("measure", files=files, reads=self.sz.reads, ids=ids)
        return {k: float(res[k]) for k in self.measures}

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._call("quit")
            except (RuntimeError, ValueError, OSError):
                pass
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._err.close()


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------
def _make_sides(
    args: argparse.Namespace, root: str, sz: Sizes
) -> tuple[list[Side], dict[str, str]]:
    sides: list[Side] = []
    missing: dict[str, str] = {}
    want = [x.strip() for x in args.scale_systems.split(",") if x.strip()]
    for n in want:
        if n not in ("ours", *ANCHOR_NAMES):
            raise SystemExit(f"unknown system {n!r} (ours, {', '.join(ANCHOR_NAMES)})")
    for n in want:
        path = os.path.join(root, n)
        try:
            if n == "ours":
                for label in (OURS, DEFAULTS, PARTITIONED):
                    sides.append(Ours(os.path.join(root, label.replace(", ", "-")), sz, label))
            elif n == "pylance":
                sides.append(Lance(path, sz))
            else:
                py = ducklake_python(args.ducklake_python)
                if py is None or not os.path.exists(py):
                    missing[n] = ("not available: no DuckLake virtualenv (create it with "
                                  "`make .venv-ducklake`, or pass --ducklake-python)")  # fmt: skip
                    continue
                sides.append(DuckLake(path, sz, py))
        except ImportError as exc:
            missing[n] = f"not installed ({exc})"
    made = []
    for s in sides:
        try:
            s.create()
            s.measure(1, point_ids(1, sz), 0)  # first calls (imports, caches) not measured
            made.append(s)
        except Unsupported as exc:
            missing[s.name] = f"n/a: {exc}"
            s.close()
        except Exception as exc:
            log.exception("%s: create failed", s.name)
            missing[s.name] = f"failed: {type(exc).__name__}: {exc}"
            s.close()
    return made, missing


def _projected(points: list[tuple[int, float]], measure_s: float, cur: int, nxt: int) -> float:
    """Seconds to go from ``cur`` to ``nxt`` files: the time of one append extrapolated
    linearly from the last two (files, seconds) points, the reads in proportion to the files."""
    (f0, a0), (f1, a1) = points[-2:] if len(points) > 1 else points * 2
    at_next = a1 + (max(0.0, (a1 - a0) / (f1 - f0)) * (nxt - f1) if f1 > f0 else 0.0)
    return (nxt - cur) * (a1 + at_next) / 2 + measure_s * nxt / cur


def _compacted(s: Ours, files: int, sz: Sizes) -> dict[str, Any]:
    """``id = x`` on our first table once compacted with ``sort_keys=["id"]``."""
    out: dict[str, Any] = {"files": files}
    try:
        with s.lh.begin() as txn:
            alter: Any = txn.alter_table  # sort_keys: issue 21's contract, maybe not there yet
            alter(TABLE, sort_keys=["id"])
    except (TypeError, NotImplementedError) as exc:
        out["note"] = f"n/a: alter_table(sort_keys=...) is not supported yet ({exc})"
        return out
    t, res = timed(lambda: _compact(s))
    out["compact_s"] = t
    out["files_after"] = len(s.lh.list_data_files(TABLE))
    out["rewritten"] = getattr(res, "files_removed", None)
    m = s.measure(files, point_ids(files, sz), 0)
    out.update(point_ms=m["point"] * 1e3, latest_ms=m["latest"] * 1e3, first_ms=m["first"] * 1e3)
    return out


def _compact(s: Ours) -> Any:
    with s.lh.begin() as txn:
        return txn.compact(TABLE)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's ratio lines, each with its bound and pass/fail (None: not measured)."""
    cps = res["checkpoints"]
    sizes = sorted(int(k) for k in cps)
    if not sizes:
        return []
    small = sizes[0]
    big = 10_000 if 10_000 in sizes else sizes[-1]

    def at(n: int, side: str, what: str) -> float | None:
        v = cps.get(str(n), {}).get(side, {}).get(what)
        return None if v is None else float(v)

    comp = res.get("compacted", {})
    values = {
        "partition_read": _ratio(at(big, PARTITIONED, "day_ms"), at(small, PARTITIONED, "day_ms")),
        "point_vs_lance": _ratio(at(big, OURS, "point_ms"), at(big, "pylance", "point_ms")),
        "point_compacted": _ratio(
            comp.get("point_ms"), at(comp.get("files", -1), OURS, "point_ms")
        ),
        "latest_vs_lance": _ratio(at(big, DEFAULTS, "latest_ms"), at(big, "pylance", "latest_ms")),
        "latest_vs_ducklake": _ratio(
            at(big, DEFAULTS, "latest_ms"), at(big, "ducklake", "latest_ms")
        ),
        "first_growth": _ratio(at(big, OURS, "first_ms"), at(small, OURS, "first_ms")),
        "append_vs_lance": _ratio(at(big, "pylance", "append_ms"), at(big, OURS, "append_ms")),
    }
    out = []
    for key, what, bound, op in TARGETS:
        v = values[key]
        ok = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out.append({"key": key, "what": what.format(big=f"{big:,}", small=f"{small:,}"),
                    "value": v, "target": f"{op} {bound:g}x", "pass": ok})  # fmt: skip
    return out


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    sz = sizes_of(args)
    started = time.perf_counter()
    sides, missing = _make_sides(args, root, sz)
    spent = {s.name: 0.0 for s in sides}
    tails: dict[str, list[float]] = {s.name: [] for s in sides}
    points: dict[str, list[tuple[int, float]]] = {s.name: [] for s in sides}
    measure_s = dict.fromkeys(spent, 0.0)
    stopped: dict[str, str] = {}
    cps: dict[str, dict[str, dict[str, float]]] = {}
    done = 1  # batch 0 is in every table
    active = list(sides)
    day = (sz.checkpoints[0] // sz.per_day) // 2  # the day read at every checkpoint

    def stop(s: Side, why: str) -> None:
        stopped[s.name] = why
        active.remove(s)
        s.close()

    for i, cp in enumerate(sz.checkpoints):
        for s in list(active):
            est = _projected(points[s.name], measure_s[s.name], done, cp) if i else 0.0
            if spent[s.name] + est > sz.budget_s:
                stop(s, f"stopped at {done:,} files: reaching {cp:,} would take ~{est:,.0f} s "
                        f"more, past the {sz.budget_s:,.0f} s budget")  # fmt: skip
        for c, start in enumerate(range(done, cp, sz.chunk)):
            end = min(start + sz.chunk, cp)
            for s in rotate(active, c):
                try:
                    times = s.appends(start, end)
                except Exception as exc:
                    log.exception("%s: appends failed", s.name)
                    stop(s, f"failed at {start:,} files: {type(exc).__name__}: {exc}")
                    continue
                spent[s.name] += sum(times)
                tails[s.name] = (tails[s.name] + times)[-sz.tail :]
                if not points[s.name]:
                    points[s.name].append(((start + end) // 2, statistics.median(times)))
                if spent[s.name] > sz.budget_s * 1.5:
                    stop(s, f"stopped at {end:,} files: {spent[s.name]:,.0f} s spent, "
                            f"past the {sz.budget_s:,.0f} s budget")  # fmt: skip
        done = cp
        row: dict[str, dict[str, float]] = {}
        for s in rotate(active, i):
            try:
                t, m = timed(functools.partial(s.measure, cp, point_ids(cp, sz), day))
            except Exception as exc:
                log.exception("%s: measurement failed", s.name)
                stop(s, f"failed at {cp:,} files: {type(exc).__name__}: {exc}")
                continue
            spent[s.name] += t
            measure_s[s.name] = t
            points[s.name].append((cp, statistics.median(tails[s.name])))
            row[s.name] = {"append_ms": statistics.median(tails[s.name]) * 1e3}
            row[s.name].update({f"{k}_ms": v * 1e3 for k, v in m.items()})
        cps[str(cp)] = row
        log.info("scale: %s files after %.0f s: %s", f"{cp:,}", time.perf_counter() - started, row)
    res: dict[str, Any] = {
        "sizes": asdict(sz),
        "systems": [s.name for s in sides],
        "missing": missing,
        "stopped": stopped,
        "checkpoints": cps,
        "spent_s": spent,
    }
    ours = next((s for s in active if isinstance(s, Ours) and s.name == OURS), None)
    last = str(done)
    if ours is not None and OURS in cps.get(last, {}):
        try:
            res["compacted"] = _compacted(ours, done, sz)
        except Exception as exc:
            log.exception("compaction failed")
            res["compacted"] = {"files": done, "note": f"failed: {type(exc).__name__}: {exc}"}
    for s in sides:
        if s.name == "ducklake" and isinstance(s, DuckLake):
            res["ducklake"] = s.info
    for s in active:
        s.close()
    res["targets"] = targets(res)
    res["elapsed_s"] = time.perf_counter() - started
    shutil.rmtree(root, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------
def _ms(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.2f}" if v < 10 else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def report(res: dict[str, Any]) -> str:
    sz, cps = res["sizes"], res["checkpoints"]
    mains = [OURS, *ANCHOR_NAMES]
    lines = [
        f"scale: appends of {sz['rows']} rows, one commit and one file each; median of "
        f"{sz['reads']} reads, ms; append ms = median of the last {sz['tail']} appends. "
        "ours: auto-compaction off, durable commits",
        "",
        "| files | append ms (ours / pylance / ducklake) | read latest ms | `id = x` ms "
        "| version 1 ms |",
        "|---:|---|---|---|---|",
    ]

    def cell(row: dict[str, dict[str, float]], what: str, names: list[str]) -> str:
        return " / ".join(_ms(row.get(n, {}).get(what)) for n in names)

    for cp, row in cps.items():
        lines.append(f"| {int(cp):,} | " + " | ".join(
            cell(row, w, mains) for w in ("append_ms", "latest_ms", "point_ms", "first_ms")
        ) + " |")  # fmt: skip
    lines += [
        "",
        f"| files | defaults: append ms | defaults: read latest ms | day-partitioned: append ms "
        f"| day-partitioned: one day ({sz['per_day'] * sz['rows']:,} rows) ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for cp, row in cps.items():
        d, p = row.get(DEFAULTS, {}), row.get(PARTITIONED, {})
        cells = (d.get("append_ms"), d.get("latest_ms"), p.get("append_ms"), p.get("day_ms"))
        lines.append(f"| {int(cp):,} | " + " | ".join(_ms(v) for v in cells) + " |")
    comp = res.get("compacted")
    if comp:
        if "point_ms" in comp:
            lines.append(
                f"\ncompacted with sort_keys=[id] at {comp['files']:,} files: "
                f"{comp['compact_s']:,.1f} s, {comp['files_after']:,} files after; `id = x` "
                f"{_ms(comp['point_ms'])} ms, read latest {_ms(comp['latest_ms'])} ms, "
                f"version 1 {_ms(comp['first_ms'])} ms"
            )
        else:
            lines.append(f"\ncompacted at {comp['files']:,} files: {comp['note']}")
    lines.append("\ntargets (issue 21):")
    for t in res["targets"]:
        v = "n/a" if t["value"] is None else f"{t['value']:.3g}x"
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[t["pass"]]
        lines.append(f"- {t['what']}: {v} (target {t['target']}): {verdict}")
    for n, why in {**res["missing"], **res["stopped"]}.items():
        lines.append(f"\n{n}: {why}")
    info = res.get("ducklake")
    if info:
        lines.append(f"\nducklake: duckdb {info['duckdb']}, {os.path.basename(info['extension'])}")
    lines.append(f"\nscale bench took {res['elapsed_s']:,.0f} s")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
def add_arguments(p: Any) -> None:
    d = Sizes()
    p.add_argument("--scale-systems", default="ours,pylance,ducklake",
                   help="comma-separated: ours, pylance, ducklake")  # fmt: skip
    p.add_argument("--checkpoints", default=",".join(map(str, d.checkpoints)),
                   help="file counts to measure at (default: %(default)s)")  # fmt: skip
    p.add_argument("--full", action="store_true", help=f"add {FULL_EXTRA:,} to the checkpoints")
    p.add_argument("--scale-rows", type=int, default=d.rows, help="rows per append")
    p.add_argument("--scale-reads", type=int, default=d.reads, help="reads per measurement")
    p.add_argument("--scale-chunk", type=int, default=d.chunk, help="appends per turn")
    p.add_argument("--scale-tail", type=int, default=d.tail,
                   help="the append figure is the median of this many last appends")  # fmt: skip
    p.add_argument("--scale-budget", type=float, default=d.budget_s,
                   help="seconds a system may spend (default: %(default)s)")  # fmt: skip
    p.add_argument("--ducklake-python",
                   help="python of the DuckLake venv (.venv-ducklake/bin/python)")  # fmt: skip


def sizes_of(args: argparse.Namespace) -> Sizes:
    if getattr(args, "quick", False):
        return QUICK
    try:
        cps = sorted({int(x) for x in args.checkpoints.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--checkpoints must be integers, not {args.checkpoints!r}") from None
    if args.full and FULL_EXTRA not in cps:
        cps.append(FULL_EXTRA)
    sz = Sizes(checkpoints=tuple(cps), rows=args.scale_rows, reads=args.scale_reads,
               chunk=args.scale_chunk, tail=args.scale_tail,
               budget_s=args.scale_budget)  # fmt: skip
    if not cps or cps[0] < 2:
        raise SystemExit("--checkpoints must be file counts >= 2")
    for what, v in (("rows", sz.rows), ("reads", sz.reads), ("chunk", sz.chunk),
                    ("tail", sz.tail), ("budget", sz.budget_s)):  # fmt: skip
        if v <= 0:
            raise SystemExit(f"--scale-{what} must be > 0")
    if sz.per_day * sz.rows > 86_400:
        raise SystemExit("--scale-rows too large: a day's appends must fit in a day of seconds")
    return replace(sz, chunk=min(sz.chunk, cps[-1]))
