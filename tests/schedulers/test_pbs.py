"""PBS Pro / OpenPBS execution adapter: qsub, qstat, qdel, qalter/qmove.

Two layers. The parse functions are checked against `qstat -f -F json` documents in
`tests/data/pbs/`: captured from the real OpenPBS 23.06.06 (`real-*.json`) and reconstructed
ones for the other typing of newer OpenPBS (see the README there). `PbsBatch` end to end runs
against the real OpenPBS in tests/integration/test_pbs_batch.py; the STAND-IN section here keeps
only what the real server here cannot show, each test saying why.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import (
    CancelError,
    SchedulerUnavailableError,
    StatusError,
    SubmitError,
)
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.batch import BatchSystem, JobChanges
from iri_gateway.schedulers.pbs import qalter, qdel, qstat, qsub
from iri_gateway.schedulers.pbs.batch import PbsBatch
from iri_gateway.schedulers.pbs.states import explain_exit, map_state, was_deleted
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.local import LocalTransport
from tests.support.paths import STANDINS, TESTS

DATA = TESTS / "data" / "pbs"
STANDIN = STANDINS / "pbs"
STANDIN_PROGRAMS = ("qsub", "qstat", "qdel", "qalter", "qmove", "qrerun", "pbs-standin-advance")
SERVER = "pbs01.example.org"
TAG = "iri-gateway:6b1f0c2e-3d4a-4f5b-8c6d-7e8f9a0b1c2d"


def document(name: str) -> dict[str, qstat.PbsJob]:
    return qstat.parse_document((DATA / name).read_text())


def only(name: str) -> qstat.PbsJob:
    jobs = document(name)
    assert len(jobs) == 1
    return next(iter(jobs.values()))


def result(argv: list[str], code: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(tuple(argv), code, stdout, stderr)


# --- recorded documents ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "state", "exit_code", "words"),
    [
        ("queued.json", JobState.QUEUED, None, "Not Running: Insufficient amount of resource"),
        ("running.json", JobState.ACTIVE, None, "Job run at Tue Mar 05 at 14:02"),
        ("held.json", JobState.HELD, None, None),
        ("finished-ok.json", JobState.COMPLETED, 0, "and finished"),
        ("failed-exit3.json", JobState.FAILED, 3, "and failed"),
        ("killed-signal.json", JobState.FAILED, 271, "killed by signal 15 (SIGTERM)"),
        (
            "walltime-killed.json",
            JobState.FAILED,
            -29,
            "JOB_EXEC_KILL_WALLTIME (-29): killed for exceeding walltime",
        ),
        ("deleted-queued.json", JobState.CANCELED, None, "Not Running"),
        ("deleted-running.json", JobState.CANCELED, 271, "and terminated"),
        ("unknown-state.json", None, None, None),
    ],
)
def test_recorded_document_maps_to_state(
    name: str, state: JobState | None, exit_code: int | None, words: str | None
) -> None:
    job = only(name)
    status = job.status()
    assert status.native_id == job.job_id
    assert status.state is state
    assert status.native_state == job.state
    assert status.exit_code == exit_code
    if words is None:
        assert status.reason is None
    else:
        assert status.reason is not None and words in status.reason
    if exit_code is not None:
        assert status.message.endswith(f"exit code {exit_code}")


def test_unknown_state_keeps_the_letter_and_never_stalls() -> None:
    status = only("unknown-state.json").status()
    assert status.state is None
    assert status.native_state == "Y"
    assert status.message == "Y"


def test_deletion_evidence_is_the_substate_or_the_comment() -> None:
    assert only("deleted-running.json").substate == 91
    assert only("deleted-queued.json").exit_status is None
    assert only("killed-signal.json").deleted is False
    assert was_deleted(None, "Job run at Tue Mar 05 at 14:02 on (n1:ncpus=1) and terminated")
    assert was_deleted(None, "Job deleted as result of dependency on job 12.pbs01")
    assert not was_deleted(93, "Job run at Tue Mar 05 at 14:02 on (n1:ncpus=1) and failed")


def test_several_jobs_in_one_document() -> None:
    jobs = document("several-jobs.json")
    got = {job_id: (job.status().state, job.status().exit_code) for job_id, job in jobs.items()}
    assert got == {
        f"4120.{SERVER}": (JobState.QUEUED, None),
        f"4121.{SERVER}": (JobState.ACTIVE, None),
        f"4122.{SERVER}": (JobState.COMPLETED, 0),
        f"4123.{SERVER}": (JobState.FAILED, 3),
        f"4124.{SERVER}": (JobState.ACTIVE, None),
    }
    assert qstat.find_tag(jobs, "iri-gateway:c3-4e7c-4b1a-9d2f-6a0e3c8b5f17") == f"4122.{SERVER}"
    assert qstat.find_tag(jobs, "iri-gateway:nothing") is None


def test_header_without_jobs_is_an_empty_answer() -> None:
    assert document("no-jobs.json") == {}


def test_attributes_and_times_are_read() -> None:
    job = only("running.json")
    assert job.queue == "prod"
    assert job.name == "check-mpi"
    assert job.variables["IRI_GATEWAY_TAG"] == "iri-gateway:0c2b8f4e-1a6d-4e0b-b2a7-5d9e3c1f7a22"
    assert job.submitted is not None and job.submitted.isoformat() == "2024-03-05T13:58:41"
    assert job.started is not None and job.started.isoformat() == "2024-03-05T14:02:07"
    assert job.ended is None


def test_every_state_letter() -> None:
    expected = {
        "Q": JobState.QUEUED,
        "W": JobState.QUEUED,
        "T": JobState.QUEUED,
        "M": JobState.QUEUED,
        "H": JobState.HELD,
        "S": JobState.HELD,
        "U": JobState.HELD,
        "R": JobState.ACTIVE,
        "E": JobState.ACTIVE,
        "B": JobState.ACTIVE,
    }
    for letter, state in expected.items():
        assert map_state(letter) is state, letter
    for letter in ("F", "X"):
        assert map_state(letter, 0) is JobState.COMPLETED
        assert map_state(letter, 3) is JobState.FAILED
        assert map_state(letter, 271) is JobState.FAILED
        assert map_state(letter, -29) is JobState.FAILED
        assert map_state(letter, None) is JobState.FAILED
        assert map_state(letter, 271, deleted=True) is JobState.CANCELED
        assert map_state(letter, None, deleted=True) is JobState.CANCELED
    assert map_state("Y") is None
    assert map_state("") is None


def test_exit_status_words() -> None:
    assert explain_exit(0) is None
    assert explain_exit(3) is None
    assert explain_exit(255) is None
    assert explain_exit(271) == "killed by signal 15 (SIGTERM)"
    assert explain_exit(265) == "killed by signal 9 (SIGKILL)"
    assert explain_exit(-11) == "JOB_EXEC_RERUN (-11): job rerun"
    assert explain_exit(-29) == "JOB_EXEC_KILL_WALLTIME (-29): killed for exceeding walltime"
    assert explain_exit(-99) == "JOB_EXEC (-99): PBS could not run or finish the job"


# --- captured from the real OpenPBS 23.06.06 (tests/data/pbs/capture-real.sh) ------------


@pytest.mark.parametrize(
    ("name", "state", "exit_code", "words"),
    [
        ("real-queued-never.json", JobState.QUEUED, None, "Can Never Run: Insufficient amount"),
        ("real-held.json", JobState.HELD, None, None),
        ("real-running.json", JobState.ACTIVE, None, "Job run at "),
        ("real-finished-ok.json", JobState.COMPLETED, 0, "and finished"),
        ("real-failed-exit3.json", JobState.FAILED, 3, "and failed"),
        ("real-killed-signal.json", JobState.FAILED, 137, "and failed"),
        ("real-walltime-killed.json", JobState.FAILED, -29, "and exceeded resource walltime"),
        ("real-deleted-running.json", JobState.CANCELED, 271, "and terminated by alice@pbshost"),
        ("real-deleted-queued.json", JobState.CANCELED, None, None),
    ],
)
def test_captured_document_maps_to_state(
    name: str, state: JobState, exit_code: int | None, words: str | None
) -> None:
    """The real server's typing (integers as JSON numbers, times as ctime text). Unlike the
    reconstructed documents: SIGKILL of the script shows as 137 (128 + 9, a plain exit code);
    a job deleted while queued carries neither comment nor Exit_status."""
    job = only(name)
    status = job.status()
    assert (status.state, status.exit_code) == (state, exit_code)
    assert job.variables["IRI_GATEWAY_TAG"].startswith("iri-gateway:capture-")
    assert job.submitted is not None and job.queue == "workq"
    if words is None:
        assert status.reason is None
    else:
        assert status.reason is not None and words in status.reason


def test_captured_several_jobs_and_header_only() -> None:
    jobs = document("real-several-jobs.json")
    assert [job.name for job in jobs.values()] == ["ok", "fail", "running", "held"]
    assert qstat.find_tag(jobs, "iri-gateway:capture-held") is not None
    assert document("real-no-jobs.json") == {}


def test_lone_backslash_and_control_characters_in_a_value_are_read() -> None:
    """The real qstat prints `back\\slash` in a value without escaping the '\\' (invalid
    JSON), and raw control characters in others; one such job must not make every status
    query of the account fail."""
    text = (DATA / "real-control-characters.json").read_text()
    assert '"Account_Name":"back\\slash^C"' in text
    (job,) = qstat.parse_document(text).values()
    assert job.state == "H"
    raw = text.replace("^C", "\x03")
    (job,) = qstat.parse_document(raw).values()
    assert job.status().state is JobState.HELD


def test_bytes_above_0x7f_in_a_value_are_read_by_qstats_layout() -> None:
    """The real qstat shows the account `café€` as `caf^<0x03>^<0xe9>^"^<0xc2>^<0xec>`: the
    first byte of `€` becomes an unescaped '"', so the document is no JSON at all; read by
    qstat's one-attribute-per-line layout, the job and its other attributes survive."""
    text = (DATA / "real-non-ascii.json").read_bytes().decode("utf-8", "replace")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text, strict=False)
    (job,) = qstat.parse_document(text).values()
    assert (job.state, job.queue, job.name) == ("H", "workq", "accented")
    assert job.variables["IRI_GATEWAY_TAG"] == "iri-gateway:capture-accented"
    assert job.status().state is JobState.HELD


@pytest.mark.parametrize(
    "text",
    [
        '{\n    "Jobs":{\n        "1.s":{\n            "job_state":"R"\n        }\n',
        '{\n    "Jobs":{\n        "1.s":{\n            "job_state":R^"\n        }\n    }\n}',
        '{\n    "Jobs":{\n        "1.s":{\n            job_state\n        }\n    }\n}',
        '{\n    }\n    "x":1\n}',
    ],
)
def test_a_layout_that_is_not_qstats_stays_malformed(text: str) -> None:
    with pytest.raises(qstat.MalformedDocument):
        qstat.parse_document(text)


# --- qstat results: partial answers and malformed documents ------------------------------


def test_unknown_ids_are_left_out_and_the_rest_is_used() -> None:
    text = (DATA / "running.json").read_text()
    asked = [f"4108.{SERVER}", f"9999.{SERVER}"]
    jobs = qstat.parse(
        result(qstat.argv(asked), 153, text, f"qstat: Unknown Job Id 9999.{SERVER}\n")
    )
    assert set(qstat.statuses(jobs, asked)) == {f"4108.{SERVER}"}


def test_all_ids_unknown_is_an_empty_answer() -> None:
    text = (DATA / "no-jobs.json").read_text()
    jobs = qstat.parse(result(qstat.argv(["1.x"]), 153, text, "qstat: Unknown Job Id 1.x\n"))
    assert jobs == {}


def test_short_and_long_ids_name_the_same_job() -> None:
    jobs = document("several-jobs.json")
    found = qstat.statuses(jobs, ["4121", "4122.pbs01", "4123.other-server", "77"])
    assert set(found) == {"4121", "4122.pbs01"}
    assert found["4121"].native_id == "4121"
    assert found["4121"].state is JobState.ACTIVE


def test_unreachable_server_is_an_outage_not_no_jobs() -> None:
    """A connection failure still prints the bare header: it must not read as "no jobs".
    Since issue 11 it is a SchedulerUnavailableError (a transient outage, 503), no longer a
    StatusError; qstat's words are kept all the same."""
    stderr = "Connection refused\nqstat: cannot connect to server pbs01 (errno=15010)\n"
    header = '{"timestamp":1,"pbs_version":"23.06.06","pbs_server":"pbs01"}\n'
    with pytest.raises(SchedulerUnavailableError) as caught:
        qstat.parse(result(qstat.argv(["1.pbs01"]), 255, header, stderr))
    assert caught.value.exit_code == 255
    assert caught.value.stderr == stderr
    assert not caught.value.reached


@pytest.mark.parametrize(
    ("code", "stdout", "stderr"),
    [
        (153, "", "qstat: Unknown Job Id 1.pbs01\n"),
        (1, "", ""),
        (2, "", "qstat: illegally formed job identifier: x\n"),
    ],
)
def test_failed_qstat_is_a_status_error_with_its_words(code: int, stdout: str, stderr: str) -> None:
    with pytest.raises(StatusError) as caught:
        qstat.parse(result(qstat.argv(["1.pbs01"]), code, stdout, stderr))
    assert caught.value.exit_code == code
    assert caught.value.stderr == stderr


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "qstat: not json",
        "[]",
        '{"Jobs": []}',
        '{"Jobs": {"1.s": "R"}}',
        '{"Jobs": {"1.s": {}}}',
        '{"Jobs": {"1.s": {"job_state": 3}}}',
        '{"Jobs": {"1.s": {"job_state": "F", "Exit_status": "three"}}}',
        '{"Jobs": {"1.s": {"job_state": "F", "Exit_status": true}}}',
        '{"Jobs": {"1.s": {"job_state": "F", "substate": [91]}}}',
        '{"Jobs": {"1.s": {"job_state": "R"}',
    ],
)
def test_malformed_document_is_a_status_error(stdout: str) -> None:
    with pytest.raises(StatusError) as caught:
        qstat.parse(result(qstat.argv(["1.s"]), 0, stdout))
    assert "unusable qstat JSON" in str(caught.value)


def test_loose_value_forms_are_accepted() -> None:
    jobs = qstat.parse_document(
        json.dumps(
            {
                "Jobs": {
                    "7.s": {
                        "job_state": "F",
                        "Exit_status": "0",
                        "substate": 92,
                        "comment": 12,
                        "Variable_List": {"IRI_GATEWAY_TAG": "iri-gateway:x", "PBS_NUM_NODES": 2},
                        "ctime": "not a time",
                        "stime": 1709647313,
                    }
                }
            }
        )
    )
    job = jobs["7.s"]
    assert job.status().state is JobState.COMPLETED
    assert job.comment == "12"
    assert job.variables["PBS_NUM_NODES"] == "2"
    assert job.submitted is None
    assert job.started is not None and job.started.year == 2024


# --- command lines ---------------------------------------------------------------------


def test_qsub_argv_carries_the_tag_in_v() -> None:
    assert qsub.argv(TAG) == ["qsub", "-v", f"IRI_GATEWAY_TAG={TAG}"]


@pytest.mark.parametrize("tag", ["", "a,b", "a=b", "a'b", 'a"b', "a\\b", "a b", "a\nb", "a\tb"])
def test_qsub_refuses_a_tag_v_cannot_carry(tag: str) -> None:
    with pytest.raises(ValueError):
        qsub.argv(tag)


def test_qsub_without_a_job_id_is_a_submit_error() -> None:
    with pytest.raises(SubmitError) as caught:
        qsub.parse(result(["qsub"], 0, "something else\n"))
    assert "printed no job id" in str(caught.value)
    assert qsub.parse(result(["qsub"], 0, "123.pbs01.example.org\n")) == "123.pbs01.example.org"
    assert qsub.parse(result(["qsub"], 0, "124[].pbs01\n")) == "124[].pbs01"


def test_qalter_and_qmove_command_lines() -> None:
    changes = JobChanges(duration=90061, queue_name="debug", name="n2", account="P9")
    assert qalter.commands("5.s", changes) == [
        ["qalter", "-l", "walltime=25:01:01", "-N", "n2", "-A", "P9", "5.s"],
        ["qmove", "debug", "5.s"],
    ]
    assert qalter.commands("5.s", JobChanges(queue_name="debug")) == [["qmove", "debug", "5.s"]]
    assert qalter.commands("5.s", JobChanges(duration=60)) == [
        ["qalter", "-l", "walltime=0:01:00", "5.s"]
    ]
    assert qalter.commands("5.s", JobChanges()) == []


def test_qdel_of_a_finished_job_is_not_an_error() -> None:
    qdel.parse(result(["qdel", "5.s"], 35, "", "qdel: Job has finished 5.s\n"))
    with pytest.raises(CancelError):
        qdel.parse(result(["qdel", "5.s"], 153, "", "qdel: Unknown Job Id 5.s\n"))
    with pytest.raises(CancelError):
        qdel.parse(result(["qdel", "5.s"], 168, "", "qdel: Request invalid for state of job 5.s\n"))


# --- end to end through the stand-ins ---------------------------------------------------


class StandinPbs:
    """PbsBatch over LocalTransport with the stand-ins first on PATH, and their state folder."""

    def __init__(self, folder: Path) -> None:
        for program in STANDIN_PROGRAMS:
            path = STANDIN / program
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.folder = folder
        self.env = {
            **os.environ,
            "PATH": f"{STANDIN}:{os.environ['PATH']}",
            "PBS_STANDIN_DIR": str(folder),
        }
        self.batch = PbsBatch(LocalTransport(env=self.env))

    def advance(self, job_id: str, state: str, *more: str) -> None:
        subprocess.run(["pbs-standin-advance", job_id, state, *more], env=self.env, check=True)

    def calls(self, program: str | None = None) -> list[dict[str, Any]]:
        path = self.folder / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        entries = [json.loads(line) for line in lines]
        return [entry for entry in entries if program is None or entry["program"] == program]

    def job(self, job_id: str) -> dict[str, Any]:
        """The job as the stand-in qstat shows it (read without going through the adapter)."""
        done = subprocess.run(
            ["qstat", "-f", "-F", "json", "-x", job_id],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        attributes: dict[str, Any] = json.loads(done.stdout)["Jobs"][job_id]
        return attributes


@pytest.fixture
def pbs(tmp_path: Path) -> StandinPbs:
    return StandinPbs(tmp_path / "pbs")


@pytest.fixture(scope="module")
def polaris_script() -> str:
    spec = parse_jobspec(
        {
            "name": "pbs-e2e",
            "executable": "/bin/true",
            "container": {"image": "/eagle/app.sif"},
            "resources": {"node_count": 2, "processes_per_node": 2},
            "attributes": {"account": "Proj123", "duration": 1800},
        }
    )
    return make_plan(spec, ProfileRegistry.builtin().get("polaris")).script


def test_submit_a_rendered_polaris_script(pbs: StandinPbs, polaris_script: str) -> None:
    """Stand-in needed: the shipped Polaris profile's queue `prod` and its 32-core nodes exist
    on no server here (the real OpenPBS runs tests/integration/test_pbs_batch.py)."""
    batch: BatchSystem = pbs.batch
    job_id = batch.submit(polaris_script, tag=TAG)
    assert job_id == "1.standin-server"
    (call,) = pbs.calls("qsub")
    assert call["argv"] == ["qsub", "-v", f"IRI_GATEWAY_TAG={TAG}"]
    assert call["script"] == polaris_script
    job = pbs.job(job_id)  # what qsub read from the #PBS lines of the script
    assert job["Job_Name"] == "pbs-e2e"
    assert job["queue"] == "prod"
    assert job["Account_Name"] == "Proj123"
    assert job["Resource_List"]["select"] == "2:ncpus=32:mpiprocs=2"
    assert job["Resource_List"]["walltime"] == "00:30:00"
    assert job["Resource_List"]["filesystems"] == "home:eagle"
    assert job["Variable_List"]["IRI_GATEWAY_TAG"] == TAG
    assert pbs.batch.statuses([job_id])[job_id].state is JobState.QUEUED


def test_standin_qsub_command_line_wins_over_directives(pbs: StandinPbs) -> None:
    """Stand-in needed: a check of the stand-in itself, which other stand-in tests rely on."""
    script = "#!/bin/bash\n#PBS -N from-script\n#PBS -l walltime=10:00\n#PBS -l ncpus=2\necho\n"
    done = subprocess.run(
        ["qsub", "-N", "from-line", "-l", "walltime=20:00", "-q", "debug"],
        input=script,
        env=pbs.env,
        capture_output=True,
        text=True,
        check=True,
    )
    job = pbs.job(done.stdout.strip())
    assert (job["Job_Name"], job["queue"]) == ("from-line", "debug")
    assert job["Resource_List"]["walltime"] == "00:20:00"
    assert job["Resource_List"]["ncpus"] == 2


def test_standin_refuses_to_run_without_its_folder(pbs: StandinPbs) -> None:
    """Stand-in needed: the stand-in's own guard (it never acts as a server by accident)."""
    env = {key: value for key, value in pbs.env.items() if key != "PBS_STANDIN_DIR"}
    done = subprocess.run(
        ["qstat", "-f", "-F", "json"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 97
    assert "STAND-IN qstat" in done.stderr and "PBS_STANDIN_DIR" in done.stderr
