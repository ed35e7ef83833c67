"""``kvstore`` / ``python -m kvstore``: the administration command line.

::

    kvstore info URL                      what the store holds, at a glance
    kvstore manifest URL [--id N]         a manifest, pretty-printed
    kvstore get URL KEY                   read (never fences a running writer)
    kvstore scan URL [--prefix P] ...
    kvstore put URL KEY VALUE             write: opens the writer, which fences others
    kvstore delete URL KEY
    kvstore compact URL | gc URL [--grace S]
    kvstore checkpoint create|list|delete URL [NAME]
    kvstore verify URL                    check every checksum; exit 3 on damage
    kvstore bench [ARGS...]               python -m kvstore.bench

Every command takes ``--json``. Exit status: 0 ok, 1 failure, 2 usage,
3 corruption found, 4 key not found. See ``docs/cli.md``.

Layout: :mod:`~kvstore.cli.main` parses and maps errors to exit statuses,
:mod:`~kvstore.cli.commands` runs each command, :mod:`~kvstore.cli.store`
opens stores without creating them, :mod:`~kvstore.cli.verify` checks bytes
(it collects problems and never prints), :mod:`~kvstore.cli.codec` turns bytes
into safe text, :mod:`~kvstore.cli.progress` draws the progress bar.
"""

from __future__ import annotations

from kvstore.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
