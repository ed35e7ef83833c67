"""WriteBatch.put_many: the same batch, checks and errors as put() pair by pair."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvstore
from kvstore.entries import MAX_KEY_LEN

key_st = st.one_of(
    st.binary(min_size=1, max_size=4),
    st.binary(min_size=1, max_size=4).map(bytearray),
)
pair_st = st.tuples(key_st, st.binary(max_size=6))


@settings(max_examples=200, deadline=None)
@given(st.lists(pair_st, max_size=3), st.lists(pair_st, max_size=12), st.booleans())
def test_put_many_equals_put_one_by_one(
    before: list[tuple[Any, bytes]], pairs: list[tuple[Any, bytes]], as_iter: bool
) -> None:
    one, many = kvstore.WriteBatch(), kvstore.WriteBatch()
    for k, v in before:
        one.put(k, v)
        many.put(k, v)
    for k, v in pairs:
        one.put(k, v)
    assert many.put_many(iter(pairs) if as_iter else pairs) is many
    assert list(many) == list(one)  # same operations, same order


@pytest.mark.parametrize(
    ("pairs", "error", "match"),
    [
        ([(b"", b"v")], ValueError, "key must not be empty"),
        ([("text", b"v")], TypeError, "key must be bytes"),
        ([(b"k", "text")], TypeError, "value must be bytes"),
        ([(b"k" * (MAX_KEY_LEN + 1), b"v")], ValueError, "limit"),
        ([(b"k", b"v", b"extra")], TypeError, "pairs"),
        ([b"kv"], TypeError, "pairs"),
        ([None], TypeError, "pairs"),
    ],
)
def test_put_many_bad_input(pairs: list[Any], error: type, match: str) -> None:
    batch = kvstore.WriteBatch()
    with pytest.raises(error, match=match):
        batch.put_many(pairs)


def test_put_many_writes_atomically(tmp_path: Any) -> None:
    with kvstore.open(str(tmp_path / "db")) as db:
        pairs = [(b"k%04d" % i, b"v%d" % i) for i in range(500)]
        db.write(kvstore.WriteBatch().put_many(pairs), durable=False)
        assert list(db.scan()) == pairs


@settings(max_examples=100, deadline=None)
@given(st.lists(pair_st, max_size=3), st.lists(pair_st, max_size=12))
def test_transaction_put_many_equals_put_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    before: list[tuple[Any, bytes]],
    pairs: list[tuple[Any, bytes]],
) -> None:
    """Transaction.put_many: what commits is what put() pair by pair commits."""
    results = []
    for many in (False, True):
        db = kvstore.open(str(tmp_path_factory.mktemp("db")))
        try:
            with db.transaction() as txn:
                for k, v in before:
                    txn.put(k, v)
                if many:
                    txn.put_many(pairs)
                else:
                    for k, v in pairs:
                        txn.put(k, v)
            results.append(list(db.snapshot().scan_prefix(b"")))
        finally:
            db.close()
    assert results[0] == results[1]


def test_transaction_put_many_refuses_bad_pairs(tmp_path: Any) -> None:
    db = kvstore.open(str(tmp_path))
    try:
        txn = db.transaction()
        with pytest.raises(ValueError, match="key must not be empty"):
            txn.put_many([(b"", b"v")])
        with pytest.raises(TypeError, match="pairs"):
            txn.put_many([b"kv"])  # type: ignore[list-item]
        txn.rollback()
    finally:
        db.close()
