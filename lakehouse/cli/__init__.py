"""``lakehouse`` / ``python -m lakehouse``: the lakehouse command line.

::

    lakehouse init URL [--isolation serializable] ...   create (or check) a lakehouse
    lakehouse info URL                                  what it holds, at a glance
    lakehouse list URL [--version V | --at TIME]        the tree
    lakehouse describe URL NAME                         a namespace, table or view
    lakehouse history URL [--limit N]                   versions, newest first
    lakehouse ns|table|view create|alter|drop URL NAME ...
    lakehouse stats|files URL TABLE [--version V]       table data in numbers
    lakehouse partitions URL TABLE [--version V]        files, rows, bytes per partition
    lakehouse head URL TABLE [-n N] [--where SQL]       the first rows
    lakehouse changes URL TABLE START [END]             the change feed
    lakehouse append URL TABLE FILE                     rows from Parquet/CSV/JSON lines
    lakehouse delete URL TABLE WHERE | compact URL TABLE | remove-orphans URL
    lakehouse rollback URL V | export URL DEST | expire URL --keep-last N
    lakehouse verify URL                                check every byte; exit 3 on damage
    lakehouse sql URL [-e SQL | -f FILE]                Spark SQL console (local Spark)

Reads never fence a running writer (``lakehouse.open_reader``); writes open
the single writer (``lakehouse.open``: refused next to a live local writer
unless ``--takeover``). The old order ``lakehouse URL COMMAND`` still works.
Every command takes ``--json`` and ``-o KEY=VALUE`` (storage options). Exit
status: 0 ok, 1 failure, 2 usage, 3 corruption found. See ``docs/cli.md``.

Layout (as :mod:`kvstore.cli`): :mod:`~lakehouse.cli.main` parses and maps
errors to exit statuses, :mod:`~lakehouse.cli.commands` runs the commands on
the lakehouse, its tree and versions, :mod:`~lakehouse.cli.data` those on
table data, :mod:`~lakehouse.cli.verify` checks bytes (it collects problems
and never prints), :mod:`~lakehouse.cli.sql` is the SQL console,
:mod:`~lakehouse.cli.target` opens the lakehouse and prints,
:mod:`~lakehouse.cli.render` formats, :mod:`~lakehouse.cli.parse` reads
argument text.
"""

from __future__ import annotations

from lakehouse.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
