"""A cluster job's members: the files its script writes, and the engine reading them.

The parsing is checked on text, the reading on real files through `LocalTransport` (the one
`tail` command the engine runs), and the engine on the `local` resource with real bash jobs
whose scripts write the files by hand as a cluster job's script does, in
`<job directory>/.iri-cluster-$IRI_LOCAL_JOB_ID`. A ScriptedTransport without rules around
the real transport records the commands the engine runs.
"""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path

import pytest

from iri_gateway.api.compute.models import job_view
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs import cluster_members
from iri_gateway.service.jobs.cluster_members import Exit, Member
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.scripted import Call, ScriptedTransport
from tests.conftest import refresh_until, stored_plan

MEMBERS = (
    "master1\tmaster\t1\tn1\t127.0.0.1\n"
    "worker1\tworker\t1\tn2\t127.0.0.2\n"
    "worker2\tworker\t2\tn3\t127.0.0.3\n"
    "worker3\tworker\t3\tn4\t127.0.0.4\n"
)
MASTER = Member("master1", "master", 1, "n1", "127.0.0.1")
WORKER2 = Member("worker2", "worker", 2, "n3", "127.0.0.3")
NOT_AN_EXIT = "not `name<TAB>exit code[<TAB>stopped]`"

# ---- parsing --------------------------------------------------------------------------------


def test_members_lines_parse_in_order() -> None:
    members = cluster_members.parse_members(MEMBERS)
    assert [m.name for m in members] == ["master1", "worker1", "worker2", "worker3"]
    assert members[0] == MASTER and members[2] == WORKER2


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("worker9\tworker\t9\tn4", "4 tab-separated fields, not 5"),
        ("worker9 worker 9 n4 127.0.0.4", "1 tab-separated fields, not 5"),
        ("worker9\tworker\tnine\tn4\t127.0.0.4", "index 'nine' is not a number"),
        ("worker9\tworker\t9\t\t127.0.0.4", "an empty field"),
        ("master1\tmaster\t1\tn9\t127.0.0.9", "member 'master1' listed again"),
    ],
)
def test_a_malformed_members_line_is_skipped_with_its_reason(
    line: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="iri_gateway.service.jobs.cluster_members"):
        members = cluster_members.parse_members(MEMBERS + line + "\n" + "\n")
    assert [m.name for m in members] == ["master1", "worker1", "worker2", "worker3"]
    assert members[0] == MASTER, "the first of a repeated name is kept"
    assert f"line 5 skipped ({reason})" in caplog.text


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("worker1", NOT_AN_EXIT),
        ("worker1\t1\textra", NOT_AN_EXIT),
        ("\t1", NOT_AN_EXIT),
        ("worker1\tkilled", "exit code 'killed' is not"),
    ],
)
def test_a_malformed_exit_line_is_skipped_with_its_reason(
    line: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="iri_gateway.service.jobs.cluster_members"):
        exits = cluster_members.parse_exits(f"worker2\t1\n{line}\nmaster1\t0")
    assert exits == [Exit("worker2", 1), Exit("master1", 0)]
    assert f"line 2 skipped ({reason}" in caplog.text


def test_binary_noise_never_crashes_the_parsers() -> None:
    noise = "\x00\x01\t\t\t\t\n\udcff\n==> x <==\n-\t-\t-\t-\t-\n"
    assert cluster_members.parse_members(noise) == []
    assert cluster_members.parse_exits(noise) == []


def test_member_states_and_the_first_failure_in_end_order() -> None:
    members = cluster_members.parse_members(MEMBERS)
    exits = [Exit("worker1", 0), Exit("worker2", 1), Exit("master1", 143)]
    running = cluster_members.outcome(members, exits, JobState.ACTIVE)
    assert [(v["name"], v["state"], v["exit_code"]) for v in running.views] == [
        ("master1", "failed", 143),
        ("worker1", "completed", 0),
        ("worker2", "failed", 1),
        ("worker3", "active", None),
    ]
    assert running.first_failure == (WORKER2, 1), "worker2 ended before master1"
    assert running.views[3] == {
        "name": "worker3",
        "role": "worker",
        "index": 3,
        "node": "n4",
        "address": "127.0.0.4",
        "state": "active",
        "exit_code": None,
    }


@pytest.mark.parametrize(
    ("job_state", "silent_member_state"),
    [
        (JobState.CANCELED, "canceled"),
        (JobState.FAILED, "failed"),
        (JobState.COMPLETED, "completed"),
    ],
)
def test_a_member_without_an_exit_line_takes_the_ending_of_the_job(
    job_state: JobState, silent_member_state: str
) -> None:
    members = cluster_members.parse_members(MEMBERS)
    views = cluster_members.outcome(members, [Exit("master1", 0)], job_state).views
    assert [v["state"] for v in views] == ["completed"] + [silent_member_state] * 3
    assert views[1]["exit_code"] is None


def test_a_stopped_member_ends_as_the_job_and_is_never_its_failure() -> None:
    """`worker1<TAB>143<TAB>stopped`: the script stopped it because the cluster ended."""
    exits = cluster_members.parse_exits("master1\t0\nworker1\t143\tstopped\n")
    assert exits == [Exit("master1", 0), Exit("worker1", 143, stopped=True)]
    members = cluster_members.parse_members(MEMBERS)
    result = cluster_members.outcome(members, exits, JobState.COMPLETED)
    assert result.first_failure is None
    assert result.views[1]["state"] == "completed" and result.views[1]["stopped"] is True
    assert result.views[1]["exit_code"] == 143
    assert "stopped" not in result.views[0]
    running = cluster_members.outcome(members, exits, JobState.ACTIVE)
    assert running.views[1]["state"] == "active"


def test_members_with_ports_show_their_endpoints_at_their_address() -> None:
    members = cluster_members.parse_members(MEMBERS)
    ports = {"master1": {"rpc": 7077, "ui": 8080}, "worker2": {"ui": 8082}}
    views = cluster_members.outcome(members, [], JobState.ACTIVE, ports).views
    assert views[0]["endpoints"] == {"rpc": "127.0.0.1:7077", "ui": "127.0.0.1:8080"}
    assert views[2]["endpoints"] == {"ui": "127.0.0.3:8082"}
    assert "endpoints" not in views[1]


def test_exits_of_unknown_or_repeated_members_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    members = cluster_members.parse_members(MEMBERS)
    exits = [Exit("ghost", 9), Exit("worker1", 0), Exit("worker1", 5)]
    with caplog.at_level(logging.WARNING, logger="iri_gateway.service.jobs.cluster_members"):
        result = cluster_members.outcome(members, exits, JobState.ACTIVE)
    assert result.first_failure is None and result.views[1]["exit_code"] == 0
    assert "unknown member 'ghost'" in caplog.text and "second exit of member 'worker1'" in (
        caplog.text
    )


def test_the_failure_message_keeps_the_schedulers_words() -> None:
    assert cluster_members.failure_message(WORKER2, 1, "FAILED, exit code 1") == (
        "member worker2 (role worker, on n3) exited with 1; FAILED, exit code 1"
    )
    assert cluster_members.failure_message(WORKER2, 1, "") == (
        "member worker2 (role worker, on n3) exited with 1"
    )


# ---- reading the real files -----------------------------------------------------------------


def read(folder: Path) -> cluster_members.ClusterFiles:
    argv = cluster_members.read_argv(str(folder))
    return cluster_members.parse_read(LocalTransport().run(argv), str(folder))


def test_the_folder_is_named_after_the_native_id() -> None:
    assert cluster_members.folder("/work/job", "93") == "/work/job/.iri-cluster-93"
    assert cluster_members.read_argv("/w/.iri-cluster-93") == [
        "tail",
        "-n",
        "+1",
        "--",
        "/w/.iri-cluster-93/members",
        "/w/.iri-cluster-93/exits",
    ]


def test_one_tail_reads_both_files_whatever_exists(tmp_path: Path) -> None:
    folder = tmp_path / "has space" / ".iri-cluster-93"
    assert read(folder) == cluster_members.ClusterFiles(None, None), "no folder: not known yet"
    folder.mkdir(parents=True)
    (folder / "members").write_text(MEMBERS.rstrip("\n"))  # no newline at the end
    files = read(folder)
    assert files.members is not None and len(files.members) == 4 and files.exits is None
    (folder / "exits").write_text("")
    assert read(folder).exits == []
    (folder / "exits").write_text("worker2\t1\n")
    files = read(folder)
    assert files.members is not None and files.members[3].name == "worker3"
    assert files.exits == [Exit("worker2", 1)]
    (folder / "members").unlink()
    assert read(folder) == cluster_members.ClusterFiles(None, [Exit("worker2", 1)])


def test_an_unreadable_folder_is_logged_and_not_known(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    result = CommandResult(
        ("tail",), 1, "", "tail: cannot open '/x/members' for reading: Permission denied\n"
    )
    with caplog.at_level(logging.WARNING, logger="iri_gateway.service.jobs.cluster_members"):
        files = cluster_members.parse_read(result, "/x")
    assert files == cluster_members.ClusterFiles(None, None)
    assert "Permission denied" in caplog.text


# ---- the engine on the local resource ---------------------------------------------------------


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    return Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{tmp_path}/jobs.db"),
        backends=Backends(tmp_path),
    )


def recording(engine: Engine) -> ScriptedTransport:
    """Alice's real local transport behind a ScriptedTransport without rules: every command
    the engine runs is recorded, and run for real."""
    backend = engine.backends.get(engine.registry.get("local"), "alice")
    assert isinstance(backend.transport, LocalTransport)
    wrapper = ScriptedTransport(otherwise=backend.transport)
    object.__setattr__(backend, "transport", wrapper)
    return wrapper


# The beginning of a cluster job's script, by hand: the folder named after the native id.
PROLOGUE = """#!/bin/bash
cd -- @@DIRECTORY@@ || exit 1
folder=".iri-cluster-$IRI_LOCAL_JOB_ID"
mkdir -p "$folder"
member() { printf '%s\\t%s\\t%s\\t%s\\t%s\\n' "$@" >> "$folder/members"; }
ended() { printf '%s\\t%s\\n' "$1" "$2" >> "$folder/exits"; }
# gives up after 60 s, so a failed test leaves no script waiting for ever
until_file() { n=0; while [ ! -e "$1" ] && [ $n -lt 3000 ]; do sleep 0.02; n=$((n + 1)); done; }
"""


MEMBERS_SCRIPT = """
member master1 master 1 n1 127.0.0.1
member worker1 worker 1 n2 127.0.0.2
member worker2 worker 2 n3 127.0.0.3
member worker3 worker 3 n4 127.0.0.4
"""


def start(engine: Engine, directory: Path, body: str, size: int = 4) -> JobRecord:
    """A cluster job on the local scheduler: recorded, submitted, given its native id."""
    directory.mkdir(exist_ok=True)
    script = PROLOGUE.replace("@@DIRECTORY@@", shlex.quote(str(directory))) + body
    record = engine.store.create(
        owner="alice",
        resource_id="local",
        spec={},
        effective_spec={"directory": str(directory)},
        plan=stored_plan(cluster_size=size),
        script=script,
    )
    batch = engine.backends.get(engine.registry.get("local"), "alice").batch
    native_id = batch.submit(script, tag=record.tag)
    return engine.store.set_native_id(record.id, native_id, f"submitted as {native_id}")


def tails(calls: list[Call]) -> list[Call]:
    assert all(call.argv[0] == "tail" for call in calls), calls
    return calls


def test_members_are_stored_once_all_are_listed_and_read_again_at_the_end(
    engine: Engine, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    record = start(
        engine,
        job,
        f"""
member master1 master 1 n1 127.0.0.1
member worker1 worker 1 n2 127.0.0.2
until_file {tmp_path}/more
member worker2 worker 2 n3 127.0.0.3
member worker3 worker 3 n4 127.0.0.4
until_file {tmp_path}/go
ended worker3 0; ended worker1 0; ended worker2 0; ended master1 0
""",
    )
    transport = recording(engine)
    folder = job / f".iri-cluster-{record.native_id}"
    active = refresh_until(engine, "local", record.id, lambda r: r.state == JobState.ACTIVE)
    until = time.monotonic() + 10
    members = folder / "members"  # written by the script, which may not have started yet
    while (
        not members.exists() or len(members.read_text().splitlines()) < 2
    ) and time.monotonic() < until:
        time.sleep(0.02)
    engine.refresh("local")
    half = engine.store.get(record.id)
    assert half is not None and half.members == [], "2 of 4 listed: not stored yet"
    assert active.members == []
    (tmp_path / "more").touch()
    listed = refresh_until(engine, "local", record.id, lambda r: len(r.members) == 4)
    assert listed.state == JobState.ACTIVE
    assert [(m["name"], m["node"], m["state"]) for m in listed.members] == [
        ("master1", "n1", "active"),
        ("worker1", "n2", "active"),
        ("worker2", "n3", "active"),
        ("worker3", "n4", "active"),
    ]
    assert listed.history == active.history, "reading members adds no history entry"
    reads = len(tails(transport.calls))
    for _ in range(3):
        engine.refresh("local")
    assert len(transport.calls) == reads, "members stored: no more reads while active"
    (tmp_path / "go").touch()
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert len(tails(transport.calls)) == reads + 1, "one read when the job ends"
    assert done.state == JobState.COMPLETED and done.message == "EXITED, exit code 0"
    assert [(m["state"], m["exit_code"]) for m in done.members] == [("completed", 0)] * 4
    meta = job_view(done).status.meta_data  # type: ignore[union-attr]
    assert meta is not None and meta["members"] == done.members


def test_a_failed_job_names_the_member_that_failed_first(engine: Engine, tmp_path: Path) -> None:
    record = start(
        engine,
        tmp_path / "job",
        MEMBERS_SCRIPT
        + f"""
until_file {tmp_path}/go
ended worker1 0
ended worker2 1
ended master1 143
exit 1
""",
    )
    transport = recording(engine)
    refresh_until(engine, "local", record.id, lambda r: len(r.members) == 4)
    reads = len(tails(transport.calls))
    (tmp_path / "go").touch()
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.FAILED and done.exit_code == 1
    assert done.message == (
        "member worker2 (role worker, on n3) exited with 1; EXITED, exit code 1"
    )
    assert [(m["name"], m["state"], m["exit_code"]) for m in done.members] == [
        ("master1", "failed", 143),
        ("worker1", "completed", 0),
        ("worker2", "failed", 1),
        ("worker3", "failed", None),
    ]
    assert len(tails(transport.calls)) == reads + 1


def test_members_of_a_canceled_job_without_an_exit_are_canceled(
    engine: Engine, tmp_path: Path
) -> None:
    record = start(engine, tmp_path / "job", MEMBERS_SCRIPT + "ended worker3 0\nsleep 30\n")
    refresh_until(engine, "local", record.id, lambda r: len(r.members) == 4)
    engine.cancel(owner="alice", job_id=record.id)
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.CANCELED
    assert [m["state"] for m in done.members] == ["canceled"] * 3 + ["completed"]


def test_members_read_earlier_end_as_the_job_did_when_the_files_are_gone(
    engine: Engine, tmp_path: Path
) -> None:
    record = start(
        engine,
        tmp_path / "job",
        MEMBERS_SCRIPT
        + f"""
until_file {tmp_path}/go
ended worker1 0
rm -r -- "$folder"
exit 5
""",
    )
    listed = refresh_until(engine, "local", record.id, lambda r: len(r.members) == 4)
    (tmp_path / "go").touch()
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.FAILED and done.message == "EXITED, exit code 5"
    assert [m["state"] for m in done.members] == ["failed"] * 4, "none is left active"
    assert [m["node"] for m in done.members] == [m["node"] for m in listed.members]


def test_malformed_files_are_skipped_and_the_job_is_still_tracked(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record = start(
        engine,
        tmp_path / "job",
        """
printf 'master1\\tmaster\\t1\\tn1\\t127.0.0.1\\nnot a member line\\n' >> "$folder/members"
printf 'master1\\tbroken\\n' >> "$folder/exits"
exit 2
""",
        size=1,
    )
    with caplog.at_level(logging.WARNING, logger="iri_gateway.service.jobs.cluster_members"):
        done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.FAILED and done.message == "EXITED, exit code 2"
    assert [(m["name"], m["state"], m["exit_code"]) for m in done.members] == [
        ("master1", "failed", None)
    ]
    assert "1 tab-separated fields, not 5" in caplog.text
    assert "exit code 'broken' is not a number" in caplog.text


def test_a_cluster_job_that_wrote_nothing_has_no_members(engine: Engine, tmp_path: Path) -> None:
    record = start(engine, tmp_path / "job", "exit 0\n")
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED and done.members == []
    assert "members" not in (job_view(done).status.meta_data or {})  # type: ignore[union-attr]


def test_no_command_is_run_for_jobs_that_are_not_cluster_jobs(
    engine: Engine, tmp_path: Path
) -> None:
    spec = parse_jobspec({"executable": "/bin/sh", "arguments": ["-c", "sleep 0.3; exit 4"]})
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record
    assert not record.plan.get("cluster")
    transport = recording(engine)
    refresh_until(engine, "local", record.id, lambda r: r.state == JobState.ACTIVE)
    done = refresh_until(engine, "local", record.id, lambda r: r.state.final)
    assert done.state == JobState.FAILED and done.members == []
    assert transport.calls == []


def test_the_local_scheduler_tells_the_script_its_native_id(engine: Engine, tmp_path: Path) -> None:
    batch = engine.backends.get(engine.registry.get("local"), "alice").batch
    out = tmp_path / "seen"
    native_id = batch.submit(f'echo "$IRI_LOCAL_JOB_ID" > {out}\n', tag="iri-gateway:abc-1")
    until = time.monotonic() + 10
    while not (out.exists() and out.read_text()) and time.monotonic() < until:
        time.sleep(0.02)
    assert native_id == "abc-1" and out.read_text() == "abc-1\n"
