"""The members of a cluster job, as its batch script records them while it runs.

At start the script makes the folder `<job directory>/.iri-cluster-<native id>` (the native
id is the one the scheduler gave at submission: the Slurm job id, which in a het job's
script is `$SLURM_JOB_ID`; the PBS id; the local scheduler's `$IRI_LOCAL_JOB_ID`) and
writes there:

- `members`: a line per member, `name<TAB>role<TAB>index<TAB>node<TAB>address`
  (`worker3	worker	3	n4	127.0.0.4`), before any member starts;
- `exits`: `name<TAB>exit code`, appended as each member ends, in the order they end; a
  member the script stopped because the cluster ended (its `cluster_lifecycle`) has a third
  field, `stopped`.

Both files are read with one command, `tail -n +1 -- members exits`, which heads each file's
text with `==> path <==` and names a missing file on stderr; a file not there yet means
"not known yet", never an error. The files are written by the job, so their lines are data
from the user: a line that does not parse is skipped (and logged), never fatal.

A member's state: `completed` or `failed` from its exit line (exit code 0 or not); without
one, or with a `stopped` one, `active` while the job has not ended, and when it has, the
job's own ending: `canceled` for a canceled job, `failed` for a failed one, `completed` for a
completed one (a service member stopped when the job's primary finished ends as the job did,
and its exit code, the signal's, is never the job's failure). `exit_code` is
None for a member that recorded none.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import Any

from iri_gateway.models.job import JobState
from iri_gateway.transport.base import CommandResult

log = logging.getLogger(__name__)

MEMBERS_FILE = "members"
EXITS_FILE = "exits"


@dataclass(frozen=True)
class Member:
    """One line of `members`."""

    name: str
    role: str
    index: int
    node: str
    address: str


@dataclass(frozen=True)
class Exit:
    """One line of `exits`."""

    name: str
    code: int
    stopped: bool = False


@dataclass(frozen=True)
class ClusterFiles:
    """What the two files said; None for a file that is not there (yet)."""

    members: list[Member] | None
    exits: list[Exit] | None


def folder(directory: str, native_id: str) -> str:
    """The cluster folder of job `native_id` whose job directory is `directory`."""
    return posixpath.join(directory, f".iri-cluster-{native_id}")


def read_argv(cluster_folder: str) -> list[str]:
    """One command printing both files, each after a `==> path <==` line."""
    return [
        "tail",
        "-n",
        "+1",
        "--",
        posixpath.join(cluster_folder, MEMBERS_FILE),
        posixpath.join(cluster_folder, EXITS_FILE),
    ]


def parse_read(result: CommandResult, cluster_folder: str) -> ClusterFiles:
    """The files from `read_argv`'s output; a missing one is None, so is an unreadable one."""
    members_path = posixpath.join(cluster_folder, MEMBERS_FILE)
    exits_path = posixpath.join(cluster_folder, EXITS_FILE)
    texts = _split_files(result.stdout, (members_path, exits_path))
    if not result.ok:
        trouble = [
            line
            for line in result.stderr.splitlines()
            if line.strip() and "No such file or directory" not in line
        ]
        if trouble:
            log.warning("cluster files in %s: %s", cluster_folder, "; ".join(trouble))
    members = texts.get(members_path)
    exits = texts.get(exits_path)
    return ClusterFiles(
        parse_members(members, members_path) if members is not None else None,
        parse_exits(exits, exits_path) if exits is not None else None,
    )


def _split_files(stdout: str, paths: tuple[str, ...]) -> dict[str, str]:
    """The text after each `==> path <==` header (tail's blank separator lines dropped)."""
    headers = {f"==> {path} <==": path for path in paths}
    texts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        path = headers.get(line)
        if path is not None and path not in texts:
            current = texts[path] = []
        elif current is not None:
            current.append(line)
    return {path: "\n".join(lines) for path, lines in texts.items()}


def parse_members(text: str, source: str = MEMBERS_FILE) -> list[Member]:
    """Members in file order; malformed lines and repeated names are skipped and logged."""
    members: list[Member] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        reason = None
        if len(fields) != 5:
            reason = f"{len(fields)} tab-separated fields, not 5"
        elif not all(field.strip() for field in fields):
            reason = "an empty field"
        elif not fields[2].strip().isdigit():
            reason = f"index {fields[2]!r} is not a number"
        elif fields[0].strip() in seen:
            reason = f"member {fields[0].strip()!r} listed again"
        if reason is not None:
            log.warning("%s line %d skipped (%s): %r", source, number, reason, line)
            continue
        name, role, index, node, address = (field.strip() for field in fields)
        seen.add(name)
        members.append(Member(name, role, int(index), node, address))
    return members


def parse_exits(text: str, source: str = EXITS_FILE) -> list[Exit]:
    """Exits in the order the members ended; malformed lines are skipped and logged."""
    exits: list[Exit] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        stopped = len(fields) == 3 and fields[2].strip() == "stopped"
        if stopped:
            fields = fields[:2]
        code = _integer(fields[1]) if len(fields) == 2 else None
        reason = None
        if len(fields) != 2 or not fields[0].strip():
            reason = "not `name<TAB>exit code[<TAB>stopped]`"
        elif code is None:
            reason = f"exit code {fields[1]!r} is not a number"
        if reason is not None or code is None:
            log.warning("%s line %d skipped (%s): %r", source, number, reason, line)
            continue
        exits.append(Exit(fields[0].strip(), code, stopped))
    return exits


def _integer(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class Outcome:
    """The members as the store keeps them, and the one that failed first (if any)."""

    views: list[dict[str, Any]]
    first_failure: tuple[Member, int] | None


def outcome(
    members: list[Member],
    exits: list[Exit],
    job_state: JobState,
    ports_of: dict[str, dict[str, int]] | None = None,
) -> Outcome:
    """Each member's state (see the module doc) and the first non-zero exit, in end order;
    `ports_of` (member -> port name -> port) adds each member's `endpoints`
    (`{"http": "127.0.0.4:8081"}`: its node's address and its port)."""
    known = {member.name: member for member in members}
    stopped: set[str] = set()
    codes: dict[str, int] = {}
    failure: tuple[Member, int] | None = None
    for line in exits:
        if line.name not in known:
            log.warning("exit of unknown member %r ignored", line.name)
        elif line.name in codes:
            log.warning("second exit of member %r ignored", line.name)
        else:
            codes[line.name] = line.code
            if line.stopped:
                stopped.add(line.name)
            elif line.code != 0 and failure is None:
                failure = (known[line.name], line.code)
    views: list[dict[str, Any]] = []
    for member in members:
        code = codes.get(member.name)
        if code is not None and member.name not in stopped:
            state = JobState.COMPLETED if code == 0 else JobState.FAILED
        elif job_state.final:
            state = job_state
        else:
            state = JobState.ACTIVE
        view: dict[str, Any] = {
            "name": member.name,
            "role": member.role,
            "index": member.index,
            "node": member.node,
            "address": member.address,
            "state": state.value,
            "exit_code": code,
        }
        if member.name in stopped:
            view["stopped"] = True
        ports = (ports_of or {}).get(member.name)
        if ports:
            view["endpoints"] = {name: f"{member.address}:{port}" for name, port in ports.items()}
        views.append(view)
    return Outcome(views, failure)


def failure_message(member: Member, code: int, scheduler_words: str) -> str:
    """`member worker2 (role worker, on n3) exited with 1; FAILED, exit code 1`."""
    text = f"member {member.name} (role {member.role}, on {member.node}) exited with {code}"
    return f"{text}; {scheduler_words}" if scheduler_words else text
