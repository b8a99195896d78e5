"""A job array's indices: which elements an array has, written as a user writes them and as
each scheduler reads them.

A user writes `"0-999"`, `"0-999:2"`, `"1,5,10-20"` (Slurm's `--array` grammar, without its
`%` throttle, which is the separate `max_concurrent`) or a JSON list of whole numbers. Both
become one `ArrayIndices`: sorted, distinct indices kept as runs `(first, last, step)`, so that
a million elements cost a few tuples, the count is a sum, and the n-th element (for pages of
elements) is found without listing the others.

Why written here and not taken from a library: the grammar is Slurm's and PBS's own, and the
bounds are the point (a 40,000-digit index, or `0-4000000000`, must be refused by reading at
most a few characters, before Python's `int` or a loop ever sees it).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

INDEX_VARIABLE = "IRI_ARRAY_INDEX"
"""What every element of an array is told its index as (beside the scheduler's own)."""
INDEX_PATTERN = "%a"
"""What an array's `stdout_path`/`stderr_path` says where each element's index goes."""
MAX_INDEX = 4_000_000
"""The largest index any array may have (Slurm's MaxArraySize is at most 4,000,001; a site's
own, smaller limit is the profile's and the scheduler's to say)."""
MAX_INDEX_DIGITS = len(str(MAX_INDEX))
MAX_TEXT = 1000
"""Characters of an `indices` string (about a hundred ranges)."""
MAX_LISTED = 10_000
"""Entries of an `indices` list (a longer set is written as ranges)."""

TEXT_PATTERN = r"^\d{1,8}(-\d{1,8}(:\d{1,8})?)?(,\d{1,8}(-\d{1,8}(:\d{1,8})?)?)*$"
"""The grammar's form, for JSON Schema and query checks: indices, ranges and stepped ranges,
comma separated, no blanks. What it cannot say (ascending and apart, a step of at least 1,
an index's bound) `ArrayIndices.parse` refuses with the reason."""
_DIGITS = MAX_INDEX_DIGITS + 1
"""Digits read of one number: one more than an index has, so that a number just too large is
refused by its value (the clearer reason) and a longer one by the grammar."""
_PART = re.compile(rf"(\d{{1,{_DIGITS}}})(?:-(\d{{1,{_DIGITS}}})(?::(\d{{1,{_DIGITS}}}))?)?")


class ArrayIndicesError(ValueError):
    """Indices that are not a valid set, with the reason in a user's words."""


@dataclass(frozen=True)
class ArrayIndices:
    """Distinct indices in ascending order, as runs `(first, last, step)` that do not overlap
    (`last` is an element: `first + k * step`)."""

    runs: tuple[tuple[int, int, int], ...]
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Position of each run's first element among all the elements (for `nth`)."""

    def __post_init__(self) -> None:
        starts, total = [], 0
        for first, last, step in self.runs:
            starts.append(total)
            total += (last - first) // step + 1
        object.__setattr__(self, "_starts", tuple(starts))

    @classmethod
    def parse(cls, written: str | list[int]) -> ArrayIndices:
        """The indices a user wrote (a string in the `--array` grammar, or a list)."""
        if isinstance(written, str):
            return cls._from_text(written)
        if len(written) > MAX_LISTED:
            raise ArrayIndicesError(
                f"a list of at most {MAX_LISTED} indices (write a longer set as ranges, "
                'such as "0-99999")'
            )
        for value in written:
            _bounded(value)
        if len(set(written)) != len(written):
            twice = sorted({value for value in written if written.count(value) > 1})[:5]
            raise ArrayIndicesError(f"lists {', '.join(map(str, twice))} more than once")
        return cls.of(written)

    @classmethod
    def of(cls, indices: list[int] | set[int] | range) -> ArrayIndices:
        """The runs of a set of indices (each between 0 and MAX_INDEX)."""
        values = sorted(set(indices))
        if not values:
            raise ArrayIndicesError("at least one index")
        runs: list[tuple[int, int, int]] = []
        first = last = values[0]
        step = 0
        for value in values[1:]:
            if step == 0 and last == first:
                step, last = value - first, value
            elif value - last == step:
                last = value
            else:
                runs.append((first, last, step or 1))
                first = last = value
                step = 0
        runs.append((first, last, step or 1))
        return cls(tuple(runs))

    @classmethod
    def _from_text(cls, text: str) -> ArrayIndices:
        if len(text) > MAX_TEXT:
            raise ArrayIndicesError(f"at most {MAX_TEXT} characters")
        if "%" in text:
            raise ArrayIndicesError(
                "has a `%` throttle: give it as `max_concurrent` (a number), not in `indices`"
            )
        parts = text.replace(" ", "").split(",")
        runs: list[tuple[int, int, int]] = []
        for part in parts:
            matched = _PART.fullmatch(part)
            if matched is None:
                raise ArrayIndicesError(
                    f"{part!r} is not an index (N), a range (N-M) or a range with a step "
                    f"(N-M:S); whole numbers of at most {MAX_INDEX_DIGITS} digits, such as "
                    '"0-999", "0-999:2" or "1,5,10-20"'
                )
            first = _bounded(int(matched[1]))
            last = _bounded(int(matched[2])) if matched[2] else first
            step = int(matched[3]) if matched[3] else 1
            if last < first:
                raise ArrayIndicesError(f"{part!r} ends before it begins")
            if step < 1:
                raise ArrayIndicesError(f"{part!r} has a step of 0: a step is at least 1")
            runs.append((first, first + (last - first) // step * step, step))
        return cls(tuple(_joined(text, runs)))

    # ---- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        first, last, step = self.runs[-1]
        return self._starts[-1] + (last - first) // step + 1

    def __iter__(self) -> Iterator[int]:
        for first, last, step in self.runs:
            yield from range(first, last + 1, step)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        at = bisect.bisect_right(self.runs, (index, MAX_INDEX + 1, 0)) - 1
        if at < 0:
            return False
        first, last, step = self.runs[at]
        return first <= index <= last and (index - first) % step == 0

    def nth(self, position: int) -> int:
        """The element at `position` (0-based) in ascending order."""
        if not 0 <= position < len(self):
            raise IndexError(position)
        at = bisect.bisect_right(self._starts, position) - 1
        first, _, step = self.runs[at]
        return first + (position - self._starts[at]) * step

    @property
    def first(self) -> int:
        return self.runs[0][0]

    @property
    def last(self) -> int:
        return self.runs[-1][1]

    def text(self) -> str:
        """The `--array` grammar: `0-999:2,1001` (a run of one is its index)."""
        return ",".join(_run_text(run) for run in self.runs)

    def single_range(self) -> tuple[int, int, int] | None:
        """The one run `(first, last, step)` when the indices are one (PBS's `-J` takes no
        more); None otherwise."""
        return self.runs[0] if len(self.runs) == 1 else None


def _bounded(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX:
        raise ArrayIndicesError(f"indices are whole numbers from 0 to {MAX_INDEX}, not {value!r}")
    return value


def _run_text(run: tuple[int, int, int]) -> str:
    first, last, step = run
    if first == last:
        return str(first)
    return f"{first}-{last}" if step == 1 else f"{first}-{last}:{step}"


def _joined(text: str, runs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Written runs as a set's runs: ascending and apart (a run that continues the one before
    with its step is joined to it). Runs out of order or overlapping are refused rather than
    sorted out: that would mean listing up to millions of elements in the serving process,
    and `1-10,5` is more likely a mistake than a wish."""
    joined: list[tuple[int, int, int]] = []
    for first, last, step in runs:
        if joined:
            before_first, before_last, _ = joined[-1]
            if first <= before_last:
                raise ArrayIndicesError(
                    f"{text!r}: {_run_text((first, last, step))!r} is not after "
                    f"{_run_text(joined[-1])!r}; list ranges in ascending order, apart"
                )
            gap = first - before_last
            steps = {
                run_step
                for run_first, run_last, run_step in (joined[-1], (first, last, step))
                if run_first != run_last
            }
            if steps <= {gap}:  # two single indices, or a run continued with its step
                joined[-1] = (before_first, last, gap)
                continue
        joined.append((first, last, step))
    return joined


@dataclass(frozen=True, kw_only=True)
class ArrayRules:
    """How one scheduler runs arrays: declared by its plug-in (`schedulers/*/__init__.py`),
    asked by negotiation (`planning.negotiate.arrays`) and the renderers."""

    index_variable: str
    """The scheduler's own variable holding an element's index (`SLURM_ARRAY_TASK_ID`);
    the script gives it to the job as IRI_ARRAY_INDEX."""
    output_index: str
    """What `%a` in an output path becomes in the scheduler's directive (`%a`,
    `^array_index^`)."""
    size_limit: str
    """The scheduler's name for its limit on arrays, for errors (`MaxArraySize`)."""
    limits_last_index: bool
    """The limit bounds the largest index (Slurm: below MaxArraySize); otherwise the
    number of elements (PBS: at most max_array_size)."""
    default_size: int
    """The limit when the profile names none (the scheduler's own default)."""
    one_range: bool = False
    """Only one range `N-M[:S]` of at least two elements is written (PBS's `-J`)."""

    def refusals(self, indices: ArrayIndices, *, size: int) -> list[tuple[str, str, str]]:
        """Why these indices cannot be an array here, as (field, reason, what is offered),
        under the resource's limit `size`; empty when they can."""
        found: list[tuple[str, str, str]] = []
        if self.limits_last_index and indices.last >= size:
            found.append(
                (
                    "array.indices",
                    f"index {indices.last} is too large: indices here are below {size} "
                    f"({self.size_limit})",
                    f"0-{size - 1}",
                )
            )
        elif not self.limits_last_index and len(indices) > size:
            found.append(
                (
                    "array.indices",
                    f"{len(indices)} elements are too many: at most {size} here "
                    f"({self.size_limit})",
                    f"at most {size} elements",
                )
            )
        if self.one_range and (indices.single_range() is None or len(indices) < 2):
            found.append(
                (
                    "array.indices",
                    f"{indices.text()!r} is not one range of at least two elements, the "
                    "only form this scheduler's arrays take (N-M or N-M:S, N below M)",
                    "one range N-M[:S]",
                )
            )
        return found
