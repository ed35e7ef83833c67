"""Where a lakehouse keeps things: the one module that builds locations.

Under the lakehouse URL::

    <url>/meta/      the kvstore holding the tree, definitions and versions
    <url>/data/      table data files (paths in table state are relative to it)
    <url>/iceberg/   Iceberg metadata written for other engines (lakehouse.iceberg)

``memory://name`` becomes ``memory://name/meta`` and ``memory://name/data``.
An :class:`~kvstore.ObjectStore` instance (tests pass a ``FaultyStore``) holds
the kvstore itself; data files then go to ``data_store`` if given, else under
``lakehouse-data/`` inside the same store (kvstore only ever touches its own
``manifest/``, ``wal/`` and ``sst/`` names).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kvstore.objstore import ObjectStore, PrefixStore, local_path, open_store

META_DIR = "meta"
DATA_DIR = "data"
ICEBERG_DIR = "iceberg"
INSTANCE_DATA_PREFIX = "lakehouse-data/"


@dataclass(frozen=True)
class Layout:
    #: what kvstore.open receives: a URL/path or a store instance
    meta: str | ObjectStore
    #: where data files live
    data: ObjectStore
    #: absolute URL of the data directory (None for store instances)
    data_url: str | None
    #: printable location
    label: str
    #: a reader found no data directory yet (``data`` is an empty stand-in)
    data_missing: bool = False
    #: where Iceberg metadata goes (:mod:`lakehouse.iceberg`): a plain absolute path
    #: for a local lakehouse, else a URL; None for store instances
    iceberg_url: str | None = None


def _join(url: str, part: str) -> str:
    if "://" in url:
        return url.rstrip("/") + "/" + part
    return os.path.join(url, part)


def resolve(
    url: Any,
    storage_options: dict[str, Any] | None = None,
    data_store: ObjectStore | None = None,
    *,
    create: bool = True,
) -> Layout:
    """Turn ``lakehouse.open``'s first argument into a :class:`Layout`."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if isinstance(url, str):
        if not url:
            raise ValueError("url must not be empty")
        base = url if "://" in url else os.path.abspath(url)
        data_url = _join(base, DATA_DIR)
        missing = False
        if data_store is not None:
            data = data_store
        elif create or "://" in data_url or os.path.isdir(data_url):
            data = open_store(data_url, storage_options)
        else:  # a reader of a lakehouse without data yet: nothing to read, nothing to create
            from kvstore.objstore import MemoryStore

            data, missing = MemoryStore(), True
        if "://" not in data_url:
            data_url = "file://" + data_url
        iceberg_url = _join(base, ICEBERG_DIR).removeprefix("file://")
        return Layout(_join(base, META_DIR), data, data_url, url, missing, iceberg_url)
    if isinstance(url, ObjectStore):
        data = data_store if data_store is not None else PrefixStore(url, INSTANCE_DATA_PREFIX)
        return Layout(url, data, None, url.describe())
    raise TypeError(f"url must be a str, os.PathLike or ObjectStore, not {type(url).__name__}")


def exists(url: Any, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a lakehouse (its kvstore) exists at ``url``; creates nothing."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        return bool(url.list(""))  # a store instance
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        meta = os.path.join(os.path.abspath(url), META_DIR)
        return os.path.isdir(meta) and bool(open_store(meta).list(""))
    return bool(open_store(_join(url, META_DIR), storage_options).list(""))


def refuse_foreign(url: Any, storage_options: dict[str, Any] | None = None) -> None:
    """Refuse a URL that is itself a kvstore (a plain store, or a lakehouse's ``meta/``)."""
    from lakehouse.errors import AlreadyExists

    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        if isinstance(url, ObjectStore):
            return
        raise TypeError(f"url must be a str, os.PathLike or ObjectStore, not {type(url).__name__}")
    if not url:
        raise ValueError("url must not be empty")
    local_path(url)  # refuses a mistyped URL (memory:/x, s3:/b) before anything is created
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        path = os.path.abspath(url)
        if os.path.isfile(path):
            raise AlreadyExists(f"{path} is a file, not a lakehouse directory")
        found = os.path.isdir(os.path.join(path, "manifest"))
    else:
        if url.startswith("memory://"):
            return  # memory:// lakehouses keep meta/ and data/ under their name
        found = bool(open_store(url, storage_options).list("manifest/"))
    if found:
        raise AlreadyExists(
            f"{url} is a key-value store (it has manifest/), not a lakehouse; a lakehouse "
            f"keeps its store under <url>/{META_DIR}/: open the lakehouse's own URL"
        )
