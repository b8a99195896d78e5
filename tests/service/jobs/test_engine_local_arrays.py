"""Arrays on the `local` resource, through the engine: real bash processes run by the local
runner at most `max_concurrent` at a time, each element's index, output and exit code, the
array's state and counts, and cancels of chosen elements and of the rest."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iri_gateway.models.array_elements import ArrayElements
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.service.jobs.engine import Engine
from tests.service.jobs.test_engine_local import engine, shell_job, wait_for

__all__ = ["engine"]


def elements_of(engine: Engine, job_id: str) -> dict[int, tuple[str, int | None]]:
    record = engine.store.get(job_id)
    assert record is not None
    return {
        index: (status.state.value, status.exit_code)
        for index, status in ArrayElements.load(record.elements)
    }


def test_an_array_runs_every_element_with_its_index_and_keeps_each_exit_code(
    engine: Engine, tmp_path: Path
) -> None:
    """Six elements, two at a time: each writes its index to its own output file (`%a`),
    records how many elements ran beside it, and exits with index % 3."""
    marks = tmp_path / "running"
    marks.mkdir()
    command = (
        f"touch {marks}/$IRI_ARRAY_INDEX; ls {marks} | wc -l > {tmp_path}/seen-$IRI_ARRAY_INDEX; "
        f"sleep 0.3; rm {marks}/$IRI_ARRAY_INDEX; echo element $IRI_ARRAY_INDEX; "
        "exit $((IRI_ARRAY_INDEX % 3))"
    )
    spec = shell_job(command, array={"indices": "0-10:2", "max_concurrent": 2})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record  # type: ignore[arg-type]
    record = wait_for(engine, record.id, lambda r: r.state.final, timeout=60)
    assert record.state == JobState.FAILED, record.message
    assert elements_of(engine, record.id) == {
        i: ("completed" if i % 3 == 0 else "failed", i % 3) for i in range(0, 11, 2)
    }
    assert record.message == "array of 6: 2 completed, 4 failed"
    directory = Path(record.paths.directory or "")
    for index in range(0, 11, 2):
        assert (directory / f"stdout-{index}.txt").read_text() == f"element {index}\n"
        assert int((tmp_path / f"seen-{index}").read_text()) <= 2


def test_cancel_of_chosen_elements_then_of_the_rest(engine: Engine) -> None:
    spec = shell_job("sleep 30", array={"indices": "0-5", "max_concurrent": 2})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record  # type: ignore[arg-type]
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    backend = engine.backends.get(engine.registry.get("local"), "alice")
    assert record.native_id is not None
    backend.batch.cancel_elements(record.native_id, ArrayIndices.parse([0, 4]))
    wait_for(
        engine,
        record.id,
        lambda r: (
            elements_of(engine, r.id).get(0, ("",))[0] == "canceled"
            and elements_of(engine, r.id).get(2, ("",))[0] == "active"
        ),
    )
    assert elements_of(engine, record.id)[4] == ("canceled", None), "never started"
    engine.cancel(owner="alice", job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED, record.message
    assert {state for state, _ in elements_of(engine, record.id).values()} == {"canceled"}


def test_a_second_cancel_never_signals_a_session_that_took_an_ended_elements_id(
    engine: Engine,
) -> None:
    """A cancel of the whole array kills the runner and the elements' wrappers, some before
    they record their element's end; the element's session id is then a free pid. Here it
    is given to a bystander (a session leader, as the gateway's file agents are): canceling
    again, or canceling elements, leaves it alone (CI saw an upload's agent killed so)."""
    spec = shell_job("sleep 30", array={"indices": "0-3", "max_concurrent": 2})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record  # type: ignore[arg-type]
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    engine.cancel(owner="alice", job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.native_id is not None
    batch = engine.backends.get(engine.registry.get("local"), "alice").batch
    elements = batch.root / record.native_id / "elements"
    sid_file = sorted(elements.glob("*.sid"))[0]
    index = sid_file.name.split(".", 1)[0]
    (elements / f"{index}.exit").unlink(missing_ok=True)  # its wrapper died first
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        sid_file.write_text(f"{bystander.pid}\n")  # the freed pid, taken again
        batch.cancel(record.native_id)
        batch.cancel_elements(record.native_id, ArrayIndices.parse("0-3"))
        with pytest.raises(subprocess.TimeoutExpired):
            bystander.wait(timeout=1)
    finally:
        bystander.kill()
        bystander.wait()


def test_a_restarted_array_runs_every_element_again(engine: Engine, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    spec = shell_job(f"echo $IRI_ARRAY_INDEX >> {runs}", array={"indices": "0-2"})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record  # type: ignore[arg-type]
    wait_for(engine, record.id, lambda r: r.state == JobState.COMPLETED)
    engine.restart(owner="alice", job_id=record.id)
    record = wait_for(
        engine, record.id, lambda r: r.state.final and len(runs.read_text().split()) == 6
    )
    assert record.state == JobState.COMPLETED, record.message
    assert sorted(runs.read_text().split()) == ["0", "0", "1", "1", "2", "2"]
    assert elements_of(engine, record.id) == {i: ("completed", 0) for i in range(3)}


def test_a_value_that_reads_like_the_array_line_does_not_make_an_array(
    engine: Engine, tmp_path: Path
) -> None:
    """The local script's array line is its second line only: a user's quoted value that
    spans lines and holds the same words further down is a value, not a directive."""
    runs = tmp_path / "runs"
    spec = shell_job(f"echo once >> {runs}", environment={"NOTE": "x\n#IRI-LOCAL --array=0-3\ny"})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record  # type: ignore[arg-type]
    assert "\n#IRI-LOCAL --array=0-3\n" in record.script, "the value is in the script"
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.COMPLETED and not record.elements
    assert runs.read_text() == "once\n"
