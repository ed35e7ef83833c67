"""The :class:`LakehouseReader`: a lakehouse opened read-only, in any process.

It shares the read surface (:class:`~lakehouse.surface.LakehouseReads`) with
the writer, over a kvstore ``Reader`` that never fences the writer, and adds
:meth:`LakehouseReader.refresh`. It is not a writer: it has no transactions
and no commit path. The writer's calls that change the lakehouse answer
:class:`~lakehouse.errors.ReadOnlyError` naming the way to write instead
(the contract, docs/api.md), rather than ``AttributeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kvstore
from lakehouse import codec, keys
from lakehouse.context import Context
from lakehouse.errors import (
    CorruptionError,
    NotFound,
    ReadOnlyError,
    one_hierarchy,
    storage_errors_name_url,
    translated,
)
from lakehouse.layout import Layout, refuse_foreign
from lakehouse.options import Options
from lakehouse.surface import LakehouseReads

#: the writer's calls a reader refuses with ReadOnlyError
WRITE_CALLS = frozenset(
    {
        "begin",
        "append",
        "overwrite",
        "replace_partitions",
        "delete",
        "update",
        "merge",
        "rollback",
        "expire_versions",
        "remove_orphan_files",
    }
)


@one_hierarchy
class LakehouseReader(LakehouseReads):
    """A read-only lakehouse (see :func:`open_reader`): the read calls, ``version``,
    ``history``, ``at_version``/``at_time``, ``changes``, ``export``, ``refresh``
    and ``close``."""

    def __init__(self, reader: Any, layout: Layout, options: Options) -> None:
        self._ctx = ctx = Context(reader, layout, options, read_only=True)
        if reader.get(keys.HEAD) is None:
            raise NotFound(f"no lakehouse at {layout.label}")
        raw = reader.get(keys.LAKEHOUSE_DEF)
        if raw is None:
            raise CorruptionError("the lakehouse has a head version but no definition")
        ctx.definition = codec.decode_lakehouse(raw)

    def refresh(self) -> int:
        """Load what the writer has made durable since; returns the latest version."""
        ctx = self._ctx
        ctx.check_open()
        ctx.db.refresh()  # type: ignore[attr-defined]  # a kvstore Reader
        if ctx.layout.data_missing:  # opened before the writer made data/: look again
            from lakehouse.layout import resolve

            layout = resolve(ctx.layout.label, ctx.options.storage_options, create=False)
            if not layout.data_missing:
                ctx.layout = layout
        return self.version

    def __getattr__(self, name: str) -> Any:
        if name in WRITE_CALLS:
            return _refusal(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _kv_stats(self) -> dict[str, Any]:
        return {"last_seq": self._ctx.db.last_seq, "read_only": True}

    def _opener(self) -> Callable[..., Any]:
        from lakehouse.lakehouse import open

        return open


def _refusal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyError(
            f"{name}: this is a read-only lakehouse reader; open the lakehouse with "
            "lakehouse.open to write"
        )

    refuse.__name__ = name
    return refuse


@storage_errors_name_url
def open_reader(url: Any, **options: Any) -> LakehouseReader:
    """Open a read-only view of the lakehouse at ``url`` that another process may be
    writing. It never fences that writer; :meth:`LakehouseReader.refresh` moves it to
    the latest durable version. Options: ``storage_options``, ``data_store``,
    ``refresh_interval`` (seconds: refresh by itself when older), ``kv_options``."""
    from lakehouse.layout import exists, resolve

    interval = options.pop("refresh_interval", None)
    opts = Options.from_kwargs(options)
    refuse_foreign(url, opts.storage_options)
    if not exists(url, opts.storage_options):
        raise NotFound(f"no lakehouse at {url}")
    layout = resolve(url, opts.storage_options, opts.data_store, create=False)
    kv = dict(opts.kv_options)
    if opts.storage_options and "storage_options" not in kv:
        kv["storage_options"] = opts.storage_options
    try:
        reader = kvstore.open_reader(layout.meta, refresh_interval=interval, **kv)
    except kvstore.KvError as exc:
        raise translated(exc) from exc
    return LakehouseReader(reader, layout, opts)
