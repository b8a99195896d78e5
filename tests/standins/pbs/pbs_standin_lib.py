"""Shared code of the PBS STAND-INs in this folder (see README.md); not a program itself.

Stand-ins for what the real OpenPBS (scripts/pbs) cannot show here: `qsub`, `qstat`, `qdel`,
`qalter` and `qmove` here are small Python programs that keep a job table in
`$PBS_STANDIN_DIR/jobs.json`, append every command line they receive to
`$PBS_STANDIN_DIR/calls.jsonl`, and answer in the forms the
real commands use (messages, exit codes, the `qstat -f -F json` document). Nothing is run.

Exit codes are PBS error numbers modulo 256, as the real commands exit with them:
PBSE_UNKJOBID 15001 -> 153, PBSE_MODATRRUN 15015 -> 167, PBSE_BADSTATE 15016 -> 168,
PBSE_UNKQUE 15018 -> 170, PBSE_HISTJOBID 15139 -> 35; usage errors exit 2.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import getpass
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

DIR_VARIABLE = "PBS_STANDIN_DIR"
SERVER = "standin-server"
EXEC_HOST = "standin-node1"
PBS_VERSION = "23.06.06"
DEFAULT_QUEUES = ("workq", "prod", "debug", "preemptable")
DEFAULT_QUEUE = "workq"

EXIT_USAGE = 2
EXIT_UNKJOBID = 153
EXIT_MODATRRUN = 167
EXIT_BADSTATE = 168
EXIT_UNKQUE = 170
EXIT_HISTJOBID = 35

SUBSTATE = {"Q": 10, "H": 20, "W": 30, "R": 42, "S": 43, "E": 50, "B": 70, "T": 0}
SUBSTATE_TERMINATED, SUBSTATE_FINISHED, SUBSTATE_FAILED = 91, 92, 93

MSG_UNKJOBID = "Unknown Job Id"
MSG_HISTJOBID = "Job has finished"
MSG_BADSTATE = "Request invalid for state of job"
MSG_MODATRRUN = "Cannot modify attribute while job running "
MSG_UNKQUE = "Unknown queue"


def state_dir(program: str) -> Path:
    """The folder holding the job table; refuse to run, loudly, without one."""
    path = os.environ.get(DIR_VARIABLE)
    if not path:
        sys.stderr.write(
            f"STAND-IN {program}: {DIR_VARIABLE} is not set. This is not PBS: it is a test "
            "stand-in (the real OpenPBS runs under scripts/pbs) and keeps its jobs there.\n"
        )
        sys.exit(97)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def record(program: str, argv: Sequence[str]) -> dict[str, Any]:
    """Append {"program", "argv", ...details} as one JSON line to calls.jsonl when the program
    exits, however it exits; the returned mapping takes details to add (e.g. the script)."""
    folder = state_dir(program)
    entry: dict[str, Any] = {"program": program, "argv": [program, *argv]}

    def write() -> None:
        line = (json.dumps(entry) + "\n").encode()
        descriptor = os.open(folder / "calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)

    atexit.register(write)
    return entry


@contextlib.contextmanager
def job_table(program: str, *, save: bool = True) -> Iterator[dict[str, Any]]:
    """The job table, locked against other stand-ins, saved when the block ends normally."""
    folder = state_dir(program)
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / "jobs.json"
        table: dict[str, Any] = (
            json.loads(path.read_text()) if path.exists() else {"next": 1, "jobs": {}}
        )
        yield table
        if not save:
            return
        temporary = folder / "jobs.json.tmp"
        temporary.write_text(json.dumps(table, indent=1))
        temporary.replace(path)


def queues(program: str) -> tuple[list[str], str]:
    """Known queues and the default one; `$PBS_STANDIN_DIR/queues.json` may replace them."""
    path = state_dir(program) / "queues.json"
    if path.exists():
        config = json.loads(path.read_text())
        return list(config["queues"]), str(config.get("default", config["queues"][0]))
    return list(DEFAULT_QUEUES), DEFAULT_QUEUE


def resolve(table: dict[str, Any], operand: str) -> str | None:
    """A job id as the server knows it: `12` and `12.standin-server` name the same job."""
    jobs = table["jobs"]
    for candidate in (operand, f"{operand}.{SERVER}"):
        if candidate in jobs:
            return candidate
    return None


def is_job_id(operand: str) -> bool:
    """pbs_isjobid: an operand that starts with a digit is a job id, otherwise a destination."""
    return bool(operand) and operand[0].isdigit()


def fail(program: str, message: str, code: int) -> NoReturn:
    sys.stderr.write(f"{program}: {message}\n")
    sys.exit(code)


def getopt(
    program: str, args: Sequence[str], with_value: str, flags: str, usage: str
) -> tuple[list[tuple[str, str]], list[str]]:
    """GNU getopt(3) as the PBS commands use it: options may follow operands; `--` ends them."""
    options: list[tuple[str, str]] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            operands += args[index:]
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            continue
        position = 1
        while position < len(word):
            letter = word[position]
            position += 1
            if letter in with_value:
                if position < len(word):
                    value = word[position:]
                elif index < len(args):
                    value = args[index]
                    index += 1
                else:
                    sys.stderr.write(f"{program}: option requires an argument -- '{letter}'\n")
                    usage_exit(usage)
                options.append((letter, value))
                break
            if letter in flags:
                options.append((letter, ""))
                continue
            sys.stderr.write(f"{program}: invalid option -- '{letter}'\n")
            usage_exit(usage)
    return options, operands


def usage_exit(usage: str) -> NoReturn:
    sys.stderr.write(usage)
    sys.exit(EXIT_USAGE)


def comma_list(text: str) -> list[str]:
    """qsub's comma_token: commas inside quotes, or after '\\', do not split."""
    items: list[str] = []
    current = ""
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            current += text[index + 1]
            index += 2
            continue
        if char in "'\"":
            if quote == char:
                quote = ""
            elif not quote:
                quote = char
            else:
                current += char
        elif char == "," and not quote:
            items.append(current)
            current = ""
        else:
            current += char
        index += 1
    if quote:
        raise ValueError("unterminated quote")
    items.append(current)
    return [item for item in items if item]


_WALLTIME = re.compile(r"^(?:(?:\d+:)?\d+:)?\d+(?:\.\d+)?$")


def resources(text: str) -> list[tuple[str, str]]:
    """A -l resource list `name=value[,name=value...]`; ValueError when it cannot be one."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        name, equals, value = item.partition("=")
        if not equals or not name or not value:
            raise ValueError(item)
        if name in ("walltime", "cput"):
            if not _WALLTIME.match(value):
                raise ValueError(item)
            value = hms(seconds(value))
        pairs.append((name, value))
    return pairs


def seconds(text: str) -> int:
    total = 0
    for part in text.split(":"):
        total = total * 60 + int(float(part))
    return total


def hms(total: int) -> str:
    """The server's form of a duration: HH:MM:SS."""
    minutes, second = divmod(total, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours:02d}:{minute:02d}:{second:02d}"


def chunk_totals(select: str) -> dict[str, int]:
    """Totals the server derives from `select=N:ncpus=C:...+...` (ncpus, nodect, mpiprocs...)."""
    totals = {"ncpus": 0, "nodect": 0}
    for chunk in select.split("+"):
        parts = chunk.split(":")
        count = int(parts[0]) if parts[0].isdigit() else 1
        specs = dict(part.partition("=")[::2] for part in parts if "=" in part)
        totals["nodect"] += count
        totals["ncpus"] += count * int(specs.get("ncpus", "1"))
        for name in ("mpiprocs", "ngpus"):
            if specs.get(name, "").isdigit():
                totals[name] = totals.get(name, 0) + count * int(specs[name])
    return totals


def owner() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def run_comment(epoch: float, job: dict[str, Any]) -> str:
    """The scheduler's comment on a job it started: `Job run at Tue Oct 04 at 21:23 on (...)`."""
    return (
        f"Job run at {time.strftime('%a %b %d at %H:%M', time.localtime(epoch))} on "
        f"{job['exec_vnode']}"
    )


def json_value(value: Any) -> Any:
    """qstat -F json prints every value that reads as a number as a JSON number."""
    if isinstance(value, str):
        if re.fullmatch(r"-?\d+", value):
            return int(value)
        if re.fullmatch(r"-?\d+\.\d+", value):
            return float(value)
    return value


_TIMES = ("ctime", "qtime", "mtime", "etime", "stime", "obittime")
_ORDER = (
    "Job_Name",
    "Job_Owner",
    "resources_used",
    "job_state",
    "queue",
    "server",
    "Account_Name",
    "Checkpoint",
    "ctime",
    "Error_Path",
    "exec_host",
    "exec_vnode",
    "Hold_Types",
    "Join_Path",
    "Keep_Files",
    "Mail_Points",
    "Mail_Users",
    "mtime",
    "Output_Path",
    "Priority",
    "qtime",
    "Rerunable",
    "Resource_List",
    "stime",
    "session_id",
    "Shell_Path_List",
    "jobdir",
    "substate",
    "Variable_List",
    "comment",
    "etime",
    "run_count",
    "eligible_time",
    "Exit_status",
    "Submit_arguments",
    "history_timestamp",
    "project",
    "Submit_Host",
)


def qstat_attributes(job: dict[str, Any]) -> dict[str, Any]:
    """One job as `qstat -f -F json` prints it: real attribute names, order and value forms."""
    shown: dict[str, Any] = {}
    for name in (*_ORDER, *sorted(set(job) - set(_ORDER))):
        if name not in job or name.startswith("_") or job[name] is None:
            continue
        value = job[name]
        if name in _TIMES:
            value = time.ctime(value)
        elif isinstance(value, dict):
            keys = value if name == "Variable_List" else sorted(value)
            value = {key: json_value(value[key]) for key in keys}
        else:
            value = json_value(value)
        shown[name] = value
    return shown
