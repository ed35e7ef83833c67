"""One writer per store: refuse to open next to a live writer, or take over.

On a local directory the store can see whether its writer is alive (OS locks
that die with their process, :mod:`kvstore.objstore.writer_lock`), so
opening a second writer is refused with :class:`~kvstore.errors.WriterActive`
naming the live one, unless the caller asks to ``takeover``, which fences it
(the ordinary claim of a higher writer epoch in the manifest). A writer
that crashed holds nothing, so reopening after ``kill -9`` just works.

Which lock holders count as live writers: a fenced handle may stay open for
a while (until its application notices), holding its lock; its recorded
epoch is then below the latest manifest's, so it is ignored::

    A opens (epoch 1) ──────── fenced by B ─ ─ ─ (A still open, epoch 1 < 2: ignored)
    B opens (takeover, epoch 2) ──────────────────────── live
    C opens ─► WriterActive naming B;  C opens (takeover) ─► fences B

Object stores (``memory://``, ``s3://``) cannot see liveness: opening a
writer there always fences the previous one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kvstore.clock import Clock
from kvstore.errors import WriterActive
from kvstore.objstore.writer_lock import WriterLocks, WriterRecord, WriterSession

log = logging.getLogger("kvstore")


class Ownership:
    """This handle's claim to be the live writer of a local store.

    Created before recovery (the open mutex held, this handle's lock taken);
    :meth:`claimed` records the writer epoch and lets other opens proceed;
    :meth:`release` gives the lock up (on close, or when the open fails).
    """

    def __init__(self, session: WriterSession, mutex: Any) -> None:
        self._session = session
        self._mutex = mutex

    def claimed(self, epoch: int) -> None:
        """The manifest names this writer's epoch: record it, let other opens in."""
        try:
            self._session.set_epoch(epoch)
        finally:
            self._open_done()

    def _open_done(self) -> None:
        mutex, self._mutex = self._mutex, None
        if mutex is not None:
            mutex.__exit__(None, None, None)

    def release(self) -> None:
        self._open_done()
        self._session.release()

    def drop_lock(self) -> None:
        """Let the OS lock go and leave the file, as a killed process does (for
        tests that simulate a crash inside one process)."""
        self._open_done()
        self._session.drop_lock()


def acquire(
    store: Any,
    *,
    takeover: bool,
    latest_epoch: Callable[[], int],
    clock: Clock | None = None,
) -> Ownership | None:
    """Become the live writer of ``store``; None when the store cannot tell liveness.

    Raises :class:`WriterActive` when a live writer holds the store and
    ``takeover`` is false. ``latest_epoch()`` reads the latest manifest's
    writer epoch (0 for a new store). ``clock`` gives this handle's opening
    time and lock nonce (and the ages in messages).
    """
    opener = getattr(store, "writer_locks", None)
    if opener is None:
        return None
    locks: WriterLocks = opener()
    mutex = locks.mutex()
    mutex.__enter__()
    try:
        epoch = latest_epoch()
        live = [w for w in locks.live_writers() if w.epoch is None or w.epoch >= epoch]
        if live:
            if not takeover:
                raise _active(store.describe(), live[-1], clock)
            log.warning(
                "%s: taking over from the live writer %s (it is fenced)",
                store.describe(),
                live[-1].describe(clock),
            )
        session = locks.hold(WriterRecord.mine(clock))
    except BaseException:
        mutex.__exit__(None, None, None)
        raise
    return Ownership(session, mutex)


def _active(where: str, w: WriterRecord, clock: Clock | None = None) -> WriterActive:
    opened = datetime.fromtimestamp(w.opened_ms / 1000, tz=UTC) if w.opened_ms else None
    return WriterActive(
        f"{where} is being written by {w.describe(clock)}; read it with kvstore.open_reader, or "
        "open it with takeover=True (CLI: --takeover) to fence that writer",
        pid=w.pid,
        host=w.host,
        opened_at=opened,
    )
