"""Page checksums of a Parquet file, checked without decoding a value.

``add_files`` adopts a file someone else wrote (Spark's writer, a user's
tool): the checksums the commit records are taken from the bytes found at
adoption, so damage done between the write and the adoption would be
recorded as sound. :func:`check_pages` walks every column chunk the footer
lists, page by page: each page header (Thrift compact protocol) is parsed,
the page's CRC-32 (when the writer wrote one, as parquet-mr and pyarrow with
``write_page_checksum`` do) is recomputed over its compressed bytes, the
pages must fill the chunk exactly and their value counts must add up to the
chunk's. It costs one CRC-32 pass over the file (``zlib.crc32``), no
decompression. What it cannot see: a footer statistic changed before
adoption (the footer has no checksum of its own until the commit records
one).
"""

from __future__ import annotations

import zlib
from typing import Any

from lakehouse.errors import CorruptionError

#: PageHeader field ids and page types (parquet.thrift)
_TYPE, _COMPRESSED_SIZE, _CRC = 1, 3, 4
_DATA_PAGE_HEADER, _DATA_PAGE_HEADER_V2 = 5, 8
_DATA_PAGE, _DATA_PAGE_V2 = 0, 3
_MAX_DEPTH = 16


class _Malformed(Exception):
    pass


class _Reader:
    """Just enough of Thrift's compact protocol to read a PageHeader."""

    def __init__(self, data: memoryview, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _Malformed("page header runs past its column chunk")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise _Malformed("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise _Malformed("page header runs past its column chunk")
        self.pos += n

    def value(self, kind: int, depth: int) -> Any:
        """One value of compact type ``kind``: ints and structs (as dicts) kept,
        the rest skipped (None)."""
        if depth > _MAX_DEPTH:
            raise _Malformed("page header nested too deep")
        if kind in (1, 2):  # bool (in a field header)
            return kind == 1
        if kind == 3:
            self.skip(1)
        elif kind in (4, 5, 6):
            return self.zigzag()
        elif kind == 7:
            self.skip(8)
        elif kind == 8:
            self.skip(self.varint())
        elif kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            elem = head & 0x0F
            for _ in range(size):
                if elem in (1, 2):  # a bool element is one byte
                    self.skip(1)
                else:
                    self.value(elem, depth + 1)
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.value(types >> 4, depth + 1)
                    self.value(types & 0x0F, depth + 1)
        elif kind == 12:
            return self.struct(depth + 1)
        else:
            raise _Malformed(f"unknown Thrift type {kind}")
        return None

    def struct(self, depth: int = 0) -> dict[int, Any]:
        fields: dict[int, Any] = {}
        last = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == 0:
                return fields
            delta = head >> 4
            last = last + delta if delta else self.zigzag()
            fields[last] = self.value(kind, depth)


def check_pages(data: bytes | memoryview, meta: Any, path: str) -> None:
    """Check every page of the Parquet bytes ``data`` against its header's CRC-32
    and the chunks' layout against the footer ``meta`` (CorruptionError naming
    ``path``)."""
    view = memoryview(data)
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            try:
                _check_chunk(view, col)
            except _Malformed as exc:
                raise CorruptionError(
                    f"data file {path} is damaged: row group {rg}, column "
                    f"{col.path_in_schema}: {exc}"
                ) from None


def _check_chunk(view: memoryview, col: Any) -> None:
    start = col.data_page_offset
    if col.has_dictionary_page and col.dictionary_page_offset:
        start = min(start, col.dictionary_page_offset)
    end = start + col.total_compressed_size
    if start < 4 or end > len(view):
        raise _Malformed("the footer places it outside the file")
    pos, values = start, 0
    while pos < end:
        reader = _Reader(view, pos, end)
        header = reader.struct()
        size = header.get(_COMPRESSED_SIZE)
        if not isinstance(size, int) or size < 0 or reader.pos + size > end:
            raise _Malformed(f"a page at offset {pos} has a bad size")
        crc = header.get(_CRC)
        if isinstance(crc, int) and zlib.crc32(view[reader.pos : reader.pos + size]) != (
            crc & 0xFFFFFFFF
        ):
            raise _Malformed(f"the page at offset {pos} fails its checksum")
        kind = header.get(_TYPE)
        sub = header.get(_DATA_PAGE_HEADER if kind == _DATA_PAGE else _DATA_PAGE_HEADER_V2)
        if kind in (_DATA_PAGE, _DATA_PAGE_V2):
            if not isinstance(sub, dict) or not isinstance(sub.get(1), int):
                raise _Malformed(f"the data page at offset {pos} has no value count")
            values += sub[1]
        pos = reader.pos + size
    if values != col.num_values:
        raise _Malformed(f"its pages hold {values} values, the footer says {col.num_values}")
