"""Arrays on the real OpenPBS 23.06.06 (scripts/pbs), through the engine: locally as root and
through the SSH login node as alice.

Every array is submitted with `Engine.submit` (negotiation, `#PBS -J first-last[:step][%N]`,
qsub) and tracked by the real poller: one `qstat -f -F json -x -t` per resource, account and
cycle, whose subjobs become the array's elements (schedulers/pbs/qstat_arrays.py). Cancels of
chosen elements and of the whole array go through the engine, as the API sends them.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.array_elements import ArrayElements
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.schedulers.pbs.batch import PbsBatch
from iri_gateway.schedulers.pbs.never_runs import DELETED, VERDICT
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from tests.integration.test_pbs_batch import CountingTransport
from tests.integration.test_pbs_engine import OWNER, RESOURCES, submit, wait_until

pytestmark = pytest.mark.integration

ALICE_HOME = Path("/home/alice")


@pytest.fixture
def engine(pbs_engine: Engine) -> Engine:
    return pbs_engine


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder every account (root, alice) can write."""
    folder = Path("/tmp") / f"iri-pbs-arrays-{tmp_path.name}-{os.getpid()}"
    folder.mkdir(mode=0o777, exist_ok=True)
    folder.chmod(0o777)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def elements_of(engine: Engine, job_id: str) -> dict[int, tuple[str, str, int | None]]:
    """Each element of the array job as the store keeps it: (IRI state, PBS's letter, exit)."""
    record = engine.store.get(job_id)
    assert record is not None
    return {
        index: (status.state.value, status.native_state, status.exit_code)
        for index, status in ArrayElements.load(record.elements)
    }


def state_of(engine: Engine, job_id: str) -> JobState:
    record = engine.store.get(job_id)
    assert record is not None
    return record.state


def in_state(engine: Engine, job_id: str, state: str) -> list[int]:
    return sorted(i for i, (s, _, _) in elements_of(engine, job_id).items() if s == state)


def server_jobs(native_id: str) -> dict[str, Any]:
    """`qstat -f -F json -x -t` of one array, as root, read without the adapter."""
    shown = subprocess.run(
        ["qstat", "-f", "-F", "json", "-x", "-t", native_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    jobs: dict[str, Any] = json.loads(shown.stdout, strict=False)["Jobs"]
    return jobs


def folder_of(record: JobRecord) -> Path:
    """The job's folder on this machine (alice's `~` is her home)."""
    directory = record.paths.directory or ""
    return ALICE_HOME / directory[2:] if directory.startswith("~/") else Path(directory)


def array_job(command: str, array: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "executable": "/bin/sh",
        "arguments": ["-c", command],
        "resources": {"exclusive_node_use": False},
        "attributes": {"duration": 600},
        "array": array,
        **more,
    }


# --- a throttled array runs to its end ---------------------------------------------------


def test_a_throttled_array_keeps_every_elements_exit_code_and_output(
    engine: Engine, shared_dir: Path
) -> None:
    """Six elements (`0-10:2`), two at a time (`%2`: PBS's max_run_subjobs), on both
    resources: each sees its index as IRI_ARRAY_INDEX and PBS_ARRAY_INDEX, writes its own
    output file (`%a` in stdout_path), notes how many elements ran beside it, and exits with
    index % 3. The four vnodes have eight CPUs: without the throttle all six would run."""
    records = {}
    for resource in RESOURCES:
        marks = shared_dir / f"marks-{resource}"
        marks.mkdir(mode=0o777)
        marks.chmod(0o777)
        command = (
            f"i=$IRI_ARRAY_INDEX; touch {marks}/$i; ls {marks} | wc -l > {marks}-seen-$i; "
            f'sleep 2; rm {marks}/$i; echo "element $i (PBS $PBS_ARRAY_INDEX) by $(id -un)"; '
            "exit $((i % 3))"
        )
        spec = array_job(
            command,
            {"indices": "0-10:2", "max_concurrent": 2},
            stdout_path="element-%a.out",
        )
        records[resource] = submit(engine, resource, spec)
    for record in records.values():
        assert "#PBS -J 0-10:2%2" in record.script, record.script
        assert "element-^array_index^.out" in record.script, record.script
        assert record.native_id and record.native_id.endswith("[].pbshost"), record
        shown = server_jobs(record.native_id)[record.native_id]
        assert shown["max_run_subjobs"] == 2, shown
        assert shown["array_indices_submitted"] == "0-10:2", shown
    done = wait_until(engine, [r.id for r in records.values()], lambda r: r.state.final, 240)
    for resource, submitted in records.items():
        record = done[submitted.id]
        assert record.state == JobState.FAILED, record
        # The counts, then PBS's comment on the array: `Job Array Began at ... and failed`.
        assert (record.message or "").startswith("array of 6: 2 completed, 4 failed (Job Array")
        elements = elements_of(engine, record.id)
        assert {i: (s, code) for i, (s, _, code) in elements.items()} == {
            i: ("completed" if i % 3 == 0 else "failed", i % 3) for i in range(0, 11, 2)
        }
        assert {letter for _, letter, _ in elements.values()} <= {"X", "F"}, elements
        for index in range(0, 11, 2):
            written = (folder_of(record) / f"element-{index}.out").read_text()
            assert written == f"element {index} (PBS {index}) by {OWNER[resource]}\n"
            seen = int((shared_dir / f"marks-{resource}-seen-{index}").read_text())
            assert 1 <= seen <= 2, f"{seen} elements ran at once (throttle 2)"


# --- cancels ---------------------------------------------------------------------------------


def test_chosen_elements_are_canceled_then_the_rest_and_an_ended_one_keeps_its_exit(
    engine: Engine,
) -> None:
    """Seven elements, two at a time: element 0 ends at once (exit 0), the others sleep. A
    running element and two queued ones are canceled (one qdel of a range with a step, such
    as `N[1-5:2]`), then the whole array: every element is canceled except 0, which keeps
    its exit code (a qdel naming an ended subjob, or the whole array, would make PBS forget
    it: PbsBatch never sends one)."""
    command = 'if [ "$IRI_ARRAY_INDEX" = 0 ]; then exit 0; fi; exec sleep 300'
    spec = array_job(command, {"indices": "0-6", "max_concurrent": 2})
    records = [submit(engine, resource, spec) for resource in RESOURCES]
    ids = [record.id for record in records]

    def started(record: JobRecord) -> bool:
        return in_state(engine, record.id, "completed") == [0] and (
            len(in_state(engine, record.id, "active")) == 2
        )

    wait_until(engine, ids, started, 120)
    chosen: dict[str, list[int]] = {}
    for record in records:
        active = in_state(engine, record.id, "active")
        queued = in_state(engine, record.id, "queued")
        assert len(queued) == 4, elements_of(engine, record.id)
        chosen[record.id] = [active[0], queued[0], queued[2]]
        engine.cancel_elements(
            owner=record.owner, job_id=record.id, indices=ArrayIndices.of(chosen[record.id])
        )

    def chosen_canceled(record: JobRecord) -> bool:
        return set(chosen[record.id]) <= set(in_state(engine, record.id, "canceled"))

    wait_until(engine, ids, chosen_canceled, 120)
    for record in records:
        elements = elements_of(engine, record.id)
        assert elements[0] == ("completed", "X", 0), elements
        canceled = in_state(engine, record.id, "canceled")
        assert canceled == sorted(chosen[record.id]), elements
        assert state_of(engine, record.id) == JobState.ACTIVE
        engine.cancel(owner=record.owner, job_id=record.id)
    done = wait_until(engine, ids, lambda r: r.state.final, 120)
    for record in records:
        final = done[record.id]
        assert final.state == JobState.CANCELED, final
        elements = elements_of(engine, record.id)
        assert elements[0][0::2] == ("completed", 0), elements
        assert in_state(engine, record.id, "canceled") == [1, 2, 3, 4, 5, 6], elements
        assert record.native_id
        shown = server_jobs(record.native_id)
        assert shown[record.native_id]["job_state"] == "F", shown[record.native_id]
        first = shown[record.native_id.replace("[]", "[0]")]
        assert first["Exit_status"] == 0 and first["array_index"] == 0, first


def test_one_qstat_reports_a_queued_array_and_a_plain_job_and_a_cancel_ends_the_array(
    engine: Engine,
) -> None:
    """In the queue `parked` (which starts nothing) an array's subjobs all stay queued
    (`array_indices_remaining` names them). One qstat answers for the array and a plain job;
    the array's cancel deletes its queued subjobs by a range, which ends the array."""
    parked = {"queue_name": "parked", "duration": 600}
    array = submit(
        engine,
        "pbs",
        array_job("true", {"indices": "3-9:3"}, attributes=parked),
    )
    plain = submit(
        engine,
        "pbs",
        {
            "executable": "/bin/true",
            "attributes": parked,
            "resources": {"exclusive_node_use": False},
        },
    )
    assert array.native_id and plain.native_id
    transport = CountingTransport()
    batch = PbsBatch(transport)  # type: ignore[arg-type]
    found = batch.statuses([array.native_id, plain.native_id])
    assert [argv[0] for argv in transport.calls] == ["qstat"], transport.calls
    assert "-t" in transport.calls[0], transport.calls
    assert found[plain.native_id].elements is None
    queued = found[array.native_id]
    assert isinstance(queued, NativeStatus) and queued.elements is not None
    assert queued.state == JobState.QUEUED and queued.native_state == "Q", queued
    assert [(i, s.state, s.native_state) for i, s in queued.elements] == [
        (i, JobState.QUEUED, "Q") for i in (3, 6, 9)
    ]
    for record in (array, plain):
        engine.cancel(owner=record.owner, job_id=record.id)
    done = wait_until(engine, [array.id, plain.id], lambda r: r.state.final, 60)
    assert done[array.id].state == JobState.CANCELED, done[array.id]
    assert set(in_state(engine, array.id, "canceled")) == {3, 6, 9}
    assert done[plain.id].state == JobState.CANCELED, done[plain.id]


def test_an_array_pbs_can_never_run_fails_with_pbs_words(engine: Engine) -> None:
    """PBS accepts an array whose elements ask for more CPUs than any vnode has and keeps it
    queued with `Can Never Run`: the gateway deletes it and reports it failed, every element
    failed (`pbs-overclaimed` claims 16 cores per node; the vnodes have 2)."""
    spec = array_job(
        "true",
        {"indices": "0-2"},
        resources={"node_count": 1, "processes_per_node": 10, "exclusive_node_use": False},
    )
    record = engine.submit(
        owner="root", resource_id="pbs-overclaimed", spec=parse_jobspec(spec)
    ).record
    (done,) = wait_until(engine, [record.id], lambda r: r.state.final, 90).values()
    assert done.state == JobState.FAILED, done
    assert f"{VERDICT}: Insufficient amount of resource: ncpus" in (done.message or "")
    assert DELETED in (done.message or "")
    assert in_state(engine, record.id, "failed") == [0, 1, 2], elements_of(engine, record.id)
    assert record.native_id
    assert server_jobs(record.native_id)[record.native_id]["job_state"] == "F"
