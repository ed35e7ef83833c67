"""Kill-test writer for automatic compaction: run as a subprocess by
``tests/test_lakehouse_data_crash.py`` (``test_kill_during_auto_compaction``).

Not a test module. Usage::

    python auto_compaction_writer.py DIR ACKLOG

Opens the lakehouse at ``DIR`` (creating table ``ns.t`` with automatic
compaction after every 2 small files, sorted by ``k``) and appends one row at a
time, keys 0, 1, 2, ... (value ``v<k>``), forever, until it is killed. After
each acknowledged append it writes ``A <k>`` to the ack log (one ``os.write``
on an ``O_APPEND`` descriptor: a SIGKILL cannot lose it); just before each
background compaction's kvstore commit (its files are written by then) it
writes ``C``, so the test can kill it right there.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa

import lakehouse
from lakehouse.model import DataOp

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])


def main() -> None:
    url, acklog = sys.argv[1], sys.argv[2]
    fd = os.open(acklog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def hook(intent: object, attempt: int) -> None:
        ops = {op for w in intent.table_writes.values() for op in w.ops}  # type: ignore[attr-defined]
        if ops == {DataOp.COMPACT}:
            os.write(fd, b"C\n")

    lh = lakehouse.open(url, commit_hook=hook)
    if not lh.table_exists("ns.t"):
        with lh.begin() as txn:
            txn.create_namespace("ns", if_not_exists=True)
            txn.create_table("ns.t", SCHEMA, {"compaction.min-files": "2"}, sort_keys=["k"])
    t = lh.read("ns.t", columns=["k"]).column("k").to_pylist()
    k = max(t) + 1 if t else 0
    print("READY", flush=True)
    while True:
        lh.append("ns.t", pa.table({"k": [k], "v": [f"v{k}"]}, schema=SCHEMA))
        os.write(fd, b"A %d\n" % k)
        k += 1


if __name__ == "__main__":
    main()
