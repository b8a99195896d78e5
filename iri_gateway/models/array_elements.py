"""The elements of a job array as the gateway keeps them: each element's IRI state, the
scheduler's word for it and its exit code, in runs of neighbouring elements that share all
three.

Why runs: a scheduler reports a waiting array compactly (Slurm's `123_[5-9999%50]`), and an
array that ended well is ten thousand elements with state `completed` and exit code 0. Kept
as runs, such an array is a handful of entries in the store, a poll that changes a few
running elements rewrites a few runs, and a page of elements is cut from the runs without
listing the others. Counts by state (getJob's) and the array's own state (the rule below)
are read from the runs.

The array's state, from its elements' (documented in docs/jobspec.md, arrays):
- `active` while any element runs;
- otherwise, while any element waits: `held` when every waiting one is held, else `queued`;
- once every element ended: `completed` when all completed, `failed` when any failed, and
  otherwise (some were canceled, none failed) `canceled`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from iri_gateway.models.job import JobState


@dataclass(frozen=True)
class ElementState:
    """One element's state: IRI's, the scheduler's word, and its exit code once it ended."""

    state: JobState
    native_state: str
    exit_code: int | None = None


@dataclass(frozen=True)
class ElementRun:
    """Elements `first`, `first + step`, ... `last` of an array, all in `status`."""

    first: int
    last: int
    step: int
    status: ElementState

    def __len__(self) -> int:
        return (self.last - self.first) // self.step + 1

    def indices(self) -> range:
        return range(self.first, self.last + 1, self.step)


class ArrayElements:
    """Every element of one array, in ascending order of index, as runs (see the module)."""

    def __init__(self, runs: Iterable[ElementRun] = ()) -> None:
        self.runs: list[ElementRun] = list(runs)
        self._positions: list[int] = []
        self._index()

    def _index(self) -> None:
        total, positions = 0, []
        for run in self.runs:
            positions.append(total)
            total += len(run)
        self._positions, self._count = positions, total

    @classmethod
    def of(cls, elements: Iterable[tuple[int, ElementState]]) -> ArrayElements:
        """The runs of elements given one by one (in any order; the last word on an index
        stands)."""
        latest = dict(elements)
        runs: list[ElementRun] = []
        for index in sorted(latest):
            runs = _appended(runs, index, index, 1, latest[index])
        return cls(runs)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple[int, ElementState]]:
        for run in self.runs:
            for index in run.indices():
                yield index, run.status

    def page(self, offset: int, limit: int) -> list[tuple[int, ElementState]]:
        """Elements `offset` to `offset + limit - 1` in ascending order of index."""
        found: list[tuple[int, ElementState]] = []
        at = max(0, bisect.bisect_right(self._positions, offset) - 1)
        position = offset
        while at < len(self.runs) and len(found) < limit:
            run = self.runs[at]
            skip = position - self._positions[at]
            if skip < len(run):
                take = min(len(run) - skip, limit - len(found))
                start = run.first + skip * run.step
                found += [(start + k * run.step, run.status) for k in range(take)]
                position += take
            at += 1
        return found

    def counts(self) -> dict[str, int]:
        """How many elements are in each IRI state (states with none left out)."""
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.status.state.value] = counts.get(run.status.state.value, 0) + len(run)
        return counts

    def state(self) -> JobState:
        """The array's IRI state, by the rule in the module docstring."""
        counts = self.counts()
        if counts.get(JobState.ACTIVE.value):
            return JobState.ACTIVE
        waiting = counts.get(JobState.QUEUED.value, 0) + counts.get(JobState.NEW.value, 0)
        if waiting:
            return JobState.QUEUED
        if counts.get(JobState.HELD.value):
            return JobState.HELD
        if counts.get(JobState.FAILED.value):
            return JobState.FAILED
        if counts.get(JobState.CANCELED.value):
            return JobState.CANCELED
        return JobState.COMPLETED

    def updated(self, news: Iterable[tuple[int, ElementState]]) -> ArrayElements:
        """These elements with `news` (element index and state) taking the place of what was
        known of those indices; others unchanged. Costs the runs plus the news, whatever
        the array's size."""
        changes = dict(news)
        if not changes:
            return self
        merged: list[ElementRun] = []
        pending = sorted(changes)
        at = 0
        for run in self.runs:
            # News before this run (indices no run held yet).
            while at < len(pending) and pending[at] < run.first:
                merged = _appended(merged, pending[at], pending[at], 1, changes[pending[at]])
                at += 1
            start = run.first
            while at < len(pending) and pending[at] <= run.last:
                index = pending[at]
                if (index - run.first) % run.step == 0:
                    if index > start:
                        merged = _appended(merged, start, index - run.step, run.step, run.status)
                    start = index + run.step
                merged = _appended(merged, index, index, 1, changes[index])
                at += 1
            if start <= run.last:
                merged = _appended(merged, start, run.last, run.step, run.status)
        for index in pending[at:]:
            merged = _appended(merged, index, index, 1, changes[index])
        return ArrayElements(_sorted_runs(merged))

    # ---- the store's form ------------------------------------------------------------------

    def dump(self) -> list[list[object]]:
        """JSON: `[first, last, step, state, native_state, exit_code]` per run."""
        return [
            [
                r.first,
                r.last,
                r.step,
                r.status.state.value,
                r.status.native_state,
                r.status.exit_code,
            ]
            for r in self.runs
        ]

    @classmethod
    def load(cls, dumped: list[list[object]]) -> ArrayElements:
        runs = []
        for first, last, step, state, native, code in dumped:
            if not (isinstance(first, int) and isinstance(last, int) and isinstance(step, int)):
                raise ValueError(f"not an element run: {[first, last, step]}")
            status = ElementState(
                JobState(str(state)), str(native), code if isinstance(code, int) else None
            )
            runs.append(ElementRun(first, last, step, status))
        return cls(runs)


def _appended(
    runs: list[ElementRun], first: int, last: int, step: int, status: ElementState
) -> list[ElementRun]:
    """`runs` with elements `first..last` (by `step`) in `status` after them, joined to the
    last run when they continue it with its step (or make a two-element run with it)."""
    if runs:
        before = runs[-1]
        gap = first - before.last
        if before.status == status and gap > 0:
            steps = {
                run.step for run in (before, ElementRun(first, last, step, status)) if len(run) > 1
            }
            if steps <= {gap}:
                runs[-1] = ElementRun(before.first, last, gap, status)
                return runs
    runs.append(ElementRun(first, last, step, status))
    return runs


def _sorted_runs(runs: list[ElementRun]) -> list[ElementRun]:
    """Runs as `updated` builds them, in order. News of an index inside a run's span that is
    not one of its elements (`3` inside `0-8:2`) come out before that run: such a set is
    rebuilt element by element (rare: news are few and most runs have step 1)."""
    for before, after in itertools.pairwise(runs):
        if after.first <= before.last:
            return ArrayElements.of(
                (index, run.status) for run in runs for index in run.indices()
            ).runs
    return runs
