"""Tell a PBS outage from a refusal: the words PBS's commands print when the server is down.

A failed `qsub` is a refusal of the job (422) unless the command says it could not talk to
the PBS server; then it is a transient outage (SchedulerUnavailableError, 503 and
Retry-After), whatever the command. OpenPBS's commands report a failed `pbs_connect` as

    Connection refused
    qstat: cannot connect to server pbs01 (errno=15010)

(the system's words, then the command's). The real OpenPBS 23.06.06, stopped with
`/etc/init.d/pbs stop` under a running gateway (tests/integration/test_pbs_outage.py), says
so for qsub and qstat, and `Connection refused` then `Couldn't connect to cluster: pbshost`
for qdel (qsub and qdel exit 162).

Two kinds: the request surely never reached the server (no connection could be made), or
it may have (the connection ended or timed out mid-request: "End of File" is what
`pbse_to_txt` says for PBSE_PROTOCOL when the server hung up), in which case a submission
may have created a job.
"""

from __future__ import annotations

from iri_gateway.errors import SchedulerUnavailableError
from iri_gateway.transport.base import CommandResult

NOT_REACHED = (
    "cannot connect to server",
    "Couldn't connect to cluster",
    "Connection refused",
    "No route to host",
    "Network is unreachable",
)
"""pbs_connect failed: the request was never sent."""

MAYBE_REACHED = (
    "Connection timed out",
    "Request timed out",
    "End of File",
)
"""The connection broke or timed out after the request may have been sent."""


def check(result: CommandResult, action: str) -> None:
    """Raise SchedulerUnavailableError when a failed command says the server is unreachable."""
    if result.ok:
        return
    words = f"{result.stderr}\n{result.stdout}".lower()
    # Doubt first: a message with both kinds of words may have reached the server.
    if any(phrase.lower() in words for phrase in MAYBE_REACHED):
        raise SchedulerUnavailableError(
            result.argv, result.exit_code, result.stdout, result.stderr, action=action, reached=True
        )
    if any(phrase.lower() in words for phrase in NOT_REACHED):
        raise SchedulerUnavailableError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            action=action,
            reached=False,
        )
