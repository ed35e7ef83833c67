"""PLACEHOLDER written by the lead so the tree imports while helper A writes the real
module: helper A, replace this file wholesale with your implementation (it is
yours; nothing else of the lead's is in it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Transform:
    name: str
    param: int | None = None


@dataclass(frozen=True)
class PartitionField:
    source_id: int
    transform: Transform
    name: str
    field_id: int


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    @property
    def is_unpartitioned(self) -> bool:
        return not self.fields

    def spelling(self, names: Any) -> tuple[str, ...]:
        if self.fields:
            raise NotImplementedError
        return ()


def parse_spec(items: Any, columns: Any, schema: Any, spec_id: int, previous: Any = ()) -> PartitionSpec:
    if items:
        raise NotImplementedError("partition_by is not implemented yet")
    return PartitionSpec(spec_id)
