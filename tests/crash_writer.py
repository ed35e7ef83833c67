"""Crash-test writer: run as a subprocess by ``tests/test_crash_kill.py``.

Not a test module. Usage::

    python crash_writer.py DIR ACKLOG --run R --seed S [--threads T] [--max-seconds X]

Opens the kvstore at the local directory ``DIR`` (small memtable, so flushes
and WAL rotations happen while it runs) and loops forever doing durable
writes until it is killed:

* single puts        key ``r<R>/t<T>/p/<i>``           value ``make_value(key, 0)``
* WriteBatches       keys ``r<R>/t<T>/b/<id>/<j>``     values ``make_value(key, n)``
                     (``n`` = the batch size; every key of batch ``id`` is in it)
* overwrites         key ``r<R>/t<T>/o/<slot>``        value ``make_value(key, version)``
* put then delete    key ``r<R>/t<T>/d/<i>``

After each acknowledged write it appends one line to the ack log ``ACKLOG``
(a single ``os.write`` on an ``O_APPEND`` descriptor, so a line is never
interleaved and is in the kernel before the next write starts; a SIGKILL
cannot lose it, so no fsync is needed: the test kills the process, it does
not cut the power)::

    P <key>            the put of <key> was acknowledged
    B <prefix> <n>     the batch with keys <prefix><j>, j < n, was acknowledged
    O <key> <version>  the overwrite of <key> to <version> was acknowledged
    X <key>            about to delete <key> (written before the delete starts)
    D <key>            the delete of <key> was acknowledged (its put came first)

``--threads T`` (T > 0) adds T threads doing durable puts concurrently with
the main loop (the WAL's group-commit path). On stdout the writer prints
``OPENING`` before ``kvstore.open`` and ``READY`` once the store is open.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import threading
import time

MEMTABLE_BYTES = 64 << 10


def make_value(key: bytes, version: int, size: int | None = None) -> bytes:
    """A self-checking value: ``<key>@<version>@<size>@`` + filler derived from them."""
    if size is None:
        size = 16 + hashlib.blake2b(key + b"%d" % version, digest_size=2).digest()[0] * 6
    head = b"%s@%d@%d@" % (key, version, size)
    seed = hashlib.blake2b(head, digest_size=32).digest()
    reps = size // len(seed) + 1
    return head + (seed * reps)[:size]


def parse_value(value: bytes) -> tuple[bytes, int, int] | None:
    """``(key, version, size)`` if ``value`` is exactly what make_value produces, else None."""
    try:
        key, version, size, _rest = value.split(b"@", 3)
        v, s = int(version), int(size)
    except ValueError:
        return None
    if make_value(key, v, s) != value:
        return None
    return key, v, s


class Writer:
    def __init__(self, db, ack_fd: int, run: int, tid: int, rng: random.Random) -> None:
        self.db = db
        self.ack_fd = ack_fd
        self.prefix = b"r%03d/t%d/" % (run, tid)
        self.rng = rng
        self.i = 0
        self.versions: dict[int, int] = {}

    def ack(self, line: bytes) -> None:
        os.write(self.ack_fd, line + b"\n")

    def step(self, kvstore) -> None:
        rng = self.rng
        self.i += 1
        i = self.i
        r = rng.random()
        if r < 0.45:
            key = self.prefix + b"p/%07d" % i
            self.db.put(key, make_value(key, 0))
            self.ack(b"P " + key)
        elif r < 0.75:
            n = rng.randint(2, 8)
            base = self.prefix + b"b/%07d/" % i
            batch = kvstore.WriteBatch()
            for j in range(n):
                k = base + b"%02d" % j
                batch.put(k, make_value(k, n))
            self.db.write(batch)
            self.ack(b"B %s %d" % (base, n))
        elif r < 0.9:
            slot = rng.randrange(8)
            ver = self.versions.get(slot, 0) + 1
            self.versions[slot] = ver
            key = self.prefix + b"o/%02d" % slot
            self.db.put(key, make_value(key, ver))
            self.ack(b"O %s %d" % (key, ver))
        else:
            key = self.prefix + b"d/%07d" % i
            self.db.put(key, make_value(key, 0))
            self.ack(b"P " + key)
            self.ack(b"X " + key)  # intent: the delete may be durable from here on
            self.db.delete(key)
            self.ack(b"D " + key)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("acklog")
    ap.add_argument("--run", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=30.0)
    args = ap.parse_args(argv)

    import kvstore

    ack_fd = os.open(args.acklog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print("OPENING", flush=True)
    db = kvstore.open(args.dir, memtable_bytes=MEMTABLE_BYTES)
    print("READY", flush=True)
    deadline = time.monotonic() + args.max_seconds
    stop = threading.Event()

    def loop(tid: int) -> None:
        w = Writer(db, ack_fd, args.run, tid, random.Random(args.seed * 1000 + tid))
        while not stop.is_set() and time.monotonic() < deadline:
            w.step(kvstore)

    threads = [
        threading.Thread(target=loop, args=(t,), daemon=True) for t in range(1, args.threads + 1)
    ]
    for t in threads:
        t.start()
    loop(0)  # runs until killed (or the safety deadline)
    stop.set()
    for t in threads:
        t.join()
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
