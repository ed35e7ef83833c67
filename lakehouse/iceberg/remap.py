"""Older snapshots under a newer name mapping: their remapped manifest lists.

A metadata JSON has one name mapping for every snapshot it lists. When a column
is dropped and another added under its name, the name goes to the newer id, and
the data files that use it for the older id are materialised with field ids
(:mod:`lakehouse.iceberg.snapshots` does it for the snapshots it writes from then
on). Snapshots written *before* the name moved still name those files by their
original paths, which the new mapping would read wrongly (the old column as
null). So a metadata JSON whose mapping lost names that snapshot ``u`` did not
know (``u``'s sidecar records the names lost as of ``u``) lists ``u`` with a
remapped manifest list instead, generation ``g`` (8 hex digits of the CRC-32C of
the lost names)::

    snap-<u>-b<b>-g<g>.avro   the manifests of u, those naming an affected file
    <u>-b<b>-g<g>-m<k>.avro   rewritten: the materialised file's location and size,
    deletes/<..>-g<g>.parquet and its positional deletes re-pointed at it

(``b``: u's chain, see :mod:`lakehouse.iceberg.paths`; the remapped delete file
holds the positions of the one it was remapped from and the copy's location,
so it does not depend on the chain)

Everything else about snapshot ``u`` (id, sequence numbers, entries, counts) is
unchanged; objects are immutable and deterministic like every other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from crc32c import crc32c
from pyroaring import BitMap

from lakehouse.iceberg import avro, files, paths
from lakehouse.iceberg.objects import (
    ManifestWriter,
    Target,
    materialise,
    put,
    read_entries,
    uses_lost,
)
from lakehouse.iceberg.state import SnapshotState
from lakehouse.view import LakehouseView


def generation(lost: Mapping[int, set[str]]) -> str:
    """The generation that names the objects remapped for ``lost``."""
    text = json.dumps(sorted((k, sorted(v)) for k, v in lost.items() if v))
    return f"{crc32c(text.encode()):08x}"


def affected(
    names: Mapping[int, list[str]], known: Mapping[int, list[str]], lost: Mapping[int, set[str]]
) -> dict[int, set[str]]:
    """The lost names a snapshot's files may use (``names``) that it did not know
    were lost (``known``)."""
    out: dict[int, set[str]] = {}
    for cid, ns in lost.items():
        fresh = (ns - set(known.get(cid, ()))) & set(names.get(cid, ()))
        if fresh:
            out[cid] = fresh
    return out


def _path_bound(df: Mapping[str, Any]) -> str | None:
    for kv in df.get("lower_bounds") or ():
        if kv["key"] == files.FILE_PATH_ID:
            return bytes(kv["value"]).decode()
    return None


def remapped_list(
    t: Target,
    view: LakehouseView,
    table: str,
    state: SnapshotState,
    fresh: Mapping[int, set[str]],
    gen: str,
) -> str | None:
    """The location of snapshot ``state``'s manifest list remapped for the lost names
    ``fresh`` (``view``: the lakehouse at that version, ``table`` the table's
    qualified name); None when no file of the snapshot uses them."""
    u = state.version
    name = paths.manifest_list(t.table_id, u, state.chain, gen)
    if t.store.exists(name):
        return paths.location(t.root, name)
    d = view.describe_table(table)
    lazy = view.files_by_id(table)
    moved: dict[str, tuple[str, int]] = {}
    for fid, ref in sorted(state.files.items()):
        if ref.path.startswith(t.root):
            continue  # materialised already
        f, _ = lazy[fid]
        if uses_lost(f, fresh):
            moved[ref.path] = materialise(t, fid, f)
    if not moved:
        return None
    c = ManifestWriter(t, u, d, state.schema, gen=gen, chain=state.chain)
    rows = []
    for row in state.manifests:
        mname = paths.relative(t.root, str(row["manifest_path"]))
        assert mname is not None
        spec_id = int(row["partition_spec_id"])
        entries = read_entries(t, mname, c.partition_fields(spec_id))
        changed = False
        for e in entries:
            df = e["data_file"]
            if row["content"] == avro.MANIFEST_DATA and df["file_path"] in moved:
                df["file_path"], df["file_size_in_bytes"] = moved[df["file_path"]]
                changed = True
            elif row["content"] == avro.MANIFEST_DELETES:
                target = _path_bound(df)
                if target in moved:
                    _repoint(c, df, moved[target][0], gen)
                    changed = True
        if not changed:
            rows.append(row)
            continue
        content = "data" if row["content"] == avro.MANIFEST_DATA else "deletes"
        _, new_row = c.write_manifest(entries, content, spec_id)
        rows.append(
            {
                **row,
                "manifest_path": new_row["manifest_path"],
                "manifest_length": new_row["manifest_length"],
            }
        )
    parent = state.snapshot.get("parent-snapshot-id")
    put(
        t.store,
        name,
        avro.manifest_list_bytes(rows, snapshot_id=u, parent_id=parent, sequence_number=u),
    )
    return paths.location(t.root, name)


def _repoint(c: ManifestWriter, df: dict[str, Any], data_path: str, gen: str) -> None:
    """Positional delete file ``df`` rewritten for the data file at ``data_path``."""
    old = paths.relative(c.t.root, str(df["file_path"]))
    assert old is not None
    name = old.removesuffix(".parquet") + f"-g{gen}.parquet"
    try:  # one request when it exists
        size = c.t.store.size(name)
    except FileNotFoundError:
        rows = pq.read_table(pa.BufferReader(c.t.store.get(old)))
        positions = BitMap(rows.column("pos").to_numpy().astype("uint32"))
        data = files.position_deletes_bytes(data_path, positions)
        put(c.t.store, name, data)
        size = len(data)
    bound = data_path.encode()
    df["file_path"] = paths.location(c.t.root, name)
    df["file_size_in_bytes"] = size
    df["lower_bounds"] = [{"key": files.FILE_PATH_ID, "value": bound}]
    df["upper_bounds"] = [{"key": files.FILE_PATH_ID, "value": bound}]
