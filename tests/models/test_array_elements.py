"""An array's elements kept as runs: checked against a plain dictionary of elements for every
history of updates hypothesis finds, and the array's state rule, case by case."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState

STATUSES = [
    ElementState(JobState.QUEUED, "PENDING"),
    ElementState(JobState.ACTIVE, "RUNNING"),
    ElementState(JobState.COMPLETED, "COMPLETED", 0),
    ElementState(JobState.FAILED, "FAILED", 3),
]
elements = st.dictionaries(st.integers(0, 120), st.sampled_from(STATUSES), max_size=60)


@given(elements, st.lists(elements, max_size=4), st.integers(0, 130), st.integers(1, 50))
def test_runs_hold_exactly_the_elements_given(
    first: dict[int, ElementState],
    updates: list[dict[int, ElementState]],
    offset: int,
    limit: int,
) -> None:
    kept = ArrayElements.of(first.items())
    expected = dict(first)
    for news in updates:
        kept = kept.updated(news.items())
        expected.update(news)
    listing = sorted(expected.items())
    assert list(kept) == listing
    assert len(kept) == len(listing)
    assert kept.page(offset, limit) == listing[offset : offset + limit]
    assert ArrayElements.load(kept.dump()).runs == kept.runs
    counts: dict[str, int] = {}
    for _, status in listing:
        counts[status.state.value] = counts.get(status.state.value, 0) + 1
    assert kept.counts() == counts
    for before, after in itertools.pairwise(kept.runs):
        assert before.last < after.first


def test_ten_thousand_alike_elements_are_one_run_and_a_change_splits_it_in_three() -> None:
    done = ElementState(JobState.COMPLETED, "COMPLETED", 0)
    kept = ArrayElements.of((index, done) for index in range(10_000))
    assert len(kept.runs) == 1
    failed = ElementState(JobState.FAILED, "FAILED", 1)
    changed = kept.updated([(5000, failed)])
    assert [(run.first, run.last) for run in changed.runs] == [
        (0, 4999),
        (5000, 5000),
        (5001, 9999),
    ]
    assert changed.page(4999, 3) == [(4999, done), (5000, failed), (5001, done)]


def state_of(*states: JobState) -> JobState:
    return ArrayElements.of(
        (index, ElementState(state, state.value.upper())) for index, state in enumerate(states)
    ).state()


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ((JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED), JobState.ACTIVE),
        ((JobState.QUEUED, JobState.HELD, JobState.FAILED), JobState.QUEUED),
        ((JobState.HELD, JobState.COMPLETED), JobState.HELD),
        ((JobState.COMPLETED, JobState.COMPLETED), JobState.COMPLETED),
        ((JobState.COMPLETED, JobState.FAILED, JobState.CANCELED), JobState.FAILED),
        ((JobState.COMPLETED, JobState.CANCELED), JobState.CANCELED),
    ],
)
def test_the_arrays_state_follows_the_documented_rule(
    states: tuple[JobState, ...], expected: JobState
) -> None:
    assert state_of(*states) is expected
