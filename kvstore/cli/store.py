"""Opening a store for the CLI, and what ``info`` and ``manifest`` show.

Read-only commands never create anything: ``kvstore.open_store`` would
``mkdir`` a local path, so the path is checked first, and a store without a
manifest is reported as "no kvstore at ..." instead of being read as empty.
Nothing here claims the writer role (no manifest is written), so these work
next to a running writer without fencing it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import kvstore
from kvstore import paths
from kvstore.errors import CorruptionError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import LocalStore, ObjectStore, local_path, open_store
from kvstore.wal import list_wal_ids, missing_seq, replay


class CliError(Exception):
    """An expected failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


log = logging.getLogger("kvstore")


@dataclass(frozen=True)
class Target:
    """Where a command points: the URL and how to reach it."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    wal_dir: str | None = None
    accept_wal_loss: bool = False
    takeover: bool = False

    def local_path(self) -> str | None:
        return local_path(self.url)

    def open_existing(self) -> ObjectStore:
        """The object store at the URL; CliError when no kvstore lives there."""
        path = self.local_path()
        if path is not None:
            if not os.path.exists(path):
                raise CliError(f"no kvstore at {self.url} (no such directory)")
            if not os.path.isdir(path):
                raise CliError(f"no kvstore at {self.url} (not a directory)")
        store = open_store(self.url, self.storage_options or None)
        if ManifestStore(store).latest_id() == 0:
            raise CliError(f"no kvstore at {self.url} (no manifest found)")
        return store

    def find_wal_dir(self, store: ObjectStore) -> str | None:
        """``--wal-dir``, else the local WAL directory the latest manifest records
        (when it exists here), else None: the WAL lives in the store."""
        if self.wal_dir is not None:
            if not os.path.isdir(self.wal_dir):
                raise CliError(f"WAL directory {self.wal_dir} does not exist")
            return self.wal_dir
        m = ManifestStore(store).load_latest()
        recorded = None if m is None else m.wal_dir
        if recorded is not None and os.path.isdir(recorded):
            log.info("using the WAL directory the manifest records: %s", recorded)
            return recorded
        return None

    def wal_store(self, store: ObjectStore) -> ObjectStore:
        wal_dir = self.find_wal_dir(store)
        return store if wal_dir is None else LocalStore(wal_dir)

    def open_reader(self, checkpoint: str | None = None) -> kvstore.Reader:
        store = self.open_existing()
        try:
            return kvstore.open_reader(
                self.url,
                storage_options=self.storage_options or None,
                wal_dir=self.find_wal_dir(store),
                checkpoint=checkpoint,
            )
        except KeyError:
            raise CliError(f"no checkpoint named {checkpoint!r} at {self.url}") from None

    def open_writer(self, *, create: bool = False) -> kvstore.DB:
        """The single writer: WriterActive next to a live local writer unless
        ``takeover`` (then, and on object stores, it fences any other writer).
        Compaction only when asked for."""
        wal_dir = self.wal_dir
        try:
            wal_dir = self.find_wal_dir(self.open_existing())
        except CliError:
            if not create:
                raise
            if wal_dir is not None and not os.path.isdir(wal_dir):
                raise CliError(f"WAL directory {wal_dir} does not exist") from None
        options: dict[str, Any] = {"background_compaction": False}
        if self.storage_options:
            options["storage_options"] = self.storage_options
        if wal_dir is not None:
            options["wal_dir"] = wal_dir
        if self.accept_wal_loss:
            options["accept_wal_loss"] = True
        if self.takeover:
            options["takeover"] = True
        return kvstore.open(self.url, **options)


def latest_manifest(store: ObjectStore) -> Manifest:
    m = ManifestStore(store).load_latest()
    if m is None:  # removed between the check and the load
        raise CliError("the store has no manifest")
    return m


def manifest_ids(store: ObjectStore) -> list[int]:
    ids = (paths.parse_manifest_name(n) for n in store.list(paths.MANIFEST_DIR))
    return sorted(i for i in ids if i is not None)


def wal_name(wal_id: int, kind: str) -> str:
    return (paths.wal_segment_name if kind == "log" else paths.wal_object_name)(wal_id)


def _size(store: ObjectStore, name: str) -> int | None:
    try:
        return store.size(name)
    except FileNotFoundError:
        return None


def _level(ssts: tuple[SstMeta, ...] | list[SstMeta]) -> dict[str, int]:
    return {
        "ssts": len(ssts),
        "bytes": sum(s.size for s in ssts),
        "entries": sum(s.count for s in ssts),
        "tombstones": sum(s.tombstones for s in ssts),
    }


def checkpoint_rows(m: Manifest) -> list[dict[str, Any]]:
    rows = [{"name": name, **cp} for name, cp in m.checkpoints.items()]
    return sorted(rows, key=lambda c: (c.get("created_ms", 0), c["name"]))


def summarize(store: ObjectStore, wal_store: ObjectStore, url: str) -> dict[str, Any]:
    """Everything ``info`` reports, as plain JSON-able data."""
    m = latest_manifest(store)
    problems: list[str] = []
    wal_all = list_wal_ids(wal_store)
    live_wal = [(i, k) for i, k in wal_all if i >= m.wal_replay_from]
    wal_bytes = 0
    for wal_id, kind in live_wal:
        wal_bytes += _size(wal_store, wal_name(wal_id, kind)) or 0
    last_seq: int | None
    unflushed: int | None
    try:
        replayed = replay(wal_store, m.wal_replay_from, m.last_flushed_seq, tolerate_missing=True)
        last_seq = max([m.last_flushed_seq] + [r.seq for r in replayed.records])
        unflushed = len(replayed.records)
        gap = missing_seq((r.seq for r in replayed.records), m.last_flushed_seq)
        if gap is not None and ManifestStore(store).latest_id() == m.id:  # not a race
            problems.append(f"WAL records from seq {gap} on are missing")
    except CorruptionError as exc:
        last_seq = unflushed = None
        problems.append(str(exc))
    pinned: set[str] = set()
    checkpoints = checkpoint_rows(m)
    for cp in checkpoints:
        try:
            cp_manifest = ManifestStore(store).load(int(cp["manifest_id"]))
        except FileNotFoundError:
            problems.append(f"checkpoint {cp['name']!r}: manifest {cp['manifest_id']} is missing")
            continue
        except CorruptionError as exc:
            problems.append(f"checkpoint {cp['name']!r}: {exc}")
            continue
        pinned.update(s.id for s in cp_manifest.all_ssts())
    live = {s.id for s in m.all_ssts()}
    listed = [i for i in map(paths.parse_sst_name, store.list(paths.SST_DIR)) if i is not None]
    garbage = [i for i in listed if i not in live and i not in pinned]
    garbage_bytes = sum(_size(store, paths.sst_name(i)) or 0 for i in garbage)
    mids = manifest_ids(store)
    runs = [_level(run) for run in m.runs]
    return {
        "url": url,
        "manifest_id": m.id,
        "manifest_created_ms": m.created_ms,
        "writer_epoch": m.writer_epoch,
        "last_seq": last_seq,
        "last_flushed_seq": m.last_flushed_seq,
        "wal_replay_from": m.wal_replay_from,
        "retention_watermark": m.retention_seq,
        "l0": _level(m.l0),
        "sorted_runs": runs,
        "total": _level(m.all_ssts()),
        "wal": {
            "segments": len(live_wal),
            "bytes": wal_bytes,  # on disk: a live journal is preallocated
            "unflushed_records": unflushed,
            "ids": [i for i, _ in live_wal],
            "older_segments": len(wal_all) - len(live_wal),
        },
        "checkpoints": checkpoints,
        "checkpoint_only_ssts": len(pinned - live),
        "unreferenced_ssts": {"count": len(garbage), "bytes": garbage_bytes},
        "manifests": {"count": len(mids), "oldest": mids[0] if mids else None},
        "problems": problems,
    }


def manifest_doc(m: Manifest) -> dict[str, Any]:
    """The manifest as JSON (keys hex-encoded, as in the stored body)."""
    return {
        "id": m.id,
        "name": paths.manifest_name(m.id),
        "writer_epoch": m.writer_epoch,
        "created_ms": m.created_ms,
        "last_flushed_seq": m.last_flushed_seq,
        "wal_replay_from": m.wal_replay_from,
        "retention_seq": m.retention_seq,
        "l0": [s.to_json() for s in m.l0],
        "runs": [[s.to_json() for s in run] for run in m.runs],
        "checkpoints": m.checkpoints,
        "seq_times": [list(x) for x in m.seq_times],
        "claims": list(m.claims),
        "wal_dir": m.wal_dir,
    }


def option_value(value: str) -> Any:
    """A storage option's value from the command line: ``true``/``false`` in any case
    are booleans (s3fs's ``anon=true``), a value that parses as JSON is that value
    (``config_kwargs={"connect_timeout": 1}`` for nested options), any other value
    stays a string (``endpoint_url=http://...``; quote it to keep digits a string)."""
    flags = {"true": True, "false": False}
    if value.lower() in flags:
        return flags[value.lower()]
    try:
        return json.loads(value, parse_constant=_not_json)
    except ValueError:  # not JSON (NaN and Infinity neither): the text itself
        return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
