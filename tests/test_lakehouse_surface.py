"""One read surface: the writer, a reader, a view and a transaction answer the same
read calls with the same parameters (docs/architecture.md, "lakehouse
architecture"). A reader is its own type, not a writer with calls switched off."""

from __future__ import annotations

import inspect

import pyarrow as pa
import pytest

import lakehouse
from lakehouse.reads import ReadOps
from lakehouse.surface import LakehouseReads

READ_CALLS = sorted(
    name
    for name, attr in vars(ReadOps).items()
    if not name.startswith("_") and (callable(attr) or isinstance(attr, property))
)
SURFACES = (
    lakehouse.Lakehouse,
    lakehouse.LakehouseReader,
    lakehouse.LakehouseView,
    lakehouse.Transaction,
)


def _shape(fn: object) -> list[tuple[object, str | None]]:
    """Parameter kinds, with the names callers pass by keyword."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # type: ignore[arg-type]
    return [(p.kind, p.name if p.kind is p.KEYWORD_ONLY else None) for p in params]


def test_the_read_calls_are_known() -> None:
    assert {"read", "scan_batches", "list_tables", "describe_table", "file_states"} <= set(
        READ_CALLS
    )


@pytest.mark.parametrize("surface", SURFACES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", READ_CALLS)
def test_every_surface_answers_every_read_call_alike(surface: type, name: str) -> None:
    mine = inspect.getattr_static(surface, name, None)
    assert mine is not None, f"{surface.__name__} has no {name}"
    ref = inspect.getattr_static(ReadOps, name)
    if isinstance(ref, property):
        assert isinstance(mine, property), f"{surface.__name__}.{name} is not a property"
        return
    assert _shape(mine) == _shape(ref), f"{surface.__name__}.{name}"


def test_a_reader_is_not_a_writer() -> None:
    assert not issubclass(lakehouse.LakehouseReader, lakehouse.Lakehouse)
    assert issubclass(lakehouse.LakehouseReader, LakehouseReads)
    assert issubclass(lakehouse.Lakehouse, LakehouseReads)
    assert "begin" not in vars(lakehouse.LakehouseReader)


def test_the_surfaces_give_the_same_answers(tmp_path) -> None:
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", pa.schema([("id", pa.int64())]))
        lh.append("s.t", pa.table({"id": [1, 2, 3]}))
        lh.delete("s.t", "id = 2")
        with lakehouse.open_reader(str(tmp_path / "lh")) as r, lh.at_version(lh.version) as v:
            txn = lh.begin()
            try:
                for s in (lh, r, v, txn):
                    assert s.read("s.t").column("id").to_pylist() == [1, 3]
                    assert s.list_tables("s") == ["t"]
                    [(f, dv)] = s.file_states("s.t")
                    assert f.record_count == 3 and list(dv) == [1]
            finally:
                txn.rollback()
