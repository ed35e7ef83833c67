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

Journals (the WAL) are files written with ``pwrite`` at the journal's own
write position into zeros written ahead of it; ``sync`` is ``fdatasync``. An
``fdatasync`` after a small append to a growing file must also commit the new
file size (and into ``posix_fallocate``d space, an extent conversion); over
blocks already written it flushes data only, the limit of a durable commit::

    0                      pos (written)                       allocated end
    | segment header | frames ...  | zeros (written, synced)  |
                                   ^ the next pwrite

* a pre-writer thread keeps at least half of ``JOURNAL_PREALLOCATE`` of
  written, synced zeros ahead of the write position; a write that would reach
  the allocated end (the thread fell behind, or a new segment) first
  pre-writes to the next multiple of the step past it itself, so every frame
  lands in zeros that are already durable, with at least one zero byte after
  it (docs/format/wal.md, "Pre-written segments");
* ``close`` truncates the file to ``pos`` (and fdatasyncs): a closed journal
  holds exactly its content, with no padding;
* a crash leaves the zero padding, and a reader of a live journal sees it:
  the WAL decoder cuts it (the torn-tail rule in ``kvstore/format/wal.py``);
* where a pre-write fails with EOPNOTSUPP, EINVAL, ENOSYS or ENOSPC, the
  journal falls back to plain appends;
* with ``fsync=False`` nothing is pre-written (it only makes syncs cheaper).

Journals are only ever created (``O_EXCL``), never reopened for appending.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import struct
import threading
import weakref
from typing import Any, cast

from kvstore.objstore.base import DurabilityUnknown, Journal, RangeReader, check_name
from kvstore.objstore.writer_lock import WriterLocks

log = logging.getLogger("kvstore.objstore")

_TMP_PREFIX = ".tmp-"
_U64 = struct.Struct("<Q")

#: journals are pre-written with zeros in steps of this many bytes (0: never). Each step
#: costs one extra fdatasync (a few thousand small commits apart); a reader of a
#: live journal reads up to one step of zero padding on every refresh.
JOURNAL_PREALLOCATE = 1 << 20

#: whether a thread pre-writes ahead of the write position (off: append does it)
PREWRITE_IN_BACKGROUND = True

#: errors of a pre-write after which a journal falls back to plain appends
_NO_PREALLOCATION = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS, errno.ENOSPC}
)


class LocalStore:
    supports_journal = True

    def __init__(
        self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        #: fsync files and directories (False: a test or scratch store; ``kvstore.open``
        #: clears it for ``fsync=False``)
        self.fsync = fsync
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise NotADirectoryError(f"not a kvstore: {self.root} is a file, not a directory")
        if create and not os.path.isdir(self.root):
            try:
                os.makedirs(self.root, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise NotADirectoryError(
                    f"cannot create a kvstore at {self.root}: a part of that path is a "
                    "file, not a directory"
                ) from None
            self._fsync_dir(os.path.dirname(self.root))  # the new directory's entry
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
        if not self.fsync:
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
            if self.fsync:
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
        self._fsync_entry(parent, name)

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
        self._fsync_entry(parent, name)

    def put_new(self, name: str, data: bytes) -> None:
        """Create ``name``, which must not exist, durably, *without* hiding it while
        it is written: for objects nobody reads before this returns (data files
        referenced only by a later commit; a crash leaves an orphan, never a torn
        object anyone trusts). Written in place with O_EXCL, one file fsync makes
        the bytes and (on journaling filesystems) the new name durable together,
        so the directory fsync after it has little left to do; ``put_if_absent``
        pays a link and a second journal commit for its atomic visibility."""
        path = self._path(name)
        parent = self._ensure_parent(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(path)
            raise
        os.close(fd)
        self._fsync_entry(parent, name)

    def _fsync_entry(self, parent: str, name: str) -> None:
        """Make a new directory entry durable; DurabilityUnknown if that fails."""
        try:
            self._fsync_dir(parent)
        except OSError as exc:
            raise DurabilityUnknown(
                exc.errno, f"{name} was written but fsync of its directory failed: {exc}"
            ) from exc

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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._fsync_dir(parent)
        step = JOURNAL_PREALLOCATE if self.fsync else 0
        return _FileJournal(name, fd, self.fsync, preallocate=step)

    def open_epoch_cell(self, name: str) -> EpochCell:
        """A shared 8-byte counter (memory-mapped) that writers use as a fencing hint."""
        path = self._path(name)
        self._ensure_parent(path)
        return EpochCell(path)

    def writer_locks(self) -> WriterLocks:
        """The locks that tell a live writer of this directory from a crashed one."""
        return WriterLocks(self.root)

    def arrow_filesystem(self) -> tuple[Any, str]:
        """``(pyarrow FileSystem, root path)`` for engines that read many objects at
        once (the lakehouse's Parquet scans use Arrow's parallel dataset reader)."""
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), self.root

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
        return cast(int, _U64.unpack_from(self._map)[0])

    def raise_to(self, value: int) -> None:
        if value > self.read():
            self._map[:8] = value.to_bytes(8, "little")

    def close(self) -> None:
        self._map.close()


class _FileJournal:
    """A new, empty file written at its own position into zeros written ahead of it.

    ``preallocate`` is the pre-write step in bytes (0: plain appends). The file
    is never opened ``O_APPEND``: on Linux that makes ``pwrite`` ignore its
    offset. A pre-writer thread keeps at least half a step of written, synced
    zeros ahead of the write position, so a commit's ``fdatasync`` flushes
    data only (no size or extent change); if it falls behind, ``append``
    pre-writes the step itself.
    """

    def __init__(self, name: str, fd: int, fsync: bool, *, preallocate: int = 0) -> None:
        if preallocate < 0:
            raise ValueError(f"preallocate must be >= 0, got {preallocate}")
        self.name = name
        self._fd = fd
        self._fsync = fsync
        self._step = preallocate
        self._pos = 0  # end of what was written: the next write goes here
        self._allocated = 0  # end of the written, synced zeros
        self._ext_lock = threading.Lock()  # one pre-write at a time
        self._want = threading.Event()
        self._prewriter: threading.Thread | None = None
        #: pre-writes done by the thread / by append (it fell behind); for tests
        self.prewrites = [0, 0]

    def append(self, data: bytes) -> None:
        end = self._pos + len(data)
        if self._step and end >= self._allocated:
            with self._ext_lock:
                if self._step and end >= self._allocated:
                    self._prewrite_locked(end)
                    self.prewrites[1] += 1
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, self._pos)
            self._pos += written
            view = view[written:]
        if self._step and self._allocated - self._pos < self._step // 2 and not self._want.is_set():
            self._wake_prewriter()

    def _prewrite_locked(self, end: int) -> None:
        """Write and sync zeros from the end of the written space to the next
        multiple of the step strictly past ``end`` (the lock held). Where that
        cannot be done (a full disk), fall back to plain appends."""
        start = self._allocated
        target = (max(start, end) // self._step + 1) * self._step
        try:
            _write_zeros(self._fd, start, target - start)
            if self._fsync:
                os.fdatasync(self._fd)  # the zeros and the size are durable before use
        except OSError as exc:
            if exc.errno not in _NO_PREALLOCATION:
                raise
            log.info("%s: cannot pre-write (%s), appending instead", self.name, exc)
            self._step = 0
            return
        self._allocated = target

    def _wake_prewriter(self) -> None:
        if not PREWRITE_IN_BACKGROUND:
            return
        if self._prewriter is None:
            ref = weakref.ref(self)
            self._prewriter = threading.Thread(
                target=_prewrite_loop,
                args=(ref, self._want),
                name="kvstore-wal-prewrite",
                daemon=True,
            )
            self._prewriter.start()
        self._want.set()

    def _prewrite_ahead(self) -> None:
        """The pre-writer's step: keep at least half a step of zeros ahead."""
        with self._ext_lock:
            if self._fd >= 0 and self._step and self._allocated - self._pos < self._step // 2:
                self._prewrite_locked(self._pos)
                self.prewrites[0] += 1

    def sync(self) -> None:
        if self._fsync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        """Trim the pre-written tail (a closed journal is exactly its content), close."""
        with self._ext_lock:  # no pre-write runs from here on
            fd = self._fd
            if fd < 0:
                return
            self._fd = -1
        self._want.set()  # the pre-writer sees the closed file and ends
        try:
            if os.fstat(fd).st_size > self._pos:
                os.ftruncate(fd, self._pos)
                if self._fsync:
                    os.fdatasync(fd)
        except OSError as exc:  # the zero padding stays; readers cut it
            log.warning("%s: could not trim the pre-written tail: %s", self.name, exc)
        finally:
            os.close(fd)


def _write_zeros(fd: int, start: int, length: int) -> None:
    view = memoryview(bytes(length))
    while view:
        written = os.pwrite(fd, view, start)
        start += written
        view = view[written:]


def _prewrite_loop(ref: weakref.ref[_FileJournal], want: threading.Event) -> None:
    """A journal's pre-writer: wakes when asked (or every second), ends with it."""
    while True:
        want.wait(1.0)
        want.clear()
        journal = ref()
        if journal is None or journal._fd < 0:
            return
        try:
            journal._prewrite_ahead()
        except OSError as exc:  # append pre-writes itself, and raises there
            log.warning("%s: pre-writing the journal failed: %s", journal.name, exc)
        del journal


class _FdReader:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def view(self) -> memoryview | None:
        """The whole (immutable) file, memory-mapped read-only; None if it cannot be.

        Point reads search blocks in place through this view instead of copying
        them out with ``pread``. The mapping outlives ``close`` and an unlink of
        the file; it is unmapped when the last view of it is dropped.
        """
        import mmap

        from kvstore._accel import speedups

        try:
            size = os.fstat(self._fd).st_size
            if size == 0:
                return None
            if speedups is not None and hasattr(speedups, "map_file"):
                # no duplicate file descriptor (mmap.mmap keeps one per mapping)
                return memoryview(speedups.map_file(self._fd, size))
            return memoryview(mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ))
        except (OSError, ValueError):
            return None

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
