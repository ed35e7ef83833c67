"""Whether the engine may still read and write, and why not.

One object every part shares, so each check reads the same facts:

* ``closed``: :meth:`kvstore.DB.close` finished (``closing``: it has begun,
  ``stopping``: background threads are asked to end).
* ``fenced``: a newer writer holds the store; the first reason wins. From
  then on reads show only what this handle made durable (see
  :meth:`kvstore.engine.commit.CommitPath.visible_seq`).
* ``broken``: a manifest write whose outcome nobody can tell; this handle
  stops writing for good (reopening reads the truth).
* ``bg_error``: the flusher's last failure (retried; an exception that is
  not an ``Exception`` means the flusher died).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kvstore.errors import ClosedError, FencedError, KvError

log = logging.getLogger("kvstore")


class Health:
    __slots__ = (
        "_describe",
        "_on_fenced",
        "bg_error",
        "broken",
        "closed",
        "closing",
        "fenced",
        "stopping",
    )

    def __init__(self, describe: str) -> None:
        self._describe = describe
        self.closed = False
        self.closing = False
        self.stopping = False
        self.fenced: FencedError | None = None
        self.broken: KvError | None = None
        self.bg_error: BaseException | None = None
        self._on_fenced: list[Callable[[], None]] = []

    def check_open(self) -> None:
        if self.closed:
            raise ClosedError("the database is closed")

    def on_fenced(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` once, when the handle is first fenced."""
        self._on_fenced.append(listener)

    def mark_fenced(self, exc: FencedError) -> None:
        """Remember that a newer writer holds the store (the first reason wins)."""
        if self.fenced is None:
            self.fenced = exc
            for listener in self._on_fenced:
                listener()

    def raise_if_fenced(self) -> None:
        if self.fenced is not None:
            raise FencedError(str(self.fenced))

    def stop(self, reason: str) -> None:
        """Stop writing for good: nobody can tell which files the store references."""
        self.broken = KvError(
            f"{self._describe}: {reason}; this handle stopped writing: open the store again"
        )
        log.error("%s", self.broken)

    def raise_if_broken(self) -> None:
        if self.broken is not None:
            raise KvError(str(self.broken)) from self.broken
