"""Array indices: the `--array` grammar and lists read into one set, checked against a plain
expansion for every small set hypothesis finds, and hostile input refused by its size."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iri_gateway.models.job_arrays import MAX_INDEX, ArrayIndices, ArrayIndicesError

small_sets = st.sets(st.integers(0, 300), min_size=1, max_size=60)


@given(small_sets)
def test_a_set_written_back_reads_as_the_same_set(indices: set[int]) -> None:
    read = ArrayIndices.of(indices)
    assert list(read) == sorted(indices)
    assert len(read) == len(indices)
    again = ArrayIndices.parse(read.text())
    assert list(again) == sorted(indices)
    assert ArrayIndices.parse(sorted(indices)) == read


@given(small_sets, st.integers(-5, 310))
def test_membership_and_positions_agree_with_the_listing(indices: set[int], probe: int) -> None:
    read = ArrayIndices.of(indices)
    assert (probe in read) is (probe in indices)
    listing = sorted(indices)
    assert [read.nth(position) for position in range(len(listing))] == listing
    with pytest.raises(IndexError):
        read.nth(len(listing))


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 7)), min_size=1, max_size=6
    )
)
def test_written_ranges_mean_what_slurm_reads(parts: list[tuple[int, int, int]]) -> None:
    """Ascending, apart ranges `N-M:S` are the elements Slurm would run; any other order is
    refused, never reordered silently."""
    text = ",".join(f"{first}-{first + span}:{step}" for first, span, step in parts)
    expected: list[int] = []
    for first, span, step in parts:
        expected.extend(range(first, first + span + 1, step))
    ascending = all(a < b for a, b in itertools.pairwise(expected))
    if ascending:
        assert list(ArrayIndices.parse(text)) == expected
    else:
        with pytest.raises(ArrayIndicesError, match="ascending order"):
            ArrayIndices.parse(text)


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("", "is not an index"),
        ("1-", "is not an index"),
        ("a-b", "is not an index"),
        ("-1", "is not an index"),
        ("0-9%5", "give it as `max_concurrent`"),
        ("5-1", "ends before it begins"),
        ("0-9:0", "a step of 0"),
        ("0-9,3", "ascending order"),
        (str(MAX_INDEX + 1), f"from 0 to {MAX_INDEX}"),
        ("9" * 40_000, "at most 1000 characters"),
        ("1" * 9, "is not an index"),
        ([], "at least one index"),
        ([-1], f"from 0 to {MAX_INDEX}"),
        ([True], f"from 0 to {MAX_INDEX}"),
        (list(range(10_001)), "a list of at most 10000"),
    ],
)
def test_bad_indices_are_refused_with_the_reason(written: str | list[int], reason: str) -> None:
    with pytest.raises(ArrayIndicesError, match=reason.replace("(", r"\(")):
        ArrayIndices.parse(written)


def test_the_largest_sets_are_read_without_listing_them() -> None:
    """Four million elements and fifty ranges: read, counted and paged from their runs (an
    expansion would take seconds and hundreds of MiB in the serving process)."""
    whole = ArrayIndices.parse(f"0-{MAX_INDEX}")
    many = ArrayIndices.parse(",".join(f"{k * 40_000}-{k * 40_000 + 100}:3" for k in range(50)))
    assert len(whole) == MAX_INDEX + 1 and whole.nth(MAX_INDEX) == MAX_INDEX
    assert len(many) == 50 * 34 and many.nth(34) == 40_000 and 40_003 in many
    assert 40_002 not in many and len(many.runs) == 50
    assert whole.single_range() == (0, MAX_INDEX, 1) and many.single_range() is None
