"""Where a running job is, as its scheduler says (the port proxy's target): Slurm's `squeue`
and `sinfo` output as the test cluster's Slurm prints it, PBS's `exec_host`, the local
scheduler. Run for real on the test Slurm by tests/integration/test_port_proxy_cluster.py."""

from __future__ import annotations

import pytest

from iri_gateway.errors import SchedulerUnavailableError, StatusError
from iri_gateway.models.job import JobNodes
from iri_gateway.schedulers.pbs import exec_host
from iri_gateway.schedulers.pbs.qstat import PbsJob
from iri_gateway.schedulers.slurm import nodes
from iri_gateway.transport.base import CommandResult


def result(argv: list[str], code: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(tuple(argv), code, stdout, stderr)


def test_a_running_slurm_job_and_its_het_components() -> None:
    one = result(nodes.job_argv("2"), 0, "n1 n[1-2]\n")
    assert nodes.parse_job(one) == ("n1", ["n[1-2]"])
    het = result(nodes.job_argv("3"), 0, "n1 n1\nn2 n2\n")
    assert nodes.parse_job(het) == ("n1", ["n1", "n2"])


def test_a_waiting_or_gone_slurm_job_is_nowhere() -> None:
    pending = result(nodes.job_argv("4"), 0, "n/a \n")
    assert nodes.parse_job(pending) is None
    assert nodes.parse_job(result(nodes.job_argv("4"), 0, "")) is None
    gone = result(nodes.job_argv("9"), 1, stderr="slurm_load_jobs error: Invalid job id specified")
    assert nodes.parse_job(gone) is None


def test_a_slurm_outage_is_an_outage_and_other_failures_keep_slurm_words() -> None:
    down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    with pytest.raises(SchedulerUnavailableError):
        nodes.parse_job(result(nodes.job_argv("2"), 1, stderr=down))
    with pytest.raises(StatusError, match="Access denied"):
        nodes.parse_job(result(nodes.job_argv("2"), 1, stderr="squeue: error: Access denied"))


def test_node_addresses_come_from_sinfo_once_each() -> None:
    listed = "n1 127.0.2.1\nn1 127.0.2.1\nn2 127.0.2.2\nn2 127.0.2.2\n"
    found = nodes.parse_nodes(result(nodes.nodes_argv(["n[1-2]"]), 0, listed), "n1")
    assert found == JobNodes("n1", {"n1": "127.0.2.1", "n2": "127.0.2.2"})
    assert nodes.nodes_argv(["n1", "n[2-3]"])[-2] == "--nodes=n1,n[2-3]"


def test_a_batch_host_sinfo_does_not_list_is_an_error_naming_it() -> None:
    with pytest.raises(StatusError, match="batch host 'n9'"):
        nodes.parse_nodes(result(nodes.nodes_argv(["n9"]), 0, "n1 127.0.2.1\n"), "n9")


def test_slurm_commands_print_no_user_text() -> None:
    """The formats ask for node names and addresses only: a job's name or folder (the
    user's text) can never pass for a node."""
    assert nodes.job_argv("2")[-1] == "--format=%B %N"
    assert nodes.nodes_argv(["n1"])[-1] == "--format=%N %o"


def test_pbs_hosts_from_exec_host() -> None:
    assert exec_host.hosts("pbs-n1/0*2+pbs-n2/0+pbs-n1/1") == ["pbs-n1", "pbs-n2"]
    running = PbsJob("12.pbshost", "R", exec_host="pbs-n2/0*2+pbs-n3/0")
    found = exec_host.nodes({"12.pbshost": running}, "12.pbshost")
    assert found == JobNodes("pbs-n2", {"pbs-n2": "pbs-n2", "pbs-n3": "pbs-n3"})
    # The server may name itself differently from the id the gateway keeps.
    assert exec_host.nodes({"12.pbshost": running}, "12.other") == found


def test_a_pbs_job_that_does_not_run_is_nowhere() -> None:
    queued = PbsJob("13.pbshost", "Q")
    assert exec_host.nodes({"13.pbshost": queued}, "13.pbshost") is None
    assert exec_host.nodes({}, "13.pbshost") is None
    odd = PbsJob("14.pbshost", "R", exec_host="+")
    assert exec_host.nodes({"14.pbshost": odd}, "14.pbshost") is None
