"""`qstat -f -F json -x`: every job the gateway asks about, live or finished, in one call.

`-x` adds finished (F) and moved (M) jobs from the server's job history, so no second query of
any history is needed; `-t` adds the subjobs of arrays (`qstat_arrays`). The document (OpenPBS
qstat.c, `-F json`) is

    {"timestamp": <epoch>, "pbs_version": "...", "pbs_server": "...",
     "Jobs": {"<id>": {"Job_Name": ..., "job_state": "R", "substate": 42, "queue": ...,
                       "Variable_List": {...}, "comment": ..., "Exit_status": 0, ...}}}

with times as ctime(3) strings ("Tue Oct  4 21:23:20 2022", server local time) and every value
that looks like a number printed as a JSON number (so `Variable_List` values and even job names
may be numbers). `Jobs` is absent when no job was found. Values with a '\\', control
characters or bytes above 0x7f make the real output invalid JSON; `qstat_json` reads it anyway.

qstat asks the server about each listed id in turn: for an id the server does not know it
prints `qstat: Unknown Job Id <id>` on standard error and goes on, prints the JSON for the
others at the end, and exits with the last PBS error number modulo 256 (15001 -> 153). So a
non-zero exit is fine when every complaint is an unknown job id and the JSON is there; any other
complaint is an error: leaving the jobs out would claim that the server no longer knows them.
A server that cannot be reached (`qstat: cannot connect to server ...`, which still prints the
bare header) is a SchedulerUnavailableError (a transient outage, see `outage`), any other
complaint a StatusError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from iri_gateway.errors import StatusError
from iri_gateway.models.job import NativeStatus
from iri_gateway.schedulers.pbs import outage, qstat_json
from iri_gateway.schedulers.pbs.qsub import TAG_VARIABLE
from iri_gateway.schedulers.pbs.states import ENDED, explain_exit, map_state, was_deleted
from iri_gateway.transport.base import CommandResult

_UNKNOWN_JOB = re.compile(r"^qstat: Unknown Job Id (\S+)$")
_SUBJOB_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
NO_SUBJOBS = "-"
"""How the server writes `array_indices_remaining` once no subjob is queued."""
_CTIME = "%a %b %d %H:%M:%S %Y"


class MalformedDocument(ValueError):
    """The text is not a qstat JSON document of the expected shape."""


@dataclass(frozen=True)
class PbsJob:
    """One job of a qstat document: the attributes the gateway reads, parsed."""

    job_id: str
    state: str
    substate: int | None = None
    exit_status: int | None = None
    comment: str | None = None
    queue: str | None = None
    name: str | None = None
    variables: Mapping[str, str] = field(default_factory=dict)
    submitted: datetime | None = None  # ctime
    started: datetime | None = None  # stime
    modified: datetime | None = None  # mtime
    ended: datetime | None = None  # obittime, where the server reports it
    exec_host: str | None = None  # `host/0*2+host2/0`: the running job's hosts, first runs it
    # Arrays (`qstat_arrays`): a subjob's own index; the array's queued subjobs (runs
    # `(first, last, step)` of `array_indices_remaining`) and its throttle.
    array_index: int | None = None
    array_indices_remaining: tuple[tuple[int, int, int], ...] = ()
    max_run_subjobs: int | None = None

    @property
    def deleted(self) -> bool:
        return was_deleted(self.substate, self.comment)

    def status(self, native_id: str | None = None) -> NativeStatus:
        """This job as a NativeStatus, under `native_id` (the id the gateway asked for)."""
        ended = self.state in ENDED
        exit_code = self.exit_status if ended else None
        state = map_state(self.state, exit_code, deleted=self.deleted)
        words = [explain_exit(exit_code)] if ended else []
        words.append(self.comment)
        reason = "; ".join(word for word in words if word) or None
        return NativeStatus(native_id or self.job_id, state, self.state, exit_code, reason)


def argv(job_ids: Collection[str] = (), *, subjobs: bool = False) -> list[str]:
    """Full status of the listed jobs; with none, of every job the account may see. With
    `subjobs`, `-t`: an array's subjobs too, after it (`qstat_arrays`)."""
    return ["qstat", "-f", "-F", "json", "-x", *(["-t"] if subjobs else []), *sorted(job_ids)]


def parse(result: CommandResult) -> dict[str, PbsJob]:
    """The jobs of the document, by the id qstat reports; StatusError with qstat's words."""
    complaints = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    unknown = [line for line in complaints if _UNKNOWN_JOB.match(line)]
    if not result.ok and (not unknown or len(unknown) != len(complaints)):
        outage.check(result, "status query")
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    try:
        return parse_document(result.stdout)
    except MalformedDocument as error:
        raise StatusError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            hint=f"unusable qstat JSON: {error}",
        ) from None


def parse_document(text: str) -> dict[str, PbsJob]:
    """Jobs of a `qstat -f -F json` document by id; MalformedDocument when it has another shape."""
    try:
        document = qstat_json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedDocument(f"not JSON ({error})") from None
    if not isinstance(document, dict):
        raise MalformedDocument("the document is not a JSON object")
    jobs = document.get("Jobs", {})
    if not isinstance(jobs, dict):
        raise MalformedDocument("'Jobs' is not an object")
    return {str(job_id): _job(str(job_id), attributes) for job_id, attributes in jobs.items()}


def statuses(jobs: Mapping[str, PbsJob], asked: Collection[str]) -> dict[str, NativeStatus]:
    """The asked ids that the document has, as NativeStatus; the others are left out."""
    return {native_id: jobs[found].status(native_id) for native_id, found in matched(jobs, asked)}


def matched(jobs: Mapping[str, PbsJob], asked: Collection[str]) -> list[tuple[str, str]]:
    """(asked id, reported id) for each asked id the document has.

    An id is matched exactly, or else by its sequence number (the part before the first '.')
    when exactly one reported job has it: `123` and `123.pbs01.example.org` are one job.
    """
    by_sequence: dict[str, list[str]] = {}
    for job_id in jobs:
        by_sequence.setdefault(_sequence(job_id), []).append(job_id)
    found: list[tuple[str, str]] = []
    for native_id in asked:
        if native_id in jobs:
            found.append((native_id, native_id))
            continue
        candidates = by_sequence.get(_sequence(native_id), [])
        if len(candidates) == 1 and _same_server(native_id, candidates[0]):
            found.append((native_id, candidates[0]))
    return found


def find_tag(jobs: Mapping[str, PbsJob], tag: str) -> str | None:
    """The id of the job whose Variable_List carries the gateway's tag (the newest if several)."""
    matches = [job_id for job_id, job in jobs.items() if job.variables.get(TAG_VARIABLE) == tag]
    if not matches:
        return None
    return max(matches, key=lambda job_id: (_number(_sequence(job_id)), job_id))


def _job(job_id: str, attributes: Any) -> PbsJob:
    if not isinstance(attributes, dict):
        raise MalformedDocument(f"job {job_id}: its attributes are not an object")
    state = attributes.get("job_state")
    if not isinstance(state, str) or not state.strip():
        raise MalformedDocument(f"job {job_id}: 'job_state' is missing or not a string")
    return PbsJob(
        job_id=job_id,
        state=state.strip(),
        substate=_integer(job_id, attributes, "substate"),
        exit_status=_integer(job_id, attributes, "Exit_status"),
        comment=_text(attributes.get("comment")),
        queue=_text(attributes.get("queue")),
        name=_text(attributes.get("Job_Name")),
        variables=_variables(attributes.get("Variable_List")),
        submitted=_time(attributes.get("ctime")),
        started=_time(attributes.get("stime")),
        modified=_time(attributes.get("mtime")),
        ended=_time(attributes.get("obittime")),
        exec_host=_text(attributes.get("exec_host")),
        array_index=_integer(job_id, attributes, "array_index"),
        array_indices_remaining=_subjob_ranges(job_id, attributes.get("array_indices_remaining")),
        max_run_subjobs=_integer(job_id, attributes, "max_run_subjobs"),
    )


def _integer(job_id: str, attributes: dict[str, Any], name: str) -> int | None:
    value = attributes.get(name)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    raise MalformedDocument(f"job {job_id}: {name!r} is not an integer: {value!r}")


def subjob_ranges(text: str) -> tuple[tuple[int, int, int], ...]:
    """`0-9:2,11,13-15`, the server's grammar of subjob indices (src/lib/Libutil/range.c),
    as runs `(first, last, step)`; `-` (none) and nothing are none. ValueError for another
    form."""
    if text.strip() in ("", NO_SUBJOBS):
        return ()
    runs = []
    for part in text.replace(" ", "").split(","):
        found = _SUBJOB_RANGE.match(part)
        if found is None or (found[2] and int(found[2]) < int(found[1])) or found[3] == "0":
            raise ValueError(f"not a range of subjob indices: {part!r} in {text!r}")
        first, last, step = int(found[1]), int(found[2] or found[1]), int(found[3] or 1)
        runs.append((first, first + (last - first) // step * step, step))
    return tuple(sorted(runs))


def _subjob_ranges(job_id: str, value: Any) -> tuple[tuple[int, int, int], ...]:
    if value is None:
        return ()
    try:
        return subjob_ranges(str(value))
    except ValueError as error:
        raise MalformedDocument(f"job {job_id}: 'array_indices_remaining': {error}") from None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return str(value)


def _variables(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(key): str(item) for key, item in value.items() if item is not None}


def _time(value: Any) -> datetime | None:
    """ctime(3) text (server local time, naive) or epoch seconds (UTC); None if neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            return datetime.strptime(value.strip(), _CTIME)
        except ValueError:
            return None
    return None


def _sequence(job_id: str) -> str:
    return job_id.split(".", 1)[0]


def _same_server(asked: str, reported: str) -> bool:
    """`123` matches any server; `123.pbs01` matches `123.pbs01.example.org` and back."""
    asked_server = asked.partition(".")[2]
    reported_server = reported.partition(".")[2]
    if not asked_server or not reported_server:
        return True
    return reported_server.startswith(asked_server + ".") or asked_server.startswith(
        reported_server + "."
    )


def _number(sequence: str) -> int:
    digits = re.match(r"\d+", sequence)
    return int(digits.group()) if digits else -1
