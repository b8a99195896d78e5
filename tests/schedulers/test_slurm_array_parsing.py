"""Slurm arrays read from recorded squeue output (tests/data/slurm/README.md): one status
per array under its own id, every element's state and exit code, the waiting bracket read
in full, and what the poller makes of an element that left the bracket unseen."""

from __future__ import annotations

from pathlib import Path

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.slurm import scancel, squeue
from iri_gateway.service.jobs.tracking import _left_the_queue
from iri_gateway.transport.base import CommandResult

DATA = Path(__file__).parent.parent / "data" / "slurm"
ARRAY = "7656"
TAG = "iri-gateway:array-capture"


def queue(name: str) -> squeue.Queue:
    text = (DATA / name).read_text()
    return squeue.parse(CommandResult(tuple(squeue.argv()), 0, text, ""))


def states(status: NativeStatus) -> dict[int, tuple[str, int | None]]:
    assert status.elements is not None
    return {i: (e.state.value, e.exit_code) for i, e in status.elements}


def test_a_throttled_array_is_one_status_with_its_waiting_bracket_read_whole() -> None:
    read = queue("squeue-array-throttled.txt")
    assert set(read.statuses) == {ARRAY} and read.tags == {TAG: ARRAY}
    status = read.statuses[ARRAY]
    assert status.state == JobState.ACTIVE and status.elements_complete
    assert states(status) == {
        0: ("active", None),
        2: ("active", None),
        **{i: ("queued", None) for i in range(4, 21, 2)},
    }


def test_exit_codes_come_with_the_queue_and_a_canceled_waiting_element_leaves_it() -> None:
    ended = queue("squeue-array-some-ended.txt").statuses[ARRAY]
    assert states(ended) == {
        0: ("completed", 0),
        2: ("failed", 2),
        4: ("failed", 1),
        6: ("completed", 0),
        8: ("failed", 2),
        10: ("failed", 1),
        16: ("active", None),
        18: ("active", None),
        20: ("queued", None),
    }
    before = queue("squeue-array-pending-canceled.txt").statuses[ARRAY]
    known = ArrayElements.of(
        (i, ElementState(JobState.QUEUED, "PENDING")) for i in ArrayIndices.parse("0-20:2")
    ).updated(before.elements or ())
    assert sorted(i for i, _ in _left_the_queue(known, dict(before.elements or ()), False)) == [
        12,
        14,
    ]


def test_a_canceled_array_keeps_each_elements_end() -> None:
    canceled = states(queue("squeue-array-canceled.txt").statuses[ARRAY])
    assert canceled[16] == ("canceled", 256 + 15) and canceled[20] == ("canceled", 0)
    assert canceled[8] == ("failed", 2) and canceled[0] == ("completed", 0)


def test_elements_are_cancelled_with_ranges_and_stepped_runs_one_by_one() -> None:
    assert scancel.elements_argv(ARRAY, ArrayIndices.parse("0-9,12,16-20:2")) == [
        "scancel",
        "7656_[0-9,12,16,18,20]",
    ]
