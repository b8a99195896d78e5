"""What a `#PBS` line can carry, as the real qsub of OpenPBS 23.06.06 reads it (issue 26).

qsub splits a directive line into words itself (`make_argv` in qsub.c: blanks split, quotes
group, '\\' escapes), then checks some values and passes the rest to the server, which reads
a `-l` value as a comma-separated list of resources. What the gateway cannot write so that
qsub reads back exactly the user's value is refused here, naming what qsub would have done:
- blanks, quotes, '\\' and '#': no quoting the gateway relies on (`-N a b` is a "directive
  error", `a\\b` arrives as `ab`);
- any character outside ASCII: qsub refuses it in `-N`, `-o`, `-e` and `-l` ("illegal -N
  value"), and stores it mangled in `-A` (`é` became `^\\x03^\\xe9`), which then breaks
  `qstat -F json` for every job listed with it;
- in the job name, all but letters, digits and '_+.-' (qsub's `check_job_name`, at most 230
  characters): `a,b` is "illegal -N value";
- ',' in a `-l` value: the server reads the rest as another resource, so a custom attribute
  `software=a,walltime=99:00:00` would ask for 99 hours; '&' there: qsub refuses it
  (`illegal -l value ... illegal character`, its `pbs_quote_parse`; found by the hostile-string
  property test on the real qsub);
- '@' in a queue or reservation: qsub sends `queue@server` to another server;
- ':' in an output path: PBS reads `host:path`;
- a value that is exactly `--`: qsub's option parser takes it for the end of its options
  (`#PBS -N --` is a "directive error"; found by the hostile-string property test).
`directory` and `stdin_path` are no directives under PBS (the script enters the one with a
quoted `cd` and reads the other with a quoted `<`), except the directory as the head of a
relative output path (`output_path`).
"""

from __future__ import annotations

import posixpath
import re

from iri_gateway.schedulers.directive_rules import CONTROL_REASON, DirectiveRules
from iri_gateway.shell import has_control_characters, pbs_directive_safe

UNSAFE_REASON = "PBS directives cannot carry blanks, quotes, '\\' or '#'"
ASCII_REASON = (
    "PBS directives carry ASCII only: qsub refuses other characters in -N, -o, -e and -l, and "
    "mangles them in -A"
)
NAME_REASON = (
    "qsub takes job names of letters, digits and '_', '+', '-', '.' only, at most 230 "
    "characters ('illegal -N value' otherwise)"
)
COMMA_REASON = (
    "qsub reads ',' in a -l value as the start of another resource request; give the value "
    "without ','"
)
AMPERSAND_REASON = "qsub refuses '&' in a -l value ('illegal -l value: illegal character')"
SERVER_REASON = (
    "qsub reads 'queue@server' and would send the job to another server; '@' is not allowed"
)
HOST_REASON = "PBS reads 'host:path' here; ':' is not allowed"
DASHES_REASON = (
    "qsub reads a lone '--' as the end of its options ('directive error'); give another value"
)
# Entered by the script with shell quoting, never written into a `#PBS` line.
_NOT_DIRECTIVES = ("directory", "stdin_path")
_JOB_NAME = re.compile(r"[A-Za-z0-9_+.-]{1,230}")


class PbsDirectiveRules(DirectiveRules):
    """Controls end the line; blanks, quotes, '\\', '#' have no quoting; non-ASCII, a name
    qsub would not take, ',' in a resource, '@' in a queue and ':' in a path are misread."""

    def refusal(self, path: str, value: str) -> str | None:
        if has_control_characters(value):
            return CONTROL_REASON
        if path in _NOT_DIRECTIVES:
            return None
        if not pbs_directive_safe(value):
            return UNSAFE_REASON
        if not value.isascii():
            return ASCII_REASON
        if value == "--":
            return DASHES_REASON
        if path == "name" and _JOB_NAME.fullmatch(value) is None:
            return NAME_REASON
        if path.startswith("attributes.custom_attributes."):
            if "," in value:
                return COMMA_REASON
            if "&" in value:
                return AMPERSAND_REASON
        if path in ("attributes.queue_name", "attributes.reservation_id") and "@" in value:
            return SERVER_REASON
        if path.endswith("_path") and ":" in value:
            return HOST_REASON
        return None

    def output_path(self, directory: str | None, path: str) -> str:
        """`path` made absolute against the job's directory. qsub takes a relative `-o`/`-e`
        from the directory qsub runs in (PBS_O_WORKDIR: the gateway's, or the login
        account's home), not from where the script runs, as the real OpenPBS showed (issue
        26); so the directory's text is part of the directive and must pass its rules."""
        if directory is None or path.startswith("/"):
            return path
        return posixpath.join(directory, path)


def gpu_request_refusal(word: str) -> str | None:
    """PBS asks for GPUs one way: `ngpus` in the select chunk."""
    if word != "ngpus":
        return f"gpu_request {word!r} is Slurm syntax; PBS uses 'ngpus'"
    return None
