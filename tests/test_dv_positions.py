"""dv.from_positions' whole-array paths: numpy, array.array, pyarrow and bitmaps.

Each kind must give exactly the bitmap the one-item-at-a-time path gives for
the same positions (a Python list), and refuse what that path refuses (bool,
float, out of range) with the same kind of error naming the value.
"""

from __future__ import annotations

import array

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap, FrozenBitMap

from lakehouse.data import dv

MAX = dv.MAX_POSITION
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
ARRAY_CODES = ["b", "B", "h", "H", "i", "I", "l", "L", "q", "Q"]


def slow(values: list[int]) -> BitMap:
    """The generic path: a plain list, read one item at a time."""
    return dv.from_positions(list(values))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_numpy_arrays_of_every_integer_dtype(dtype: type) -> None:
    values = [5, 0, 3, 5, 100, 127]
    got = dv.from_positions(np.array(values, dtype=dtype))
    assert type(got) is BitMap
    assert got == slow(values) == BitMap([0, 3, 5, 100, 127])


@pytest.mark.parametrize("code", ARRAY_CODES)
def test_array_array_of_every_integer_code(code: str) -> None:
    values = [9, 1, 1, 126]
    assert dv.from_positions(array.array(code, values)) == slow(values)


class NoIter(np.ndarray):
    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("an array was read one item at a time")


class NoIterArray(array.array):  # type: ignore[type-arg]
    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("an array.array was read one item at a time")


def test_arrays_are_converted_whole_not_item_by_item() -> None:
    big = np.arange(0, 3_000_000, 3, dtype=np.int64)
    assert dv.from_positions(big.view(NoIter)) == BitMap(range(0, 3_000_000, 3))
    assert dv.from_positions(NoIterArray("q", [5, 1])) == BitMap([1, 5])


def test_bitmaps_are_copied() -> None:
    source = BitMap([1, 70_000, MAX])
    got = dv.from_positions(source)
    assert got == source and got is not source
    got.add(2)
    assert 2 not in source
    frozen = dv.from_positions(FrozenBitMap([4, 5]))
    assert type(frozen) is BitMap and frozen == BitMap([4, 5])


def test_pyarrow_integer_arrays() -> None:
    assert dv.from_positions(pa.array([4, 1, 4], pa.int64())) == BitMap([1, 4])
    chunked = pa.chunked_array([[7], [2, 65_536]], pa.uint32())
    assert dv.from_positions(chunked) == BitMap([2, 7, 65_536])
    with pytest.raises(ValueError, match=r"row position -3 is out of range 0\.\.4294967295"):
        dv.from_positions(pa.array([1, -3]))


def test_the_ends_of_the_range_are_accepted() -> None:
    for dtype in (np.int64, np.uint32, np.uint64):
        assert dv.from_positions(np.array([0, MAX], dtype=dtype)) == BitMap([0, MAX])
    assert dv.from_positions(array.array("Q", [MAX])) == BitMap([MAX])


def test_empty_arrays_give_an_empty_bitmap() -> None:
    assert dv.from_positions(np.array([], dtype=np.int64)) == BitMap()
    assert dv.from_positions(array.array("I")) == BitMap()
    # an empty list made into an array is float64: nothing in it to refuse (as before)
    assert dv.from_positions(np.array([])) == BitMap()
    assert dv.from_positions(pa.array([], pa.int32())) == BitMap()


@pytest.mark.parametrize(
    ("positions", "match"),
    [
        (np.array([3, -1, -2], dtype=np.int64), r"row position -1 is out of range 0\.\.4294967295"),
        (np.array([-128], dtype=np.int8), r"row position -128 is out of range"),
        (np.array([1, 1 << 32], dtype=np.int64), r"row position 4294967296 is out of range"),
        (np.array([2**64 - 1], dtype=np.uint64), r"row position 18446744073709551615 is out"),
        (array.array("q", [0, -5]), r"row position -5 is out of range"),
        (array.array("Q", [1 << 40]), r"row position 1099511627776 is out of range"),
    ],
)
def test_out_of_range_is_a_value_error_naming_the_first_bad_position(
    positions: object, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        dv.from_positions(positions)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("positions", "match"),
    [
        (np.array([True, False]), r"must be an integer, not bool: True"),
        (np.array([1.0, 2.0]), r"must be an integer, not float64: 1\.0"),
        (np.array([2.5], dtype=np.float32), r"must be an integer, not float32: 2\.5"),
        (array.array("d", [1.5]), r"must be an integer, not float64: 1\.5"),
        (array.array("f", [3.0]), r"must be an integer, not float32: 3\.0"),
        (np.array(["7"]), r"must be an integer, not <U1: '7'"),
        (np.array([[1, 2]]), r"must be a 1-dimensional array, not 2-dimensional"),
        (np.array([1, None], dtype=object), r"must be an integer, not NoneType: None"),
        (np.array([1, True], dtype=object), r"must be an integer, not bool: True"),
    ],
)
def test_non_integers_are_a_type_error_naming_the_value(positions: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        dv.from_positions(positions)  # type: ignore[arg-type]


def test_object_arrays_of_ints_take_the_item_path() -> None:
    assert dv.from_positions(np.array([3, 1, MAX], dtype=object)) == BitMap([1, 3, MAX])


def test_the_slow_path_is_unchanged_for_numpy_scalars_in_a_list() -> None:
    assert dv.from_positions([np.int64(4), np.uint8(2)]) == BitMap([2, 4])
    with pytest.raises(TypeError, match="must be an integer, not float64"):
        dv.from_positions([np.float64(1.0)])  # type: ignore[list-item]


@pytest.mark.parametrize("seed", range(6))
def test_random_inputs_equal_the_slow_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50_000))
    # dense runs and scattered high values: array, bitmap and run containers
    high = rng.integers(0, MAX, n, endpoint=True, dtype=np.uint64)
    runs = np.concatenate([np.arange(s, s + 300) for s in rng.integers(0, 1 << 20, 20)])
    values = np.concatenate([high, runs.astype(np.uint64)])
    rng.shuffle(values)
    expected = slow(values.tolist())
    assert len(expected) == len(set(values.tolist()))
    assert dv.from_positions(values) == expected
    assert dv.from_positions(values.astype(np.int64)) == expected
    assert dv.from_positions(array.array("Q", values.tolist())) == expected
    assert dv.from_positions(pa.array(values)) == expected
    assert dv.from_positions(BitMap(expected)) == expected
    assert dv.encode(dv.from_positions(values)) == dv.encode(expected)
