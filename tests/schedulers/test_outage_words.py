"""Scheduler outages are told from refusals by the scheduler's own words (issue 11, item 5).

The Slurm texts are what Slurm 22.05 of the test cluster printed with its controller
unreachable (sbatch, scancel and squeue against a slurm.conf whose SlurmctldPort had nothing
listening); the PBS ones follow OpenPBS (see iri_gateway/schedulers/pbs/outage.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from iri_gateway.errors import (
    CancelError,
    SchedulerUnavailableError,
    StatusError,
    SubmitError,
)
from iri_gateway.schedulers.pbs import qdel, qsub
from iri_gateway.schedulers.slurm import sbatch, scancel, squeue
from iri_gateway.transport.base import CommandResult

CONNECT = "Unable to contact slurm controller (connect failure)"


def result(argv: list[str], code: int, stderr: str, stdout: str = "") -> CommandResult:
    return CommandResult(tuple(argv), code, stdout, stderr)


@pytest.mark.parametrize(
    ("parse", "outcome", "reached"),
    [
        (
            sbatch.parse,
            result(["sbatch"], 1, f"sbatch: error: Batch job submission failed: {CONNECT}\n"),
            False,
        ),
        (
            sbatch.parse,
            result(
                ["sbatch"],
                1,
                "sbatch: error: Slurm temporarily unable to "
                "accept job, sleeping and retrying\nsbatch: error: Batch job "
                "submission failed: Resource temporarily unavailable\n",
            ),
            False,
        ),
        (
            sbatch.parse,
            result(
                ["sbatch"],
                1,
                "sbatch: error: Batch job submission failed: "
                "Socket timed out on send/recv operation\n",
            ),
            True,
        ),
        (
            sbatch.parse,
            result(
                ["sbatch"],
                1,
                "sbatch: error: Batch job submission failed: "
                "Zero Bytes were transmitted or received\n",
            ),
            True,
        ),
        (
            scancel.parse,
            result(
                ["scancel", "42"], 8, f"scancel: error: Kill job error on job id 42: {CONNECT}\n"
            ),
            False,
        ),
        (squeue.parse, result(["squeue"], 1, f"slurm_load_jobs error: {CONNECT}\n"), False),
        (
            qsub.parse,
            result(
                ["qsub"],
                162,
                "Connection refused\nqsub: cannot connect to server pbshost (errno=15010)\n",
            ),
            False,
        ),
        (qsub.parse, result(["qsub"], 1, "qsub: End of File\n"), True),
        (
            qdel.parse,
            result(
                ["qdel", "1.pbshost"],
                162,
                # The real OpenPBS 23.06.06's words, stopped under a gateway (test_pbs_outage).
                "Connection refused\nCouldn't connect to cluster: pbshost\n",
            ),
            False,
        ),
    ],
)
def test_an_unreachable_scheduler_is_an_outage_in_its_own_words(
    parse: Callable[[CommandResult], object], outcome: CommandResult, reached: bool
) -> None:
    with pytest.raises(SchedulerUnavailableError) as caught:
        parse(outcome)
    assert caught.value.reached is reached
    assert caught.value.stderr == outcome.stderr
    assert outcome.stderr.strip().splitlines()[-1] in str(caught.value)


@pytest.mark.parametrize(
    ("parse", "outcome", "kind"),
    [
        (
            sbatch.parse,
            result(
                ["sbatch"],
                1,
                "sbatch: error: Batch job submission failed: "
                "Requested node configuration is not available\n",
            ),
            SubmitError,
        ),
        (
            scancel.parse,
            result(
                ["scancel", "9"],
                1,
                "scancel: error: Kill job error on job id 9: Invalid job id specified\n",
            ),
            CancelError,
        ),
        (squeue.parse, result(["squeue"], 1, "squeue: error: Invalid user: nobody\n"), StatusError),
        (qsub.parse, result(["qsub"], 170, "qsub: Unknown queue\n"), SubmitError),
    ],
)
def test_a_refusal_stays_a_refusal(
    parse: Callable[[CommandResult], object], outcome: CommandResult, kind: type[Exception]
) -> None:
    with pytest.raises(kind) as caught:
        parse(outcome)
    assert not isinstance(caught.value, SchedulerUnavailableError)
