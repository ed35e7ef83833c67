"""The sidecar of one Iceberg snapshot: what the next snapshot is computed from.

``<table id>/metadata/<u:020d>-b<b:020d>.state.json`` is written after snapshot
``u``'s manifest list and before any metadata JSON that names ``u``. It holds:

* ``chain``: ``b``, the first snapshot of the run it was computed in (see
  :mod:`lakehouse.iceberg.paths`: the sidecar's content depends on it, as its
  manifests' do: the parent, the manifest list's and manifests' names, the
  change-only ``base``; so it is named by it too);

* ``snapshot``: the snapshot's entry of the metadata JSON (``snapshot-id``,
  ``parent-snapshot-id``, ``sequence-number``, ``timestamp-ms``,
  ``manifest-list``, ``summary``, ``schema-id``);
* ``schema``: the snapshot's Iceberg schema (with its ``schema-id``);
* ``names``: per field id, the names the snapshot's live data files without
  field ids use for it (the name mapping of a metadata JSON is their union over
  the snapshots it lists, plus the current names);
* ``manifests``: the rows of its manifest list, in order;
* ``files``: per live data file id, where it is: the location the manifests
  name it by, its data manifest, data sequence number, rows, bytes, partition
  spec, and its deletion vector's fingerprint, positional delete file,
  delete manifest, delete sequence number, deleted rows and delete file bytes;
* ``totals``: the snapshot's running totals (Iceberg's ``total-*`` summary);
* ``lost``: names older field ids lost to newer ones under the name mapping
  (files using such a name for such an id are materialised with field ids);
* ``unreadable``: ids of columns whose type Iceberg readers refuse in a data
  file (their files are materialised, those columns converted or left out).

With it, snapshot ``u + 1`` is computed from ``u``'s state plus version
``u + 1``'s record (a few point reads), never from the whole history. Bytes
(partition summary bounds) are written as ``{"$b": hex}``.

A sidecar whose files changed little since the previous snapshot's holds only
that change (``base``: the previous snapshot, of the same chain; ``changed``
refs, ``removed`` ids), at most :data:`MAX_DEPTH` deep before a whole one:
writing one version of a large table then costs what the version changed, not
the table's size. Every sidecar such a change reads back is of the same chain,
so expiry keeps them all while it keeps the chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1


@dataclass
class FileRef:
    """One live data file of a snapshot, as its manifests hold it."""

    #: the location the manifest names the data file by (the lakehouse's data file,
    #: or a materialised copy under iceberg/)
    path: str
    #: name (under the iceberg root) of the data manifest holding its live entry
    manifest: str
    #: its data sequence number: the snapshot that added it
    seq: int
    rows: int
    size: int
    spec_id: int
    #: fingerprint of its deletion vector ("" when no row is deleted)
    dv: str = ""
    #: its positional delete file (a location; "" when none), the delete manifest
    #: holding it, the delete file's sequence number, rows and bytes
    delete: str = ""
    delete_manifest: str = ""
    delete_seq: int = 0
    delete_rows: int = 0
    delete_size: int = 0

    def encode(self) -> list[Any]:
        return [
            self.path,
            self.manifest,
            self.seq,
            self.rows,
            self.size,
            self.spec_id,
            self.dv,
            self.delete,
            self.delete_manifest,
            self.delete_seq,
            self.delete_rows,
            self.delete_size,
        ]

    @classmethod
    def decode(cls, raw: list[Any]) -> FileRef:
        return cls(*raw)


@dataclass
class SnapshotState:
    """Snapshot ``snapshot["snapshot-id"]`` of one table: see the module docstring."""

    snapshot: dict[str, Any]
    schema: dict[str, Any]
    names: dict[int, list[str]] = field(default_factory=dict)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, FileRef] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    #: names older field ids lost to newer ones (files using them are materialised)
    lost: dict[int, list[str]] = field(default_factory=dict)
    #: ids of columns whose type readers refuse in a data file (those files are
    #: materialised); kept after a drop, since old files still hold them
    unreadable: list[int] = field(default_factory=list)
    #: the sidecar stores ``files`` as a change of snapshot ``base``'s (None: whole),
    #: ``depth`` sidecars deep; ``changed`` and ``removed`` are that change
    base: int | None = None
    depth: int = 0
    changed: dict[str, FileRef] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    #: the first snapshot of the run that computed this one (its names carry it)
    chain: int = 0

    @property
    def partial(self) -> bool:
        """Decoded from a sidecar that holds a change only (``files`` is not whole
        until :func:`load` applies it to its base)."""
        return self.base is not None and not self.files

    @property
    def version(self) -> int:
        return int(self.snapshot["snapshot-id"])

    def light(self) -> Light:
        return Light(self.snapshot, self.schema, self.names, self.lost)


@dataclass(frozen=True)
class Light:
    """What a metadata JSON needs of a snapshot it lists (not its file index)."""

    snapshot: dict[str, Any]
    schema: dict[str, Any]
    names: dict[int, list[str]]
    lost: dict[int, list[str]] = field(default_factory=dict)


def _plain(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$b": obj.hex()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _bytes_back(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and "$b" in obj:
            return bytes.fromhex(obj["$b"])
        return {k: _bytes_back(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_bytes_back(v) for v in obj]
    return obj


#: the longest chain of change-only sidecars before a whole one is written again
MAX_DEPTH = 16


class Touched(dict[str, FileRef]):
    """A snapshot's file index being built from a copy of the previous one's: it
    remembers the ids set or removed (``touched``), so :func:`delta_of` costs
    what the snapshot changed, not the table's size."""

    def __init__(self, base: dict[str, FileRef] | None = None) -> None:
        super().__init__(base or {})
        self.touched: set[str] = set()

    def __setitem__(self, fid: str, ref: FileRef) -> None:
        self.touched.add(fid)
        super().__setitem__(fid, ref)

    def __delitem__(self, fid: str) -> None:
        self.touched.add(fid)
        super().__delitem__(fid)

    def pop(self, fid: str, *default: Any) -> Any:
        self.touched.add(fid)
        return super().pop(fid, *default)


def delta_of(s: SnapshotState, prev: SnapshotState | None) -> None:
    """Make ``s`` store its files as a change of ``prev`` when that is small (refs
    ``s`` shares with ``prev`` are the same objects: :func:`snapshots.build` copies
    a ref before changing it; a :class:`Touched` index says which ids to compare)."""
    if prev is None or prev.depth + 1 > MAX_DEPTH:
        return
    old, new = prev.files, s.files
    ids = new.touched if isinstance(new, Touched) else set(new) | set(old)
    changed = {fid: new[fid] for fid in ids if fid in new and old.get(fid) is not new[fid]}
    removed = sorted(fid for fid in ids if fid in old and fid not in new)
    if 2 * (len(changed) + len(removed)) > len(s.files):
        return
    s.base, s.depth, s.changed, s.removed = prev.version, prev.depth + 1, changed, removed


def encode(s: SnapshotState) -> bytes:
    """The sidecar's bytes (deterministic: same state, same bytes)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "chain": s.chain,
        "snapshot": s.snapshot,
        "schema": s.schema,
        "names": {str(k): sorted(v) for k, v in sorted(s.names.items())},
        "manifests": _plain(s.manifests),
        "totals": dict(sorted(s.totals.items())),
        "lost": {str(k): sorted(v) for k, v in sorted(s.lost.items())},
        "unreadable": s.unreadable,
    }
    if s.base is None:
        doc["files"] = {fid: s.files[fid].encode() for fid in sorted(s.files)}
    else:
        doc["base"], doc["depth"] = s.base, s.depth
        doc["changed"] = {fid: s.changed[fid].encode() for fid in sorted(s.changed)}
        doc["removed"] = s.removed
    return json.dumps(doc, separators=(",", ":")).encode()


def load(get: Callable[[int], SnapshotState], u: int) -> SnapshotState:
    """Snapshot ``u``'s whole state: its sidecar, and when that holds a change only,
    the chain of sidecars it is based on (``get(u)``: sidecar ``u`` decoded)."""
    top = get(u)
    chain = [top]
    while chain[-1].partial:
        base = chain[-1].base
        assert base is not None
        chain.append(get(base))
    files = dict(chain[-1].files)
    for s in reversed(chain[:-1]):
        for fid in s.removed:
            files.pop(fid, None)
        files.update(s.changed)
    top.files = files
    return top


def decode(data: bytes, name: str = "state") -> SnapshotState:
    """A sidecar read back (ValueError naming ``name`` when it is not one)."""
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        return SnapshotState(
            snapshot=doc["snapshot"],
            schema=doc["schema"],
            names={int(k): list(v) for k, v in doc["names"].items()},
            manifests=_bytes_back(doc["manifests"]),
            files={fid: FileRef.decode(raw) for fid, raw in doc.get("files", {}).items()},
            totals={k: int(v) for k, v in doc["totals"].items()},
            lost={int(k): list(v) for k, v in doc["lost"].items()},
            unreadable=[int(x) for x in doc.get("unreadable", ())],
            base=doc.get("base"),
            depth=int(doc.get("depth", 0)),
            changed={fid: FileRef.decode(raw) for fid, raw in doc.get("changed", {}).items()},
            removed=list(doc.get("removed", ())),
            chain=int(doc["chain"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"Iceberg snapshot sidecar {name} is not readable: {exc}") from None
