"""PBS arrays read from the real OpenPBS 23.06.06: `qstat -f -F json -x -t` documents of arrays
in every state, captured by tests/data/pbs/capture-real-arrays.sh (`real-array-*.json`, with
what qsub and qdel printed in `real-array-commands.txt`), and the qdel commands built from
them. The engine against the real server: tests/integration/test_pbs_arrays.py."""

from __future__ import annotations

import pytest

from iri_gateway.errors import CancelError
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.pbs import never_runs, qdel, qstat, qstat_arrays
from iri_gateway.schedulers.pbs.batch import PbsBatch
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.scripted import Answer, ScriptedTransport
from tests.support.paths import TESTS

DATA = TESTS / "data" / "pbs"
C, F, A, Q, H, X = "completed", "failed", "active", "queued", "held", "canceled"

Element = tuple[int, str, str, int | None]
KILLED = -1
"""In an expected element: the exit code of a subjob deleted while running, which the real
server has shown as 143 (the shell's 128 + SIGTERM) and as 271 (256 + SIGTERM) in two
captures (tests/data/pbs/README.md: 0 too, for plain jobs)."""


def document(name: str) -> dict[str, qstat.PbsJob]:
    return qstat.parse_document((DATA / f"real-array-{name}.json").read_text())


def array_in(name: str) -> tuple[str, qstat_arrays.ArrayView]:
    """The one array of a recorded document: its id and its view."""
    jobs = document(name)
    (array_id,) = (job_id for job_id in jobs if qstat_arrays.is_array(job_id))
    array = qstat_arrays.view(jobs, array_id)
    assert array is not None
    return array_id, array


def qdels(array_id: str, *runs: int | str) -> list[list[str]]:
    """One `qdel N[run].server` per run."""
    return [["qdel", qstat_arrays.subjob_id(array_id, run)] for run in runs]


def status_of(name: str) -> NativeStatus:
    array_id, array = array_in(name)
    return qstat_arrays.status(array, array_id)


def elements(status: NativeStatus) -> list[Element]:
    """The elements, a deleted running one's exit code (0, 143 or 271) as KILLED."""
    assert status.elements is not None
    return [
        (i, e.state.value, e.native_state, KILLED if _killed(e.state, e.exit_code) else e.exit_code)
        for i, e in status.elements
    ]


def _killed(state: JobState, exit_code: int | None) -> bool:
    return state == JobState.CANCELED and exit_code in (0, 143, 271)


# --- every state of an array, as the real server printed it ---------------------------------


@pytest.mark.parametrize(
    ("name", "letter", "state", "expected"),
    [
        # Not begun: PBS lists every subjob as Q (from the array's record), the array's
        # array_indices_remaining names them.
        ("queued", "Q", Q, [(i, Q, "Q", None) for i in range(4)]),
        # Submitted held: the subjobs show Q but are held with their array.
        ("held", "H", H, [(i, H, "H", None) for i in range(3)]),
        # -J 0-5%2: two run, four wait (max_run_subjobs 2).
        ("throttled", "B", A, [(0, A, "R", None), (1, A, "R", None)]
         + [(i, Q, "Q", None) for i in range(2, 6)]),
        # Ended while the array runs: X with each one's own exit (137: the shell's 128 + 9).
        ("begun", "B", A, [(0, C, "X", 0), (1, F, "X", 3), (2, F, "X", 137), (3, C, "X", 0),
                           (4, A, "R", None)]),
        # All ended: F; the array's state is the elements' rule (any failed: failed).
        ("finished", "F", F, [(0, C, "F", 0), (1, F, "F", 3), (2, F, "F", 137),
                              (3, C, "F", 0)]),
        # qdel of running [0] (its own record: substate 91, killed by SIGTERM), of queued [3] and
        # of the queued range [4-5] (no record: `Subjob finished`).
        ("some-deleted", "B", A, [(0, X, "X", KILLED), (1, A, "R", None), (2, A, "R", None),
                                  (3, X, "X", None), (4, X, "X", None), (5, X, "X", None)]),
        # Then qdel of the whole array.
        ("deleted", "F", X, [(0, X, "F", None), (1, X, "F", KILLED), (2, X, "F", KILLED),
                             (3, X, "F", None), (4, X, "F", None), (5, X, "F", None)]),
        # qdel of a range with a step, `N[2-6:2]`, in an array 0-8:2 that has not begun.
        ("stepped", "Q", Q, [(0, Q, "Q", None), (2, X, "X", None), (4, X, "X", None),
                             (6, X, "X", None), (8, Q, "Q", None)]),
    ],
)  # fmt: skip
def test_recorded_array_gives_each_elements_state_and_exit_code(
    name: str, letter: str, state: str, expected: list[Element]
) -> None:
    status = status_of(name)
    assert status.native_state == letter
    assert status.state is not None and status.state.value == state
    assert elements(status) == expected


def test_subjobs_without_a_record_of_their_own_never_lend_the_arrays_exit_status() -> None:
    """A deleted queued subjob is shown with the array's Exit_status (1 here: a summary of
    the others), which is not its own."""
    array_id, _ = array_in("deleted")
    shown = document("deleted")[qstat_arrays.subjob_id(array_id, 3)]
    assert (shown.exit_status, shown.array_index, shown.comment) == (1, None, "Subjob finished")
    assert qstat_arrays.element(shown) is not None
    assert qstat_arrays.element(shown).exit_code is None  # type: ignore[union-attr]


def test_a_range_or_whole_array_qdel_makes_pbs_forget_ended_subjobs() -> None:
    """Why PbsBatch never names an ended subjob to qdel: after `qdel N[1-2]` the records
    of [1] (exit 3) and [2] (exit 137) are gone, and after `qdel N[]` those of [0] and
    [3] (exit 0): PBS shows them as it shows subjobs deleted before they ran."""
    assert elements(status_of("begun"))[1:3] == [(1, F, "X", 3), (2, F, "X", 137)]
    assert elements(status_of("range-purged"))[1:3] == [(1, X, "X", None), (2, X, "X", None)]
    assert elements(status_of("whole-deleted")) == [
        (0, X, "F", None),
        (1, X, "F", None),
        (2, X, "F", None),
        (3, X, "F", None),
        (4, X, "F", KILLED),
    ]


def test_the_arrays_comment_is_its_reason_and_the_throttle_is_read() -> None:
    _, throttled = array_in("throttled")
    assert throttled.parent.max_run_subjobs == 2
    assert throttled.parent.array_indices_remaining == ((2, 5, 1),)
    assert status_of("queued").reason == "Not Running: Queue not started."
    assert (status_of("begun").reason or "").startswith("Job Array Began at ")
    assert (status_of("finished").reason or "").endswith(" and failed")


def test_several_arrays_in_one_document_each_with_its_elements() -> None:
    jobs = document("several")
    queued, finished, stepped = sorted(j for j in jobs if qstat_arrays.is_array(j))
    short = finished.partition(".")[0]  # `123[]`: the server's name left out
    found = qstat_arrays.statuses(jobs, [queued, short, stepped, "99999[].pbshost"])
    assert set(found) == {queued, short, stepped}
    assert found[short].native_id == short
    assert [len(found[i].elements or ()) for i in (queued, short, stepped)] == [4, 4, 5]


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("-", ()),
        ("", ()),
        ("2-5", ((2, 5, 1),)),
        ("0,8", ((0, 0, 1), (8, 8, 1))),
        ("0-8:2,11", ((0, 8, 2), (11, 11, 1))),
        ("1-10:4", ((1, 9, 4),)),
    ],
)
def test_the_servers_range_grammar(text: str, runs: tuple[tuple[int, int, int], ...]) -> None:
    assert qstat.subjob_ranges(text) == runs


@pytest.mark.parametrize("text", ["a-b", "5-2", "1-9:0", "1;2"])
def test_another_range_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a range of subjob indices"):
        qstat.subjob_ranges(text)


def test_a_malformed_range_makes_the_document_unusable() -> None:
    text = recorded("throttled").replace('"2-5"', '"2-x"')
    with pytest.raises(qstat.MalformedDocument, match="array_indices_remaining"):
        qstat.parse_document(text)


# --- qdel of subjobs -----------------------------------------------------------------------


def test_a_cancel_is_one_qdel_per_run_of_subjobs_that_have_not_ended() -> None:
    """One id per qdel: the real qdel client keeps only the first two ids of one array it is
    given (real-array-commands.txt). Runs keep their step (`N[0-4:2]`, which the real qdel
    takes)."""
    array_id, throttled = array_in("throttled")
    assert qdel.array_commands(array_id, throttled, None) == qdels(array_id, "0-5")
    chosen = ArrayIndices.parse([0, 2, 4, 5])
    assert qdel.array_commands(array_id, throttled, chosen) == qdels(array_id, "0-4:2", 5)


def test_a_cancel_never_names_an_ended_subjob() -> None:
    array_id, begun = array_in("begun")
    assert qdel.array_commands(array_id, begun, None) == qdels(array_id, 4)
    assert qdel.array_commands(array_id, begun, ArrayIndices.parse("0-3")) == []
    array_id, some = array_in("some-deleted")
    assert qdel.array_commands(array_id, some, None) == qdels(array_id, "1-2")
    array_id, stepped = array_in("stepped")
    assert qdel.array_commands(array_id, stepped, None) == qdels(array_id, "0-8:8")
    array_id, finished = array_in("finished")
    assert qdel.array_commands(array_id, finished, None) == []


def test_a_held_array_is_canceled_by_its_queued_range() -> None:
    """Seen on the real server: deleting every subjob of a held (or not yet begun) array
    by a range ends the array (F)."""
    array_id, held = array_in("held")
    assert qdel.array_commands(array_id, held, None) == qdels(array_id, "0-2")


def logged(words: str) -> CommandResult:
    """The first command of real-array-commands.txt whose output has `words`, as the
    CommandResult it was (what it printed all went to standard error)."""
    for block in (DATA / "real-array-commands.txt").read_text().split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("$ ") and words in block:
            code = int(lines[-1].removeprefix("[exit ").removesuffix("]"))
            stderr = "".join(f"{line}\n" for line in lines[1:-1])
            return CommandResult(tuple(lines[0][2:].split()), code, "", stderr)
    raise AssertionError(f"no command printed {words!r}")


def test_qdel_of_an_ended_subjob_is_not_an_error_but_an_invalid_one_is() -> None:
    """The real words and exit codes (real-array-commands.txt)."""
    ended = logged("Request invalid for finished array subjob")
    assert ended.exit_code == qdel.ENDED_SUBJOB_EXIT
    qdel.parse(ended)
    for words in ("Invalid request", "illegally formed job identifier"):
        refused = logged(words)
        with pytest.raises(CancelError) as raised:
            qdel.parse(refused)
        assert raised.value.stderr == refused.stderr
    both = CommandResult(
        ended.argv + logged("Invalid request").argv[1:],
        156,
        "",
        ended.stderr + logged("Invalid request").stderr,
    )
    with pytest.raises(CancelError):  # one ended, one refused: the refusal stands
        qdel.parse(both)


def test_the_qdel_client_keeps_two_ids_of_one_array() -> None:
    """`qdel N[2] N[4] N[6]` exited 0, the server received `N[2,4]`, and [6] stayed queued:
    why a cancel sends one id per qdel."""
    array_id, array = array_in("clipped")
    remaining = array.parent.array_indices_remaining
    assert remaining == ((0, 1, 1), (3, 3, 1), (5, 9, 1))
    log = (DATA / "real-array-commands.txt").read_text()
    assert f"{array_id.replace('[]', '[2,4]')};delete job request received" in log


# --- PbsBatch: one qstat per poll; cancels that keep ended subjobs' records --------------


def recorded(name: str) -> str:
    return (DATA / f"real-array-{name}.json").read_text()


def test_one_qstat_with_subjobs_for_arrays_and_plain_jobs_together() -> None:
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=recorded("several")))
    queued, finished, _ = sorted(j for j in document("several") if qstat_arrays.is_array(j))
    found = PbsBatch(transport).statuses([finished, queued, "1.pbshost"])
    assert [call.argv for call in transport.calls] == [
        ("qstat", "-f", "-F", "json", "-x", "-t", "1.pbshost", queued, finished)
    ]
    assert found[finished].state == JobState.FAILED
    assert found[queued].state == JobState.QUEUED
    assert set(found) == {finished, queued}


def test_plain_jobs_alone_are_asked_without_subjobs() -> None:
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=recorded("several")))
    PbsBatch(transport).statuses(["1.pbshost"])
    assert "-t" not in transport.calls[0].argv


def test_cancel_of_an_array_reads_it_then_deletes_what_has_not_ended() -> None:
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=recorded("begun")))
    transport.on("qdel", reply=Answer())
    array_id, _ = array_in("begun")
    PbsBatch(transport).cancel(array_id)
    assert [list(call.argv) for call in transport.calls] == [
        ["qstat", "-f", "-F", "json", "-x", "-t", array_id],
        *qdels(array_id, 4),
    ]


def test_cancel_of_elements_that_all_ended_sends_no_qdel() -> None:
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=recorded("finished")))
    array_id, _ = array_in("finished")
    PbsBatch(transport).cancel_elements(array_id, ArrayIndices.parse("0-3"))
    assert [call.argv[0] for call in transport.calls] == ["qstat"]


def test_cancel_of_an_array_the_server_does_not_know_keeps_qdels_words() -> None:
    transport = ScriptedTransport()
    transport.on(
        "qstat",
        reply=Answer(
            stdout=(DATA / "real-no-jobs.json").read_text(),
            stderr="qstat: Unknown Job Id 77[].pbshost\n",
            exit_code=153,
        ),
    )
    transport.on("qdel", reply=Answer(stderr="qdel: Unknown Job Id 77[].pbshost\n", exit_code=153))
    with pytest.raises(CancelError) as refused:
        PbsBatch(transport).cancel("77[].pbshost")
    assert "Unknown Job Id 77[].pbshost" in refused.value.stderr
    assert transport.calls[-1].argv == ("qdel", "77[].pbshost")


# --- an array PBS can never run ----------------------------------------------------------


def test_an_array_that_can_never_run_is_deleted_and_every_element_failed() -> None:
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=recorded("never")))
    transport.on("qdel", reply=Answer())
    array_id, _ = array_in("never")
    (status,) = PbsBatch(transport).statuses([array_id]).values()
    assert [list(call.argv) for call in transport.calls][1:] == [
        ["qstat", "-f", "-F", "json", "-x", "-t", array_id],
        *qdels(array_id, "0-1"),
    ]
    assert status.state == JobState.FAILED
    assert status.reason is not None and never_runs.VERDICT in status.reason
    assert never_runs.DELETED in status.reason
    assert elements(status) == [(0, F, "Q", None), (1, F, "Q", None)]
