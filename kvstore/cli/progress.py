"""A one-line text progress bar for long commands (``verify``, ``compact``), drawn on stderr.

::

    verify [#############...........]  54%  12.3/22.8 MiB  sst/01HX3...sst

Redrawn at most every ``interval`` seconds with a carriage return, cut to the
terminal width, and finished with a newline. Disabled, it does nothing.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from kvstore.cli.codec import human_bytes


class ProgressBar:
    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        enabled: bool,
        label: str = "",
        width: int = 24,
        interval: float = 0.1,
    ) -> None:
        self.total = max(total, 0)
        self.done = 0
        self._stream = stream
        self._enabled = enabled
        self._label = label
        self._width = width
        self._interval = interval
        self._last_draw = 0.0
        self._item = ""
        self._drawn = False

    def advance(self, amount: int, item: str | None = None) -> None:
        self.done = min(self.total, self.done + max(amount, 0))
        if item is not None:
            self._item = item
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last_draw >= self._interval or self.done >= self.total:
            self._last_draw = now
            self._draw()

    def update(self, done: int, total: int) -> None:
        """Set both amounts (for work whose total grows while it runs)."""
        self.total = max(total, 0)
        self.done = min(self.done, self.total)
        self.advance(done - self.done)

    def render(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self._width)
        bar = "#" * filled + "." * (self._width - filled)
        amounts = f"{human_bytes(self.done)}/{human_bytes(self.total)}"
        head = f"{self._label} " if self._label else ""
        return f"{head}[{bar}] {frac * 100:3.0f}%  {amounts}  {self._item}"

    def _draw(self) -> None:
        columns = shutil.get_terminal_size((80, 24)).columns
        line = self.render()[: max(columns - 1, 10)]
        self._stream.write("\r" + line.ljust(max(columns - 1, 10)))
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Draw the final state and end the line (only if anything was drawn)."""
        if not self._enabled:
            return
        self._item = ""
        self._draw()
        self._stream.write("\n")
        self._stream.flush()
