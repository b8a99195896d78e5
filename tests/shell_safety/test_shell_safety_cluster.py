"""Shell safety of cluster jobs: every user string of every role reaches each member exactly
(the harness is cluster_harness.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.shell_safety.cluster_harness import (
    SLURM_JOB_ID,
    HostileClusterJob,
    HostileRole,
    check_cluster_job,
    hostile_cluster_jobs,
    prepare_cluster,
    run_cluster,
)
from tests.shell_safety.harness import OCI_IMAGES, Combo, HostileJob, plan, scratch


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=hostile_cluster_jobs())
def test_every_user_string_of_a_cluster_job_reaches_each_member_exactly(
    cluster: HostileClusterJob,
) -> None:
    check_cluster_job(cluster)


def test_role_strings_with_quotes_and_substitutions_reach_each_member() -> None:
    """The nastiest role fields spelled out; the workers share nodes two by two, the last
    node holding one (so PBS lists that node twice in $PBS_NODEFILE for one member)."""
    job = HostileJob(
        executable_name="job's prog $(touch CANARY)",
        arguments=["it's $(whoami)", "`touch CANARY`", ""],
        environment={"SHARED": "from the job; touch CANARY", "OVERRIDDEN": "job"},
        directory_name="run dir #1",
        mounts=[("data set's $(touch CANARY)", "in put", True)],
        workdir="/job work dir",
        stdin_name="in put's",
        extra_options=True,
    )
    worker = HostileRole(
        name="worker",
        count=3,
        per_node=2,
        executable_name='worker\'s "v2" `touch CANARY`',
        arguments=["--conf", "a=b; touch CANARY", "$HOME", "\n", "*"],
        environment={"OVERRIDDEN": "it's the worker's\nsecond line", "EMPTY": ""},
        sif_name="worker image's $(touch CANARY)",
        oci=OCI_IMAGES[2],
        mounts=[("role's data", "in put", False)],
        workdir="/worker's dir $(touch CANARY)",
        extra_options=True,
        tmpfs="role's-tmp$(touch${IFS}CANARY)\\n",
    )
    master = HostileRole(name="master", arguments=[], environment={"ROLE_ONLY": "'\"\\"})
    check_cluster_job(HostileClusterJob(job, [worker, master]))


def test_a_failing_member_stops_the_others() -> None:
    """Under first_failure_ends_all, when one member fails the script TERMs the members
    still running (their srun, which passes the signal to its step), records them as
    stopped, and exits with the failed member's code once every member has ended."""
    combo = Combo("frontier", "none")
    cluster = HostileClusterJob(
        HostileJob(),
        [
            HostileRole(name="master"),
            HostileRole(name="worker"),
        ],
    )
    with scratch() as base:
        run = prepare_cluster(cluster, combo, base)
        master, worker = run.doc["roles"]
        worker["executable"] = "/bin/sh"  # fails at once, while the master still runs
        worker["arguments"] = ["-c", "exit 3"]
        master["executable"] = "/bin/sleep"
        master["arguments"] = ["30"]
        run.doc["cluster_lifecycle"] = "first_failure_ends_all"
        replanned, fields = plan(run.doc, combo)
        assert replanned is not None, fields
        run.script_path.write_text(replanned.script)
        run_cluster(run)
        assert run.process is not None
        assert run.process.returncode == 3, run.process.stderr
        assert "member worker1 exited with 3; stopping the others" in run.process.stderr
        exits = Path(run.doc["directory"]) / f".iri-cluster-{SLURM_JOB_ID}" / "exits"
        lines = exits.read_text().split("\n")[:-1]
        assert lines[0] == "worker1\t3"
        assert lines[1].startswith("master1\t") and lines[1].endswith("\tstopped"), lines
