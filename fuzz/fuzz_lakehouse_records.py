"""Fuzz the table-data record decoders: data-file records and version records.

The contract (``lakehouse/data/record.py``, ``lakehouse/codec.py``): given any
bytes, :func:`record.decode_file` and :func:`codec.decode_record` (whose
``data`` entries go through :func:`record.decode_change`) return a value or
raise :class:`lakehouse.errors.CorruptionError`; nothing else escapes
(KeyError, TypeError, ValueError, binascii.Error, RecursionError ...).

Inputs: arbitrary bytes; valid encodings with byte mutations applied; and
*structurally* mutated JSON (a field's value replaced by a value of another
JSON type, removed, or nested), which is how a buggy writer's output reaches
the typed checks behind the format byte. Inline data-file records (format
``0x02``: a length, a JSON head, the rows' payload) get the same three, their
head restructured behind its length.

Run directly for a longer session::

    python fuzz/fuzz_lakehouse_records.py --examples 50000
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from byte_mutations import any_op, mutate
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from lakehouse import codec
from lakehouse.data import dv, record
from lakehouse.errors import CorruptionError
from lakehouse.model import DataFile, Isolation, Rewrite, TableChange, VersionInfo

_LONG = os.environ.get("KVSTORE_FUZZ_EXAMPLES")
if _LONG:
    FUZZ = settings(max_examples=int(_LONG), deadline=None, suppress_health_check=list(HealthCheck))
else:
    FUZZ = settings(
        max_examples=150,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )

FILE = record.encode_file(
    DataFile(
        "t/0000000000001-00000000000000aa.parquet",
        1234,
        10,
        file_id="0000000000001-00000000000000aa",
        columns=((1, "id"), (2, "v")),
        raw_stats=((1, 0, 9, 0), (2, ["b", "YWJj"], ["d", "1.5"], 3)),
    )
)
INLINE_PAYLOAD = b"ARROW-IPC-PAYLOAD-NOT-DECODED-BY-THE-RECORD"
INLINE = record.encode_file(
    DataFile(
        "t/0000000000002-00000000000000bb.inline",
        len(INLINE_PAYLOAD),
        3,
        file_id="0000000000002-00000000000000bb",
        columns=((1, "id"),),
        raw_stats=((1, 0, 2, 0),),
        crc=7,
        inline=INLINE_PAYLOAD,
    )
)
CHANGE = TableChange(
    "ns.t",
    ("delete", "compact"),
    added=("a",),
    removed=("b", "c"),
    deleted={"b": dv.encode(BitMap([1, 5]))},
    rewrites=(Rewrite("a", (("b", 10, dv.encode(BitMap([1]))), ("c", 3, dv.encode(BitMap())))),),
    keys=("id",),
)
RECORD = codec.encode_record(
    VersionInfo(
        7, 1_700_000_000_000, 6, Isolation.SERIALIZABLE, "x", (), data=(CHANGE,), app=("job", 3)
    )
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _decode_all(data: bytes, valid_for: Any = None) -> None:
    """Each decoder returns or raises CorruptionError; ``valid_for`` (a decoder)
    marks ``data`` as a valid encoding for it, which must decode."""
    for fn in (record.decode_file, codec.decode_record):
        if fn is valid_for:
            fn(data)  # valid input: a CorruptionError here fails the test
            continue
        try:
            fn(data)
        except CorruptionError:
            pass


VALID = {FILE: record.decode_file, INLINE: record.decode_file, RECORD: codec.decode_record}


def _canonical(raw: bytes) -> str:
    """The JSON document's content, exactly (1, 1.0 and true differ)."""
    return json.dumps(json.loads(raw[1:]), sort_keys=True)


def _restructure(raw: bytes, path: list[Any], value: Any, drop: bool) -> bytes:
    obj = json.loads(raw[1:])
    node = obj
    for step in path[:-1]:
        if isinstance(node, dict) and node:
            node = node[sorted(node)[step % len(node)]]
        elif isinstance(node, list) and node:
            node = node[step % len(node)]
    last = path[-1] if path else 0
    if isinstance(node, dict) and node:
        key = sorted(node)[last % len(node)]
        if drop:
            del node[key]
        else:
            node[key] = value
    elif isinstance(node, list) and node:
        node[last % len(node)] = value
    return raw[:1] + json.dumps(obj).encode()


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _decode_all(data)
    _decode_all(b"\x01" + data)
    _decode_all(b"\x02" + data)


@FUZZ
@given(st.sampled_from([FILE, INLINE, RECORD]), st.lists(any_op, min_size=1, max_size=4))
def test_mutated_bytes(valid: bytes, ops: list) -> None:
    data = mutate(valid, ops)
    _decode_all(data, VALID[valid] if data == valid else None)


@FUZZ
@given(
    st.sampled_from([FILE, RECORD]),
    st.lists(st.integers(0, 20), min_size=1, max_size=5),
    json_values,
    st.booleans(),
)
def test_restructured_json(valid: bytes, path: list[int], value: Any, drop: bool) -> None:
    data = _restructure(valid, path, value, drop)
    unchanged = data[:1] == valid[:1] and _canonical(data) == _canonical(valid)
    _decode_all(data, VALID[valid] if unchanged else None)


def test_valid_encodings_round_trip() -> None:
    f = record.decode_file(FILE)
    assert f.columns == ((1, "id"), (2, "v")) and f.record_count == 10
    rec = codec.decode_record(RECORD)
    assert rec.data == (CHANGE,) and rec.app == ("job", 3)
    g = record.decode_file(INLINE)
    assert g.is_inline and g.inline == INLINE_PAYLOAD and g.file_id.endswith("bb")


@FUZZ
@given(
    st.lists(st.integers(0, 20), min_size=1, max_size=5),
    json_values,
    st.booleans(),
    st.binary(max_size=40),
)
def test_restructured_inline_head(path: list[int], value: Any, drop: bool, payload: bytes) -> None:
    """An inline record's JSON head restructured (and any payload after it)."""
    n = int.from_bytes(INLINE[1:5], "big")
    head = _restructure(b"\x01" + INLINE[5 : 5 + n], path, value, drop)[1:]
    data = b"\x02" + len(head).to_bytes(4, "big") + head + payload
    try:
        f = record.decode_file(data)
    except CorruptionError:
        return
    assert f.is_inline and f.inline == payload


if __name__ == "__main__":
    import argparse

    import pytest

    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("-k", default=None)
    a = ap.parse_args()
    os.environ["KVSTORE_FUZZ_EXAMPLES"] = str(a.examples)
    sys.exit(pytest.main([__file__, "-q", *(["-k", a.k] if a.k else [])]))
