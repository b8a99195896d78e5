"""`qsub`: the script on standard input, the gateway's tag as a job environment variable.

qsub(1B): "If you do not specify a script or executable, qsub reads the script from standard
input" (OpenPBS `read_job_script("")`), and it reads the `#PBS` directives of a script that
arrives that way just as from a file, so nothing is written to disk. The tag travels as
`-v IRI_GATEWAY_TAG=<tag>`; it lands in the job's `Variable_List`, where `qstat -f` shows it and
`find` looks for it. On success qsub prints the full job id (`123.server`) and nothing else on
standard output; on failure it prints `qsub: <server message>` on standard error and exits with
the PBS error number modulo 256.
"""

from __future__ import annotations

import re

from iri_gateway.errors import SubmitError
from iri_gateway.schedulers.pbs import outage
from iri_gateway.transport.base import CommandResult

TAG_VARIABLE = "IRI_GATEWAY_TAG"

# `-v` is a comma-separated list of NAME=value; qsub gives ',' quotes and '\' meaning there
# (comma_token/copy_env_value in qsub.c), and '=' would be ambiguous to a reader.
_TAG_UNSAFE = re.compile(r"[,=\"'\\\s\x00-\x1f\x7f]")
# sequence number, optional array brackets, optional server name (`123.pbs01`, `124[].pbs01`)
_JOB_ID = re.compile(r"^\d+(?:\[\d*\])?(?:\.[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def argv(tag: str) -> list[str]:
    """qsub with no script operand: it reads the script from standard input."""
    if not tag or _TAG_UNSAFE.search(tag):
        raise ValueError(
            f"tag {tag!r} cannot travel in qsub -v: it must be non-empty, without ',', '=', "
            "quotes, '\\', blanks or control characters"
        )
    return ["qsub", "-v", f"{TAG_VARIABLE}={tag}"]


def parse(result: CommandResult) -> str:
    """The job id qsub printed; SubmitError with qsub's own words otherwise
    (SchedulerUnavailableError when the server could not be reached: not the job's fault)."""
    outage.check(result, "submission")
    if not result.ok:
        raise SubmitError(result.argv, result.exit_code, result.stdout, result.stderr)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if not lines or not _JOB_ID.match(lines[-1]):
        raise SubmitError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            hint="qsub printed no job id",
        )
    return lines[-1]
