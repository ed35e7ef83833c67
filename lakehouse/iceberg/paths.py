"""Names of the objects the Iceberg metadata writer keeps under ``<url>/iceberg/``.

Every object is immutable once written (its content is a function of its name
and the lakehouse's history), so a name found in storage is a finished object::

    <table id>/metadata/<v:020d>-<o:020d>.metadata.json  metadata as of effective
                                 version v, written while the oldest retained
                                 version was o
    <table id>/metadata/snap-<u:020d>.avro     manifest list of snapshot u
    <table id>/metadata/<u:020d>-m<k>.avro     manifest k written at snapshot u
    <table id>/metadata/<u:020d>.state.json    the sidecar of snapshot u (state.py)
    <table id>/deletes/<u:020d>-<file id>.parquet  positional deletes of a file at u
    <table id>/data/<file id>.parquet          a materialised data file
    <table id>/metadata/snap-<u:020d>-g<g>.avro, <u:020d>-g<g>-m<k>.avro,
    <table id>/deletes/<u:020d>-<file id>-g<g>.parquet
                                 snapshot u remapped to name materialised files
                                 (generation g of lost names, see remap.py)

Names here are relative to the iceberg root; :func:`location` joins one to the
root's location (a plain absolute path for a local lakehouse, a URL otherwise).
Importing this module is cheap (no pyarrow, no fastavro).
"""

from __future__ import annotations

import re

_DIGITS = 20
_METADATA = re.compile(r"(\d{20})-(\d{20})\.metadata\.json$")


def table_dir(table_id: str) -> str:
    """The folder of one table's objects."""
    return table_id


def metadata_dir(table_id: str) -> str:
    return f"{table_id}/metadata"


def metadata_json(table_id: str, version: int, oldest: int) -> str:
    """The metadata JSON as of effective version ``version``, floor ``oldest``."""
    return f"{table_id}/metadata/{version:0{_DIGITS}d}-{oldest:0{_DIGITS}d}.metadata.json"


def parse_metadata_json(name: str) -> tuple[int, int] | None:
    """``(version, oldest)`` of a metadata JSON name (None: not one)."""
    m = _METADATA.search(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _gen(gen: str) -> str:
    return f"-g{gen}" if gen else ""


def manifest_list(table_id: str, snapshot: int, gen: str = "") -> str:
    """Snapshot ``snapshot``'s manifest list (``gen``: its remapped variant, see
    :mod:`lakehouse.iceberg.remap`)."""
    return f"{table_id}/metadata/snap-{snapshot:0{_DIGITS}d}{_gen(gen)}.avro"


def manifest(table_id: str, snapshot: int, k: int, gen: str = "") -> str:
    return f"{table_id}/metadata/{snapshot:0{_DIGITS}d}{_gen(gen)}-m{k}.avro"


def state(table_id: str, snapshot: int) -> str:
    return f"{table_id}/metadata/{snapshot:0{_DIGITS}d}.state.json"


def deletes(table_id: str, snapshot: int, file_id: str, gen: str = "") -> str:
    return f"{table_id}/deletes/{snapshot:0{_DIGITS}d}-{file_id}{_gen(gen)}.parquet"


def materialised(table_id: str, file_id: str) -> str:
    return f"{table_id}/data/{file_id}.parquet"


def table_location(root: str, table_id: str) -> str:
    """The Iceberg table's ``location``."""
    return location(root, table_dir(table_id))


def location(root: str, name: str) -> str:
    """The absolute location of object ``name`` under the iceberg root ``root``."""
    return root.rstrip("/") + "/" + name


def relative(root: str, loc: str) -> str | None:
    """``name`` of a location :func:`location` built (None: not under ``root``)."""
    prefix = root.rstrip("/") + "/"
    return loc[len(prefix) :] if loc.startswith(prefix) else None
