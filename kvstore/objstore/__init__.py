"""Object storage: the one package that touches the filesystem or fsspec.

:func:`open_store` turns a URL into a store:

=========================  ==============================================
``/abs/dir``, ``rel/dir``  :class:`LocalStore` (a local directory)
``file:///abs/dir``        :class:`LocalStore`
``memory://name``          :class:`MemoryStore` (process-local, for tests)
``s3://bucket/prefix``     :class:`FsspecStore` over s3fs
``gs://``, ``az://`` ...   :class:`FsspecStore` over that fsspec object store
=========================  ==============================================

Anything else (``ftp://``, ``http://``, ``file://host/dir``) is refused with a
ValueError naming the URL: a store needs atomic create-if-absent, which only
object stores and local directories give. A string that starts with a known
scheme and a colon but not ``scheme://`` (``memory:/x``, ``s3:/b``) is a
mistyped URL: ValueError, never a local directory. A local path that is a regular
file raises NotADirectoryError.
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
from kvstore.objstore.prefix import PrefixStore

__all__ = [
    "DurabilityUnknown",
    "FaultyStore",
    "FsspecStore",
    "Journal",
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "PrefixStore",
    "RangeReader",
    "SimpleRangeReader",
    "SimulatedCrash",
    "local_path",
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
    path = local_path(url)
    if path is not None:
        return LocalStore(path, create=create)
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "memory":
        if not rest:
            raise ValueError("memory:// URL needs a name, e.g. memory://test")
        return MemoryStore.named(rest)
    if scheme not in OBJECT_SCHEMES:
        raise ValueError(
            f"url {url!r}: unsupported scheme {scheme!r}; use a local directory, "
            "file:///abs/dir, memory://name or s3://bucket/prefix"
        )
    if not rest.strip("/"):
        raise ValueError(f"url {url!r}: missing bucket or path")
    try:
        return FsspecStore(scheme, rest, storage_options)
    except ImportError as exc:
        raise ValueError(f"url {url!r}: {scheme}:// needs a package: {exc}") from None
    except TypeError as exc:  # e.g. a storage option the filesystem does not take
        raise ValueError(f"url {url!r}: bad storage_options: {exc}") from None


#: URL schemes served through fsspec (object stores with conditional creates)
OBJECT_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})

#: schemes a string starting ``<scheme>:`` without ``//`` is a mistyped URL of
#: (never a local directory named ``memory:``)
KNOWN_SCHEMES = OBJECT_SCHEMES | {"file", "memory", "http", "https", "ftp", "sftp", "hdfs"}


def local_path(url: str) -> str | None:
    """The directory a local URL names (a plain path or ``file:///abs/dir``), else None.

    ``file://`` URLs must carry an absolute path (``file:///abs`` or
    ``file://localhost/abs``): ``file://rel/x`` names host ``rel``, and is
    refused with a ValueError rather than read as ``/rel/x``.
    """
    if "://" not in url:
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme in KNOWN_SCHEMES:  # memory:/x, s3:/b: a mistyped URL, not a directory
            rest = url.split(":", 1)[1].lstrip("/")
            meant = f"file:///{rest}" if scheme == "file" else f"{scheme}://{rest}"
            raise ValueError(
                f"url {url!r} starts with {scheme}: but not {scheme}://; write {meant}"
            )
        return url
    scheme, rest = url.split("://", 1)
    if scheme.lower() != "file":
        return None
    if rest.startswith("localhost/"):
        rest = rest[len("localhost") :]
    if not rest.startswith("/"):
        raise ValueError(
            f"url {url!r}: a file:// URL needs an absolute path, as in file:///abs/dir "
            f"(here {rest.split('/', 1)[0]!r} would be a host name); for a relative "
            "directory pass the path itself"
        )
    return rest
