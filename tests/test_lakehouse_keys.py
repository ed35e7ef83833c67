"""lakehouse.keys: ordering, prefix and round-trip properties of every key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse import keys

# names as the model allows them: no control characters (so no NUL)
name_chars = st.characters(blacklist_categories=("Cc", "Cs"))
names = st.text(name_chars, min_size=1, max_size=12)
ns_names = st.text(name_chars.filter(lambda c: c != "."), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(ns_names, names), min_size=2, max_size=20, unique=True))
def test_table_keys_sort_like_name_tuples(pairs):
    by_key = sorted(pairs, key=lambda p: keys.table_key(*p))
    assert by_key == sorted(pairs)


@settings(max_examples=100, deadline=None)
@given(ns_names, ns_names, names)
def test_children_prefix_matches_exactly_its_namespace(ns, other, table):
    for kind, make in (("table", keys.table_key), ("view", keys.view_key)):
        k = make(other, table)
        assert k.startswith(keys.children_prefix(kind, ns)) == (ns == other)
        assert keys.parse_child_key(k) == (other, table)
        assert keys.child_name(keys.children_prefix(kind, other), k) == table


@settings(max_examples=100, deadline=None)
@given(ns_names, names, names, names)
def test_state_prefix_is_per_table(ns, table, other, file_id):
    k = keys.data_file_key(ns, table, file_id)
    assert k.startswith(keys.table_state_prefix(ns, table))
    assert k.startswith(keys.table_state_prefix(ns, other)) == (table == other)
    assert keys.parse_state_key(k) == (ns, table, b"F/" + file_id.encode())
    assert keys.is_data_file_key(k)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**20 - 1), min_size=2, max_size=30, unique=True))
def test_record_keys_sort_numerically_and_round_trip(versions):
    assert sorted(versions, key=keys.record_key) == sorted(versions)
    for v in versions:
        assert keys.parse_record_key(keys.record_key(v)) == v


@given(st.lists(ns_names, min_size=1, max_size=20, unique=True))
def test_namespace_keys_round_trip_and_sort(nss):
    assert sorted(nss, key=keys.namespace_key) == sorted(nss)
    for ns in nss:
        assert keys.parse_namespace_key(keys.namespace_key(ns)) == ns


def test_kinds_occupy_disjoint_ranges():
    samples = [
        keys.HEAD,
        keys.LAKEHOUSE_DEF,
        keys.OLDEST,
        keys.PENDING_GC,
        keys.namespace_key("a"),
        keys.table_key("a", "b"),
        keys.view_key("a", "b"),
        keys.data_file_key("a", "b", "f"),
        keys.record_key(7),
    ]
    prefixes = [
        keys.NAMESPACE_PREFIX,
        keys.TABLE_PREFIX,
        keys.VIEW_PREFIX,
        keys.STATE_PREFIX,
        keys.RECORD_PREFIX,
    ]
    for k in samples:
        assert sum(k.startswith(p) for p in prefixes) <= 1
    # the version history and system keys are not part of a version's state
    for k in (keys.HEAD, keys.LAKEHOUSE_DEF, keys.OLDEST, keys.record_key(1)):
        assert not any(k.startswith(p) for p in keys.STATE_PREFIXES)


def test_namespace_prefix_of_another_does_not_capture_its_tables():
    # "a" vs "ab": NUL sorts below every name byte
    assert not keys.table_key("ab", "t").startswith(keys.children_prefix("table", "a"))
    assert keys.table_key("a", "zzz") < keys.table_key("ab", "a")


def test_u64_and_bad_input():
    assert keys.decode_u64(keys.encode_u64(2**63 + 5)) == 2**63 + 5
    with pytest.raises(ValueError):
        keys.decode_u64(b"\x00")
    with pytest.raises(ValueError):
        keys.table_key("a\x00b", "t")
    with pytest.raises(ValueError):
        keys.record_key(-1)
    with pytest.raises(ValueError):
        keys.parse_record_key(b"R/12")
    with pytest.raises(ValueError):
        keys.object_key("index", "a", "b")
    assert keys.prefix_end(b"T/a\x00") == b"T/a\x01"
    assert keys.prefix_end(b"\xff\xff") is None
