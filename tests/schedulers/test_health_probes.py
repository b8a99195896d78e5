"""The schedulers' health probes read their commands' real output: `scontrol ping` (Slurm
23.02 on the test cluster) and `qstat -B` (OpenPBS 23.06.06), up and down, and a down answer
keeps the scheduler's own words. Run for real by tests/integration/test_resource_health.py."""

from __future__ import annotations

import pytest

from iri_gateway.errors import PingError
from iri_gateway.schedulers.pbs import qstat_server
from iri_gateway.schedulers.slurm import ping
from iri_gateway.transport.base import CommandResult

QSTAT_B = """\
Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext Status
---------------- ----- ----- ----- ----- ----- ----- ----- ----- -----------
pbshost              0     0     0     0     0     0     0     0 {state}
"""


def result(argv: list[str], code: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(tuple(argv), code, stdout, stderr)


def test_slurm_up_and_down() -> None:
    up = result(ping.argv(), 0, "Slurmctld(primary) at vm is UP\n")
    assert ping.parse(up) == "Slurmctld(primary) at vm is UP"
    down = result(ping.argv(), 1, "Slurmctld(primary) at vm is DOWN\n")
    with pytest.raises(PingError, match="at vm is DOWN"):
        ping.parse(down)
    backup_down = "Slurmctld(primary) at a is UP\nSlurmctld(backup) at b is DOWN\n"
    with pytest.raises(PingError, match="backup"):
        ping.parse(result(ping.argv(), 0, backup_down))
    with pytest.raises(PingError, match="no output"):
        ping.parse(result(ping.argv(), 0))


def test_pbs_up_and_down() -> None:
    for state in qstat_server.UP_STATES:
        answer = result(qstat_server.argv(), 0, QSTAT_B.format(state=state))
        assert qstat_server.parse(answer) == f"pbshost {state}"
    with pytest.raises(PingError, match="Hot_Start"):
        qstat_server.parse(result(qstat_server.argv(), 0, QSTAT_B.format(state="Hot_Start")))
    refused = "Connection refused\nqstat: cannot connect to server pbshost (errno=15010)\n"
    with pytest.raises(PingError, match="cannot connect to server pbshost"):
        qstat_server.parse(result(qstat_server.argv(), 2, stderr=refused))
