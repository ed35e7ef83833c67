"""Names of the objects the Iceberg metadata writer keeps under ``<url>/iceberg/``.

Every object is immutable once written (its content is a function of its name
and the lakehouse's history), so a name found in storage is a finished object::

    <table id>/metadata/<v:020d>-<o:020d>.metadata.json  metadata as of effective
                                 version v, written while the oldest retained
                                 version was o
    <table id>/metadata/snap-<u:020d>-b<b:020d>.avro   manifest list of snapshot u
    <table id>/metadata/<u:020d>-b<b:020d>-m<k>.avro   manifest k written at snapshot u
    <table id>/metadata/<u:020d>-b<b:020d>.state.json  the sidecar of snapshot u (state.py)
    <table id>/deletes/<u:020d>-<file id>.parquet  positional deletes of a file at u
    <table id>/deletes/<u:020d>-<file id>-m.parquet  the same, for the file's
                                 materialised copy
    <table id>/data/<file id>.parquet          a materialised data file
    <table id>/metadata/snap-<u:020d>-b<b:020d>-g<g>.avro,
    <table id>/metadata/<u:020d>-b<b:020d>-g<g>-m<k>.avro,
    <table id>/deletes/<u:020d>-<file id>-g<g>.parquet
                                 snapshot u remapped to name materialised files
                                 (generation g of lost names, see remap.py)

**Chains.** A snapshot's manifest list, manifests and sidecar depend on more
than ``u``: on the first snapshot of the run of snapshots that computed it (a
whole state at that version, parentless; every later snapshot reuses or
rewrites its predecessor's manifests). That first version ``b`` is the *chain*
and is part of those names (``-b<b>``). The chain of a metadata JSON
``<v>-<o>`` is always ``max(o, the table's creation as of v)``: so the same
name never gets two contents, whatever expiry did in between, a writer that
read an older oldest writes (and reads) only objects of its own chain, and a
crash leftover of one chain is never in the way of another. Positional delete
files (the data file's location and the deletion vector at ``u``) and
materialised files (one data file's rows) do not depend on the chain; a delete
file of a materialised copy names the copy, so it has a name of its own
(``-m``).

Names here are relative to the iceberg root; :func:`location` joins one to the
root's location (a plain absolute path for a local lakehouse, a URL otherwise).
Importing this module is cheap (no pyarrow, no fastavro).
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvstore.objstore import ObjectStore

_DIGITS = 20
_METADATA = re.compile(r"(\d{20})-(\d{20})\.metadata\.json$")
_STORES: dict[tuple[str, str], ObjectStore] = {}
_STORES_LOCK = threading.Lock()


def store(root: str, storage_options: dict[str, Any]) -> ObjectStore:
    """The iceberg store at ``root`` (its URL) with ``storage_options``, opened once
    per process and shared by the writer, garbage collection and the catalog."""
    key = (root, repr(sorted(storage_options.items())))
    with _STORES_LOCK:
        s = _STORES.get(key)
        if s is None:
            from kvstore.objstore import open_store

            s = _STORES[key] = open_store(root, storage_options)
        return s


def metadata_json(table_id: str, version: int, oldest: int) -> str:
    """The metadata JSON as of effective version ``version``, floor ``oldest``."""
    return f"{table_id}/metadata/{version:0{_DIGITS}d}-{oldest:0{_DIGITS}d}.metadata.json"


def parse_metadata_json(name: str) -> tuple[int, int] | None:
    """``(version, oldest)`` of a metadata JSON name (None: not one)."""
    m = _METADATA.search(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _gen(gen: str) -> str:
    return f"-g{gen}" if gen else ""


def _snap(snapshot: int, chain: int) -> str:
    return f"{snapshot:0{_DIGITS}d}-b{chain:0{_DIGITS}d}"


def manifest_list(table_id: str, snapshot: int, chain: int, gen: str = "") -> str:
    """Snapshot ``snapshot``'s manifest list in chain ``chain`` (``gen``: its
    remapped variant, see :mod:`lakehouse.iceberg.remap`)."""
    return f"{table_id}/metadata/snap-{_snap(snapshot, chain)}{_gen(gen)}.avro"


def manifest(table_id: str, snapshot: int, chain: int, k: int, gen: str = "") -> str:
    return f"{table_id}/metadata/{_snap(snapshot, chain)}{_gen(gen)}-m{k}.avro"


def state(table_id: str, snapshot: int, chain: int) -> str:
    """The sidecar of snapshot ``snapshot`` in chain ``chain``."""
    return f"{table_id}/metadata/{_snap(snapshot, chain)}.state.json"


def deletes(
    table_id: str, snapshot: int, file_id: str, gen: str = "", *, copy: bool = False
) -> str:
    """The positional deletes of ``file_id`` at ``snapshot`` (``copy``: naming its
    materialised copy; ``gen``: remapped to the copy)."""
    m = "-m" if copy else ""
    return f"{table_id}/deletes/{snapshot:0{_DIGITS}d}-{file_id}{m}{_gen(gen)}.parquet"


def materialised(table_id: str, file_id: str) -> str:
    return f"{table_id}/data/{file_id}.parquet"


def table_location(root: str, table_id: str) -> str:
    """The Iceberg table's ``location``."""
    return location(root, table_id)  # a table's objects are in the folder of its id


def location(root: str, name: str) -> str:
    """The absolute location of object ``name`` under the iceberg root ``root``."""
    return root.rstrip("/") + "/" + name


def relative(root: str, loc: str) -> str | None:
    """``name`` of a location :func:`location` built (None: not under ``root``)."""
    prefix = root.rstrip("/") + "/"
    return loc[len(prefix) :] if loc.startswith(prefix) else None
