"""A local directory as an object store.

Atomic create (``put_if_absent``)::

    write  <dir>/.tmp-<random>        the whole object
    fsync  the temp file
    link   temp -> final              os.link: atomic, FileExistsError if taken
    unlink temp
    fsync  the directory              the new name survives a power cut

``open(p, "xb")`` alone would be atomic for the name but lets a reader see a
half-written file; a plain rename would overwrite. ``put`` uses the same
steps with ``os.replace``. Leftover ``.tmp-*`` files from a crash are never
listed and are removed by :meth:`LocalStore.cleanup_temp`.

Journals (the WAL) are plain files opened ``O_APPEND``; ``sync`` is
``fdatasync``.
"""

from __future__ import annotations

import os
import secrets
import threading

from kvstore.objstore.base import Journal, RangeReader, check_name

_TMP_PREFIX = ".tmp-"


class LocalStore:
    supports_journal = True

    def __init__(
        self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._fsync = fsync
        if create:
            os.makedirs(self.root, exist_ok=True)
        elif not os.path.isdir(self.root):
            raise FileNotFoundError(f"no kvstore at {self.root} (directory does not exist)")
        self._known_dirs: set[str] = set()
        self._dir_lock = threading.Lock()

    # -- paths ------------------------------------------------------------
    def _path(self, name: str) -> str:
        return os.path.join(self.root, *check_name(name).split("/"))

    def _ensure_parent(self, path: str) -> str:
        parent = os.path.dirname(path)
        if parent not in self._known_dirs:
            with self._dir_lock:
                if not os.path.isdir(parent):
                    os.makedirs(parent, exist_ok=True)
                    self._fsync_dir(os.path.dirname(parent))
                self._known_dirs.add(parent)
        return parent

    def _fsync_dir(self, path: str) -> None:
        if not self._fsync:
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_temp(self, parent: str, data: bytes) -> str:
        tmp = os.path.join(parent, _TMP_PREFIX + secrets.token_hex(8))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    # -- the interface ----------------------------------------------------
    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        parent = self._ensure_parent(path)
        tmp = self._write_temp(parent, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        self._fsync_dir(parent)

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self._path(name)
        parent = self._ensure_parent(path)
        if os.path.exists(path):
            raise FileExistsError(name)
        tmp = self._write_temp(parent, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise FileExistsError(name) from None
        finally:
            _unlink_quietly(tmp)
        self._fsync_dir(parent)

    def get(self, name: str) -> bytes:
        try:
            with open(self._path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def get_range(self, name: str, start: int, length: int) -> bytes:
        try:
            fd = os.open(self._path(name), os.O_RDONLY)
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def list(self, prefix: str = "") -> list[str]:
        # Walk only the directory the prefix points into.
        dir_part, _, _ = prefix.rpartition("/")
        base = os.path.join(self.root, *dir_part.split("/")) if dir_part else self.root
        out: list[str] = []
        if not os.path.isdir(base):
            return out
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            dirnames[:] = [
                d
                for d in dirnames
                if (rel + d + "/").startswith(prefix) or prefix.startswith(rel + d + "/")
            ]
            for fn in filenames:
                if fn.startswith(_TMP_PREFIX):
                    continue
                full = rel + fn
                if full.startswith(prefix):
                    out.append(full)
        out.sort()
        return out

    def delete(self, name: str) -> None:
        _unlink_quietly(self._path(name))

    def exists(self, name: str) -> bool:
        return os.path.exists(self._path(name))

    def size(self, name: str) -> int:
        try:
            return os.stat(self._path(name)).st_size
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def open_journal(self, name: str) -> Journal | None:
        path = self._path(name)
        parent = self._ensure_parent(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._fsync_dir(parent)
        return _FileJournal(name, fd, self._fsync)

    def open_epoch_cell(self, name: str) -> EpochCell:
        """A shared 8-byte counter (memory-mapped) that writers use as a fencing hint."""
        path = self._path(name)
        self._ensure_parent(path)
        return EpochCell(path)

    def open_range_reader(self, name: str) -> RangeReader:
        try:
            fd = os.open(self._path(name), os.O_RDONLY)
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        return _FdReader(fd)

    def describe(self) -> str:
        return self.root

    def cleanup_temp(self) -> int:
        """Remove temp files left by a crash; returns how many."""
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for fn in files:
                if fn.startswith(_TMP_PREFIX):
                    _unlink_quietly(os.path.join(dirpath, fn))
                    removed += 1
        return removed


class EpochCell:
    """An 8-byte little-endian counter in a shared memory mapping.

    Reading it is a plain memory access: no system call, so no GIL release
    (a ``stat`` per write can cost a whole GIL switch interval when another
    thread is busy). It is only a hint for fencing; the manifest decides.
    """

    def __init__(self, path: str) -> None:
        import mmap

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < 8:
                os.ftruncate(fd, 8)
            self._map = mmap.mmap(fd, 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def read(self) -> int:
        return int.from_bytes(self._map[:8], "little")

    def raise_to(self, value: int) -> None:
        if value > self.read():
            self._map[:8] = value.to_bytes(8, "little")

    def close(self) -> None:
        self._map.close()


class _FileJournal:
    def __init__(self, name: str, fd: int, fsync: bool) -> None:
        self.name = name
        self._fd = fd
        self._fsync = fsync

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def sync(self) -> None:
        if self._fsync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _FdReader:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
