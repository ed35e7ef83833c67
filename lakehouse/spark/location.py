"""Where a lakehouse's data files live, as Spark's driver and tasks reach them.

The one module of :mod:`lakehouse.spark` that touches fsspec. A
:class:`Location` is the absolute URL of the data directory plus the fsspec
``storage_options``, from ``lh.data_location()``; it is small and picklable,
so Python tasks on executors receive it and build their own filesystem
(cached per worker process). Paths handed around are relative to the data
directory, as in ``list_data_files(table)[i].path``.

``file://`` data directories are also readable and writable by the JVM
(``jvm`` is True), so Spark's own Parquet reader and writer serve them. The
JVM here has no S3 connector: on ``s3://`` data moves through Python tasks.
``memory://`` lives inside the driver process, where no task can reach it,
so :func:`location_of` refuses it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_FS_CACHE: dict[tuple[str, str], Any] = {}
_FS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Location:
    #: absolute URL of the data directory, no trailing slash
    base: str
    #: fsspec storage options (s3: endpoint_url, key, secret, ...)
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def scheme(self) -> str:
        return self.base.split("://", 1)[0] if "://" in self.base else "file"

    @property
    def jvm(self) -> bool:
        """Spark's JVM can read and write here (a local directory)."""
        return self.scheme == "file"

    def url(self, rel: str) -> str:
        """Absolute URL of a path relative to the data directory (or an absolute one)."""
        if "://" in rel:
            return rel
        if rel.startswith("/"):
            return "file://" + rel
        return f"{self.base}/{rel}"

    def fs_path(self, rel: str) -> str:
        """The path fsspec's filesystem for this location uses."""
        url = self.url(rel)
        if url.startswith("file://"):
            return url[len("file://") :]
        return url.split("://", 1)[1]

    def fs(self) -> Any:
        """The fsspec filesystem (one per process and location)."""
        key = (self.scheme, repr(sorted(self.options.items())))
        fs = _FS_CACHE.get(key)
        if fs is None:
            with _FS_LOCK:
                fs = _FS_CACHE.get(key)
                if fs is None:
                    import fsspec

                    opts = dict(self.options)
                    if self.scheme == "s3":
                        opts.setdefault("skip_instance_cache", True)
                        opts.setdefault("use_listings_cache", False)
                    fs = _FS_CACHE[key] = fsspec.filesystem(self.scheme, **opts)
        return fs

    # -- driver-side file management ---------------------------------------------------
    def list(self, rel_dir: str, prefix: str = "") -> list[str]:
        """Relative paths of the files directly in ``rel_dir`` whose name starts with
        ``prefix`` (empty when the directory does not exist)."""
        fs = self.fs()
        try:
            entries = fs.ls(self.fs_path(rel_dir), detail=False)
        except FileNotFoundError:
            return []
        out = []
        for e in entries:
            name = str(e).rstrip("/").rsplit("/", 1)[-1]
            if name.startswith(prefix):
                out.append(f"{rel_dir}/{name}")
        return sorted(out)

    def delete(self, rels: Iterable[str]) -> None:
        """Delete files, ignoring ones already gone."""
        fs = self.fs()
        for rel in rels:
            try:
                fs.rm(self.fs_path(rel), recursive=True)
            except FileNotFoundError:
                pass

    def rename(self, src: str, dst: str) -> None:
        """Move a file within a local data directory (atomic on one filesystem)."""
        assert self.jvm, "rename is used on local directories only"
        dst_path = self.fs_path(dst)
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
        os.rename(self.fs_path(src), dst_path)

    def open_output(self, rel: str) -> Any:
        """A writable binary file for a new data file (tasks)."""
        if self.jvm:
            path = self.fs_path(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return open(path, "wb")
        return self.fs().open(self.fs_path(rel), "wb")

    def read_tail(self, rel: str, size: int, n: int) -> bytes:
        """The ``n`` bytes of a file of ``size`` bytes before its end (fewer if shorter)."""
        start = max(0, size - n)
        if self.jvm:
            with open(self.fs_path(rel), "rb") as f:
                f.seek(start)
                return f.read(size - start)
        return bytes(self.fs().cat_file(self.fs_path(rel), start=start, end=size))

    def open_input(self, rel: str) -> Any:
        """A readable binary file of a data file (tasks)."""
        if self.jvm:
            return open(self.fs_path(rel), "rb")
        return self.fs().open(self.fs_path(rel), "rb")


def location_of(lh: Any) -> Location:
    """The :class:`Location` of a lakehouse's data directory (ValueError for memory://)."""
    base, options = lh.data_location()
    base = base.rstrip("/")
    loc = Location(base, dict(options or {}))
    if loc.scheme == "file":
        if not base.startswith("file://"):
            loc = Location("file://" + os.path.abspath(base), loc.options)
    elif loc.scheme == "memory":
        raise ValueError(
            "lakehouse.spark needs the lakehouse's data on a local directory or an object "
            "store: memory:// lives inside the driver process, where Spark tasks cannot "
            "reach it"
        )
    return loc
