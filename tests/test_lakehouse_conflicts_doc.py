"""docs/lakehouse.md's conflict tables are the tables of lakehouse/conflicts.py.

The doc embeds them between generated-region markers; ``tools/conflict_matrix.py``
rewrites those regions from the code. These tests fail when the doc and the
code differ (a rule changed without its documentation, or the reverse), and
check that the generator really reads the code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from lakehouse import conflicts
from lakehouse.model import DATA_OPS, DataOp

ROOT = Path(__file__).resolve().parent.parent


def _tool() -> ModuleType:
    path = ROOT / "tools" / "conflict_matrix.py"
    spec = importlib.util.spec_from_file_location("conflict_matrix", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_show_the_tables_the_code_has() -> None:
    text = (ROOT / "docs" / "lakehouse.md").read_text()
    assert _tool().regenerate(text) == text, "run: python tools/conflict_matrix.py"


@pytest.mark.parametrize("name", sorted(conflicts.GENERATED))
def test_every_generated_table_has_its_region(name: str) -> None:
    text = (ROOT / "docs" / "lakehouse.md").read_text()
    tool = _tool()
    assert tool.START.format(name=name) in text and tool.END.format(name=name) in text


def test_a_changed_rule_shows_in_the_generated_table(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "lakehouse.md").read_text()
    changed = dict(conflicts.DATA)
    changed[(DataOp.APPEND, DataOp.APPEND)] = conflicts.RETRYABLE
    monkeypatch.setattr(conflicts, "DATA", changed)
    new = _tool().regenerate(text)
    assert new != text
    row = next(line for line in new.splitlines() if line.startswith("| **append** |"))
    assert row.split(" | ")[1] == conflicts.RETRYABLE


def test_the_matrix_is_keyed_by_the_operation_enum() -> None:
    assert set(conflicts.DATA) == {(m, t) for m in DataOp for t in DataOp}
    assert all(isinstance(m, DataOp) and isinstance(t, DataOp) for m, t in conflicts.DATA)
    assert set(conflicts.DATA_VS_SCHEMA) == set(DataOp)
    assert tuple(DataOp) == DATA_OPS
    # a DataOp is its stored name: records written before the enum decode to it
    assert DataOp("merge") is DataOp.MERGE
    assert DataOp.MERGE.value == "merge"
