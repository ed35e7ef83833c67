"""Time and entropy, injected: one :class:`Clock` per store, handed to every part.

Why. A storage engine's behaviour depends on more than its inputs: when a
background task wakes, how long a group-commit leader waits, which backoff
delay a lost race picks, which random id a new writer or object gets, what
creation time a version records. When each part calls ``time.monotonic``,
``time.sleep`` or ``secrets`` directly, none of that can be replayed: a test
that fails once in a thousand runs cannot be made to fail again, and a test
of a timeout has to really wait.

So the parts that read time, sleep or draw random bits take a ``clock=``
keyword (``None`` means a real :class:`Clock`) and call only its methods:

* :meth:`Clock.time` - wall clock (epoch seconds), for recorded timestamps;
* :meth:`Clock.monotonic` - for intervals and deadlines;
* :meth:`Clock.sleep` - for backoff and polling;
* :meth:`Clock.token_hex`, :meth:`Clock.getrandbits`, :meth:`Clock.random` -
  for ids, nonces and jitter.

How a run is reproduced. ``Clock(seed=n)`` keeps real time but draws every
random value from ``random.Random(n)``, so ids, nonces and jitter repeat from
run to run. A :class:`FakeClock` also replaces time: ``time()`` and
``monotonic()`` start at fixed values and move only when the test calls
:meth:`FakeClock.advance` or a part calls :meth:`~FakeClock.sleep` (which
advances the clock by that much and returns at once). With the same seed,
the same fake start and the same inputs (and, for threaded code, the same
interleaving), a run takes the same decisions::

    clock = FakeClock(seed=7)
    wal = ObjectWal(store, 1, clock=clock)   # fence checks every 1 s of *fake* time
    clock.advance(1.5)                       # the next sync checks the fence

``Clock()`` without a seed uses the system's randomness (``secrets`` /
``random.SystemRandom``): ids and nonces must not repeat across processes.
This module imports only the standard library, so any layer may use it.
"""

from __future__ import annotations

import random
import secrets
import threading
import time as _time
from collections.abc import Callable

__all__ = ["Clock", "FakeClock", "as_clock"]


class Clock:
    """The real clock and an entropy source; every engine part takes one.

    ``seed=None``: system randomness (unpredictable, for production ids and
    nonces). An int: a ``random.Random(seed)``, so the random values repeat.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._rng: random.Random = random.SystemRandom() if seed is None else random.Random(seed)
        self._rng_lock = threading.Lock()

    # The real clock's calls are the builtins themselves (no Python frame on
    # the commit path, which reads the monotonic clock once per commit).
    #: wall-clock time in seconds since the epoch (``time.time``)
    time: Callable[[], float] = staticmethod(_time.time)
    #: seconds on a clock that never goes back (``time.monotonic``)
    monotonic: Callable[[], float] = staticmethod(_time.monotonic)
    #: block for ``seconds`` (``time.sleep``)
    sleep: Callable[[float], None] = staticmethod(_time.sleep)

    def token_hex(self, nbytes: int) -> str:
        """``2 * nbytes`` random hex digits, like ``secrets.token_hex`` (seeded when seeded)."""
        if self.seed is None:
            return secrets.token_hex(nbytes)
        if nbytes <= 0:
            return ""
        return f"{self.getrandbits(nbytes * 8):0{nbytes * 2}x}"

    def getrandbits(self, k: int) -> int:
        """A random int of ``k`` bits."""
        if k <= 0:
            return 0
        with self._rng_lock:
            return self._rng.getrandbits(k)

    def random(self) -> float:
        """A random float in ``[0, 1)`` (for jitter)."""
        with self._rng_lock:
            return self._rng.random()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed!r})"


class _WallClock(Clock):
    """A :class:`Clock` whose wall time comes from a plain function."""

    def __init__(self, now: Callable[[], float], seed: int | None = None) -> None:
        super().__init__(seed)
        self._now = now

    def time(self) -> float:
        return self._now()


def as_clock(clock: Clock | Callable[[], float] | None, seed: int | None = None) -> Clock:
    """``clock`` as a :class:`Clock`: itself; a wall-clock function (epoch seconds,
    as older options took) replacing only the wall time; or, for None, a real
    clock whose random bits are seeded with ``seed``."""
    if isinstance(clock, Clock):
        return clock
    if clock is None:
        return Clock(seed)
    return _WallClock(clock, seed)


class FakeClock(Clock):
    """A clock for tests: time moves only by :meth:`advance` or :meth:`sleep`.

    ``time()`` and ``monotonic()`` both start at ``start`` (a large value, as
    a real monotonic clock has, so "long ago" defaults such as 0.0 stay long
    ago) and move together. ``sleep(s)`` advances the clock by ``s`` and returns at once.
    Safe to use from several threads. Random values come from
    ``random.Random(seed)``.
    """

    def __init__(self, start: float = 1_700_000_000.0, seed: int = 0) -> None:
        super().__init__(seed)
        self._start = float(start)
        self._elapsed = 0.0
        self._lock = threading.Lock()
        #: every sleep asked for, in order (tests check backoff with it)
        self.sleeps: list[float] = []

    def time(self) -> float:
        with self._lock:
            return self._start + self._elapsed

    def monotonic(self) -> float:
        with self._lock:
            return self._start + self._elapsed

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (not backwards: ValueError)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._elapsed += seconds

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds`` instead of sleeping (negative: no time passes)."""
        with self._lock:
            self.sleeps.append(seconds)
            if seconds > 0:
                self._elapsed += seconds

    def __repr__(self) -> str:
        return f"FakeClock(time={self.time()!r}, seed={self.seed!r})"
