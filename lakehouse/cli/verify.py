"""``lakehouse verify``: read every byte the lakehouse depends on and check it.

What is checked, in this order::

    meta store     the kvstore under <url>/meta, as `kvstore verify` does: every
                   manifest, every block of every live SST, the WAL to replay
    versions       the record of every retained version decodes
    tree           at the latest version (every retained one with --all-versions):
                   each namespace, table and view definition decodes, and each
                   table's state (data file records, deletion vectors)
    data files     every file those tables reference: present, of the recorded
                   size, footer length and footer and whole-file CRC-32C (for
                   records that have them), a readable Parquet file (every
                   column of every row group decoded, page checksums verified)
                   holding the recorded number of rows and the recorded columns;
                   an inline file (rows in its kvstore record) likewise: its
                   payload's size and CRC-32C, decoded whole, rows and columns
    pending        the data files of expired versions queued for deletion
                   (``expire_versions``' grace): listed, never problems; a
                   file that vanished while verify ran because the versions
                   referencing it expired meanwhile is a note, not damage

It only reads (through :func:`lakehouse.open_reader`), so it can run beside a
live writer, and on a read-only directory. Problems are collected, never
raised; the command exits 3 when there are any.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import kvstore
import lakehouse
from kvstore.cli.store import CliError as KvCliError
from kvstore.cli.store import Target as KvTarget
from kvstore.cli.verify import Findings, Problem, VerifyReport
from kvstore.cli.verify import verify as verify_kvstore
from kvstore.objstore import ObjectStore, open_store
from lakehouse.cli.target import CliError, Target, one_line
from lakehouse.data import files as datafiles
from lakehouse.data import inline
from lakehouse.layout import resolve
from lakehouse.model import DataFile

Progress = Callable[[int, str], None]


@dataclass
class Report(Findings):
    meta: VerifyReport | None = None
    version: int | None = None
    versions: int = 0
    trees: int = 0
    tables: int = 0
    views: int = 0
    data_files: int = 0
    rows: int = 0
    bytes: int = 0
    #: data files of expired versions awaiting deletion (path, queued, due: ISO times)
    pending_deletion: list[dict[str, str]] = field(default_factory=list)

    def problem(self, obj: str, kind: str, message: str) -> None:
        self.problems.append(Problem(obj, kind, one_line(message)))

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "version": self.version,
            "checked": {
                "meta": None if self.meta is None else self.meta.to_json()["checked"],
                "versions": self.versions,
                "trees": self.trees,
                "tables": self.tables,
                "views": self.views,
                "data_files": self.data_files,
                "rows": self.rows,
                "bytes": self.bytes,
            },
            "pending_deletion": self.pending_deletion,
            "damaged_objects": self.damaged_objects(),
            "problems": [p.to_json() for p in self.problems],
            "notes": self.notes,
        }


def _check_meta(target: Target, report: Report) -> None:
    layout = resolve(target.url, target.storage_options, create=False)
    assert isinstance(layout.meta, str)
    kv = KvTarget(url=layout.meta, storage_options=target.storage_options)
    try:
        store = kv.open_existing()
    except KvCliError:
        raise CliError(f"no lakehouse at {target.url} (no metadata store)") from None
    meta = verify_kvstore(store, kv.wal_store(store))
    report.meta = meta
    for p in meta.problems:
        report.problem(f"meta/{p.object}", p.kind, p.message)
    report.notes += [f"meta: {n}" for n in meta.notes]


def _check_versions(r: lakehouse.LakehouseReader, report: Report) -> list[int]:
    """Decode every retained version's record; returns the versions that decoded."""
    good = []
    for v in range(r.oldest_version, r.version + 1):
        try:
            r.version_info(v)
        except kvstore.CorruptionError as exc:
            report.problem(f"version {v}", "corrupt", str(exc))
            continue
        except lakehouse.VersionExpired:  # expired meanwhile by the writer
            continue
        report.versions += 1
        good.append(v)
    return good


def _check_tree(
    r: lakehouse.LakehouseReader,
    version: int,
    report: Report,
    files: dict[str, tuple[DataFile, str]],
) -> None:
    """Decode every definition and table state at ``version``; collect its data files."""
    where = f"version {version}"
    try:
        view = r.at_version(version)
    except lakehouse.VersionExpired:
        return
    except kvstore.CorruptionError as exc:
        report.problem(where, "corrupt", str(exc))
        return
    with view:
        report.trees += 1
        try:
            namespaces = view.list_namespaces()
        except kvstore.CorruptionError as exc:
            report.problem(f"{where}: namespaces", "corrupt", str(exc))
            return
        for ns in namespaces:
            try:
                view.describe_namespace(ns)
                tables, views = view.list_tables(ns), view.list_views(ns)
            except kvstore.CorruptionError as exc:
                report.problem(f"{where}: namespace {ns}", "corrupt", str(exc))
                continue
            for name in views:
                try:
                    view.describe_view(f"{ns}.{name}")
                    report.views += 1
                except kvstore.CorruptionError as exc:
                    report.problem(f"{where}: view {ns}.{name}", "corrupt", str(exc))
            for name in tables:
                table = f"{ns}.{name}"
                try:
                    view.describe_table(table)
                    listed = view.list_data_files(table)
                except kvstore.CorruptionError as exc:
                    report.problem(f"{where}: table {table}", "corrupt", str(exc))
                    continue
                report.tables += 1
                for f in listed:
                    if f.deleted_rows > f.rows:
                        report.problem(
                            f"{where}: table {table}",
                            "corrupt",
                            f"data file {f.path} has {f.deleted_rows} rows deleted of {f.rows}",
                        )
                    files.setdefault(f.path, (f, table))


def _fetch(store: ObjectStore | None, path: str, storage_options: dict[str, Any]) -> bytes:
    if "://" in path or path.startswith("/"):  # absolute (a minimal export's source)
        parent, name = path.rsplit("/", 1)
        return open_store(parent, storage_options, create=False).get(name)
    if store is None:
        raise FileNotFoundError(path)
    return store.get(path)


def _check_file(data: bytes, f: DataFile) -> str | None:
    """What is wrong with the bytes of data file ``f`` (None: nothing): its size,
    footer length and CRC-32C and whole-file CRC-32C against the record (when
    recorded), every page's checksum, its rows and columns."""
    if len(data) != f.bytes:
        return f"it holds {len(data)} bytes; its record says {f.bytes}"
    try:
        datafiles.check_bytes(data, f)
    except lakehouse.CorruptionError as exc:
        return str(exc)
    if f.is_inline:  # rows kept in the record: an Arrow IPC payload
        try:
            t = inline.decode(data, f.path)
        except lakehouse.CorruptionError as exc:
            return str(exc)
        rows, names = t.num_rows, set(t.column_names)
    else:
        try:
            rows, names = _parquet_rows(data)
        except datafiles.READ_ERRORS as exc:
            return f"not a readable Parquet file: {exc}"
    if rows != f.rows:
        return f"it holds {rows} rows; its record says {f.rows}"
    missing = sorted(name for _, name in f.columns if name not in names)
    if missing:
        return f"its record names columns the file does not hold: {', '.join(missing)}"
    return None


def _parquet_rows(data: bytes) -> tuple[int, set[str]]:
    """Rows and column names of Parquet bytes, every page decoded and checked."""
    # decoded on this thread: a pyarrow worker thread that still holds the file's
    # buffer when the interpreter exits aborts the process (seen with pyarrow 26)
    with pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True) as pf:
        rows = 0
        for i in range(pf.num_row_groups):
            rows += pf.read_row_group(i, use_threads=False).num_rows
        return rows, set(pf.schema_arrow.names)


def _check_files(
    r: lakehouse.LakehouseReader,
    target: Target,
    files: dict[str, tuple[DataFile, str]],
    report: Report,
    progress: Progress,
) -> None:
    expired_meanwhile = _ExpiredMeanwhile(r)
    store: ObjectStore | None = None
    try:
        base, opts = r.data_location()
        store = open_store(base, opts, create=False)
    except FileNotFoundError:  # no data directory (yet): every listed file is missing
        store = None
    for path, (f, table) in sorted(files.items()):
        obj = f"data/{path}"
        try:
            data = f.inline if f.inline is not None else _fetch(store, path, target.storage_options)
        except FileNotFoundError:
            if expired_meanwhile(path):
                report.notes.append(
                    f"data file {path} was deleted while verify ran: every version "
                    "referencing it expired meanwhile"
                )
            else:
                report.problem(obj, "missing", f"referenced by table {table} but not in storage")
            progress(f.bytes, path)
            continue
        problem = _check_file(data, f)
        if problem is not None:
            report.problem(obj, "corrupt", f"(table {table}) {problem}")
        else:
            report.data_files += 1
            report.rows += f.rows
            report.bytes += len(data)
        progress(f.bytes, path)


def verify(
    target: Target,
    *,
    all_versions: bool = False,
    on_plan: Callable[[int], Progress] | None = None,
) -> Report:
    """Check the lakehouse at ``target``; ``on_plan`` gets the data bytes to read and
    returns a progress callback."""
    target.check_local()
    report = Report()
    _check_meta(target, report)
    try:
        r = target.open_reader()
    except kvstore.CorruptionError as exc:
        report.problem("lakehouse", "corrupt", f"cannot be opened: {exc}")
        return report
    with r:
        try:
            report.version = r.version
            good = _check_versions(r, report)
        except kvstore.CorruptionError as exc:  # the head or the oldest version unreadable
            report.problem("lakehouse", "corrupt", f"cannot be read: {exc}")
            return report
        scope = good if all_versions else [r.version]
        files: dict[str, tuple[DataFile, str]] = {}
        for v in scope:
            _check_tree(r, v, report, files)
        total = sum(f.bytes for f, _ in files.values())
        progress = on_plan(total) if on_plan is not None else (lambda _n, _item: None)
        _check_files(r, target, files, report, progress)
        _check_pending(r, report)
    return report


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _check_pending(r: lakehouse.LakehouseReader, report: Report) -> None:
    """List the deletion queue: files of expired versions in their grace period
    are neither damage nor orphans (see ``expire_versions``)."""
    try:
        queue = r.pending_deletions()
    except kvstore.CorruptionError as exc:
        report.problem("deletion queue", "corrupt", str(exc))
        return
    now = time.time() * 1000
    in_grace = 0
    for q in queue:
        in_grace += q.due_ms > now
        report.pending_deletion.append(
            {"path": q.path, "queued": _iso(q.since_ms), "due": _iso(q.due_ms)}
        )
    if queue:
        report.notes.append(
            f"{len(queue)} data files of expired versions are pending deletion "
            f"({in_grace} in their grace period; the others go at the writer's next "
            "expire_versions, remove_orphan_files or open)"
        )


class _ExpiredMeanwhile:
    """Whether a data file found missing is no longer referenced by any retained
    version once the reader is refreshed (the writer expired its versions and
    deleted it while verify ran): then it is no damage."""

    def __init__(self, r: lakehouse.LakehouseReader) -> None:
        self._r = r
        self._retained: set[str] | None = None

    def __call__(self, path: str) -> bool:
        if self._retained is None:
            r = self._r
            try:
                r.refresh()
                retained = r.retained_data_files()
            except (lakehouse.LakehouseError, kvstore.KvError):
                return False  # cannot tell: report the file
            self._retained = retained
        return path not in self._retained
