"""Object storage: the one package that touches the filesystem or fsspec.

:func:`open_store` turns a URL into a store:

=========================  ==============================================
``/abs/dir``, ``rel/dir``  :class:`LocalStore` (a local directory)
``file:///abs/dir``        :class:`LocalStore`
``memory://name``          :class:`MemoryStore` (process-local, for tests)
``s3://bucket/prefix``     :class:`FsspecStore` over s3fs
``<proto>://...``          :class:`FsspecStore` over that fsspec protocol
=========================  ==============================================
"""

from __future__ import annotations

import os
from typing import Any

from kvstore.objstore.base import (
    DurabilityUnknown,
    Journal,
    ObjectStore,
    RangeReader,
    SimpleRangeReader,
)
from kvstore.objstore.faults import FaultyStore, SimulatedCrash
from kvstore.objstore.fsspec_store import FsspecStore
from kvstore.objstore.local import LocalStore
from kvstore.objstore.memory import MemoryStore

__all__ = [
    "DurabilityUnknown",
    "FaultyStore",
    "FsspecStore",
    "Journal",
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "RangeReader",
    "SimpleRangeReader",
    "SimulatedCrash",
    "open_store",
]


def open_store(
    url: str | os.PathLike[str] | ObjectStore,
    storage_options: dict[str, Any] | None = None,
    *,
    create: bool = True,
) -> ObjectStore:
    """Resolve ``url`` to an object store (a store instance passes through).

    With ``create=False`` a local directory that does not exist raises
    FileNotFoundError instead of being created (readers never create stores).
    """
    if isinstance(url, os.PathLike):
        return LocalStore(url, create=create)
    if not isinstance(url, str):
        if isinstance(url, ObjectStore):
            return url
        raise TypeError(f"url must be a str, os.PathLike or ObjectStore, not {type(url).__name__}")
    if not url:
        raise ValueError("url must not be empty")
    if "://" not in url:
        return LocalStore(url, create=create)
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "file":
        return LocalStore(rest if rest.startswith("/") else "/" + rest, create=create)
    if scheme == "memory":
        if not rest:
            raise ValueError("memory:// URL needs a name, e.g. memory://test")
        return MemoryStore.named(rest)
    if not rest:
        raise ValueError(f"{url!r}: missing bucket or path")
    return FsspecStore(scheme, rest, storage_options)
