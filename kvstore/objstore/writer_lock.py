"""Who writes a local store: OS file locks that die with their process.

A store directory can tell a live writer from a crashed one: every open
writer handle holds an exclusive ``flock`` on a file of its own, and the
kernel drops that lock when the handle closes it or the process dies
(``kill -9`` included). Layout inside the store directory::

    writer.lock             the open mutex: flocked only while a writer opens
    writers/<nonce>.lock    one per open writer handle, flocked for its life,
                            holding a JSON owner record (pid, host, opened, epoch)

Opening a writer::

    lock writer.lock (waits for another open to finish)
      for each writers/*.lock: flock succeeds -> its holder is gone: delete it
                               flock fails    -> live: read its owner record
      (the caller decides: refuse, or take over and fence)
      create writers/<mine>.lock, flock it, write my record
      ... claim the store (manifest), record my writer epoch ...
    unlock writer.lock

A handle in the same process conflicts like another process: ``flock`` locks
belong to open file descriptions, not to processes. Closing a handle deletes
its file (under the mutex, so a concurrent open never sees it half gone). A
forked child closes its copies of the descriptors, so it never keeps a lock
alive after its parent is gone.

Only local directories have this; object stores cannot see a live writer.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
import weakref
from dataclasses import asdict, dataclass, replace
from typing import Any

from kvstore.clock import Clock

log = logging.getLogger("kvstore.objstore")

MUTEX_NAME = "writer.lock"
SESSIONS_DIR = "writers"
_SUFFIX = ".lock"

#: the clock of callers that pass none (a real one: nonces must not repeat)
_REAL_CLOCK = Clock()


@dataclass(frozen=True)
class WriterRecord:
    """The owner record of an open writer handle."""

    pid: int
    host: str
    opened_ms: int
    nonce: str
    #: the writer epoch it claimed; None while it is still opening
    epoch: int | None = None

    @classmethod
    def mine(cls, clock: Clock | None = None) -> WriterRecord:
        """This process's record: opened now, with a fresh nonce, both from ``clock``
        (a seeded clock repeats its nonces: give concurrent writers different seeds)."""
        c = clock if clock is not None else _REAL_CLOCK
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            opened_ms=int(c.time() * 1000),
            nonce=c.token_hex(8),
        )

    @classmethod
    def parse(cls, data: bytes, nonce: str) -> WriterRecord:
        """The record in a lock file; what cannot be read is reported as unknown."""
        try:
            d: dict[str, Any] = json.loads(data)
            epoch = d.get("epoch")
            return cls(
                pid=int(d["pid"]),
                host=str(d["host"]),
                opened_ms=int(d["opened_ms"]),
                nonce=nonce,
                epoch=None if epoch is None else int(epoch),
            )
        except (ValueError, KeyError, TypeError):
            return cls(pid=0, host="?", opened_ms=0, nonce=nonce)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    def describe(self, clock: Clock | None = None) -> str:
        """``pid 123 on host h (this process), opened 2024-...Z, 5 s ago`` (ago on ``clock``)."""
        if not self.pid:
            return "an unidentified writer (its owner record is unreadable)"
        who = f"pid {self.pid} on {self.host}"
        if self.pid == os.getpid() and self.host == socket.gethostname():
            who += " (this process)"
        opened = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.opened_ms / 1000))
        now = (clock if clock is not None else _REAL_CLOCK).time()
        age = max(0.0, now - self.opened_ms / 1000)
        return f"{who}, opened {opened} ({age:.0f} s ago)"


class _Locked:
    """An open file descriptor holding an exclusive flock."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd: int | None = fd
        _held.add(self)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        _held.discard(self)
        if fd is not None:
            os.close(fd)  # drops the lock


#: every descriptor holding a lock in this process, closed in forked children
_held: weakref.WeakSet[_Locked] = weakref.WeakSet()


def _close_in_child() -> None:
    for held in list(_held):
        fd, held.fd = held.fd, None
        if fd is not None:
            try:
                os.close(fd)  # the parent's lock stays: the description is shared
            except OSError:
                pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


class WriterSession:
    """This handle's lock file: held until :meth:`release`."""

    def __init__(self, locks: WriterLocks, held: _Locked, record: WriterRecord) -> None:
        self._locks = locks
        self._held = held
        self.record = record

    def set_epoch(self, epoch: int) -> None:
        """Record the writer epoch this handle claimed."""
        self.record = replace(self.record, epoch=epoch)
        fd = self._held.fd
        if fd is not None:
            data = self.record.encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)

    def drop_lock(self) -> None:
        """Drop the lock but leave the file, as a process that dies does."""
        self._held.close()

    def release(self) -> None:
        """Delete the lock file and drop the lock (idempotent)."""
        if self._held.fd is None:
            return
        try:
            with self._locks.mutex():  # an open that is scanning never sees it half gone
                _unlink_quietly(self._held.path)
        except OSError as exc:  # e.g. the directory became read-only: the lock still goes
            log.warning("could not remove %s: %s", self._held.path, exc)
        finally:
            self._held.close()


class _Mutex:
    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None

    def __enter__(self) -> _Mutex:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # opens are short: wait for the other one
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class WriterLocks:
    """The writer locks of one local store directory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._dir = os.path.join(root, SESSIONS_DIR)

    def mutex(self) -> _Mutex:
        """Held while a writer opens (and while a session file is removed)."""
        return _Mutex(os.path.join(self.root, MUTEX_NAME))

    def live_writers(self) -> list[WriterRecord]:
        """Owner records of every handle that holds its lock; files of handles that
        are gone (crashed) are deleted. Call with :meth:`mutex` held."""
        try:
            names = sorted(os.listdir(self._dir))
        except FileNotFoundError:
            return []
        live = []
        for name in names:
            if not name.endswith(_SUFFIX):
                continue
            path = os.path.join(self._dir, name)
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                if _try_flock(fd):  # nobody holds it: its writer is gone
                    log.info("removing the lock file of a writer that is gone: %s", path)
                    _unlink_quietly(path)
                    continue
                data = os.pread(fd, 4096, 0)
            finally:
                os.close(fd)
            live.append(WriterRecord.parse(data, name[: -len(_SUFFIX)]))
        return live

    def hold(self, record: WriterRecord) -> WriterSession:
        """Create and lock this handle's file, holding ``record``. Call with the mutex."""
        os.makedirs(self._dir, exist_ok=True)
        path = os.path.join(self._dir, record.nonce + _SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if not _try_flock(fd):
                raise OSError(errno.EWOULDBLOCK, "a fresh lock file is locked", path)
            os.pwrite(fd, record.encode(), 0)
        except BaseException:
            os.close(fd)
            _unlink_quietly(path)
            raise
        return WriterSession(self, _Locked(path, fd), record)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
