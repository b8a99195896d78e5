"""Every error the gateway raises on purpose, in one tree.

    GatewayError                 base; `code` is stable and machine-readable
    ├── ProfileError             a facility profile cannot be read or is invalid (file:line)
    ├── ManifestError            an app manifest of flavours cannot be read or is invalid
    ├── ShippedDataError         the shipped profiles or templates are missing (a broken install)
    ├── UnknownResourceError     a resource id that no loaded profile defines
    ├── InvalidJobSpecError      a document is not a valid JobSpec: every field at fault
    ├── JobRejectedError         a JobSpec cannot run on a resource: all problems at once
    ├── TemplateError            a site template failed to render
    ├── TransportError           a command could not be run (transport/base.py)
    │   ├── NotSentError         surely never started (no connection, session refused)
    │   └── OutcomeUnknownError  sent, but its result never came back
    └── SchedulerError           a scheduler command failed; keeps argv, exit code, stdout, stderr
        ├── SubmitError          the scheduler refused the job (its own words in `stderr`)
        ├── CancelError
        ├── UpdateError
        ├── StatusError
        └── SchedulerUnavailableError  the scheduler is down or busy: a transient outage

The API layer (a later issue) maps these to problem+json in one place; the CLI maps them to
exit codes. Nothing below the API knows about HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def json_path(loc: Iterable[Any]) -> str:
    """A validation location as a JSON path: `container.volume_mounts[0].source`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "":
            text += '[""]'
        else:
            text += f".{part}" if text else str(part)
    return text or "(document)"


class GatewayError(Exception):
    """Base class: every deliberate failure of the gateway."""

    code = "gateway_error"


@dataclass(frozen=True)
class ProfileIssue:
    """One thing wrong in a YAML file (a profile, a manifest), located as a person looks for it."""

    file: str
    line: int | None
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


class ProfileError(GatewayError):
    """A profile file is unreadable, not YAML, or does not validate."""

    code = "invalid_profile"

    def __init__(self, issues: Sequence[ProfileIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


class ManifestError(GatewayError):
    """An app manifest (flavours deployment file) is unreadable or does not validate."""

    code = "invalid_manifest"

    def __init__(self, issues: Sequence[ProfileIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


class ShippedDataError(GatewayError):
    """The profiles or templates shipped with the gateway are not where it looks for them."""

    code = "shipped_data_missing"

    def __init__(self, folder: str, looked_in: Sequence[Path]) -> None:
        self.folder = folder
        self.looked_in = list(looked_in)
        super().__init__(
            f"the shipped {folder}/ folder is missing (looked in "
            f"{', '.join(str(path) for path in self.looked_in)}): reinstall iri-gateway"
        )


class UnknownResourceError(GatewayError):
    """No loaded profile defines the resource asked for."""

    code = "unknown_resource"

    def __init__(self, resource_id: str, known: Sequence[str]) -> None:
        self.resource_id = resource_id
        self.known = list(known)
        super().__init__(
            f"unknown resource {resource_id!r}; known: {', '.join(self.known) or 'none'}"
        )


@dataclass(frozen=True)
class Problem:
    """Why part of a JobSpec cannot run on a resource.

    `field` is the JSON path of the offending JobSpec field (e.g.
    `container.volume_mounts[0].source`), `reason` says what is wrong, and `offered` what the
    resource offers instead, when there is something to offer.
    """

    field: str
    reason: str
    offered: str | None = None

    def __str__(self) -> str:
        text = f"{self.field}: {self.reason}"
        return f"{text} (offered: {self.offered})" if self.offered else text


class JobRejectedError(GatewayError):
    """A JobSpec cannot run on a resource; carries every problem found, not just the first."""

    code = "job_rejected"

    def __init__(self, resource_id: str, problems: Sequence[Problem]) -> None:
        self.resource_id = resource_id
        self.problems = list(problems)
        super().__init__(
            f"the job cannot run on {resource_id!r}:\n"
            + "\n".join(f"  {problem}" for problem in self.problems)
        )


class InvalidJobSpecError(GatewayError):
    """The input is not a JobSpec: bad JSON, or fields that fail the IRI schema."""

    code = "invalid_jobspec"

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(
            "not a valid JobSpec:\n" + "\n".join(f"  {problem}" for problem in self.problems)
        )


class TemplateError(GatewayError):
    """A (site) template failed to render; names the template and the cause."""

    code = "template_error"


class SchedulerError(GatewayError):
    """A scheduler command failed. The scheduler's own words are kept, never paraphrased."""

    code = "scheduler_error"
    action = "scheduler command"

    def __init__(
        self, argv: Sequence[str], exit_code: int, stdout: str, stderr: str, hint: str = ""
    ) -> None:
        self.argv = list(argv)
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        words = stderr.strip() or stdout.strip() or "no output"
        super().__init__(
            f"{self.action} failed: `{' '.join(self.argv)}` exited {exit_code}: {words}"
            + (f" ({hint})" if hint else "")
        )


class SubmitError(SchedulerError):
    """The scheduler refused the submission."""

    code = "submit_failed"
    action = "submission"


class CancelError(SchedulerError):
    """The scheduler refused to cancel the job."""

    code = "cancel_failed"
    action = "cancel"


class UpdateError(SchedulerError):
    """The scheduler refused to change the job."""

    code = "update_failed"
    action = "update"


class RestartError(SchedulerError):
    """The scheduler refused to run the job again (requeue / rerun)."""

    code = "restart_failed"
    action = "restart"


class StatusError(SchedulerError):
    """The scheduler's status query failed."""

    code = "status_failed"
    action = "status query"


class PingError(SchedulerError):
    """The scheduler's health probe (`BatchSystem.ping`) found it not answering, in its words."""

    code = "ping_failed"
    action = "health probe"


class SchedulerUnavailableError(SchedulerError):
    """The scheduler could not be reached or is too busy right now: a transient outage.

    Not the client's fault and not the job's: the same request may well succeed in a moment
    (slurmctld restarts in seconds), so the API answers 503 with `Retry-After` instead of a
    final 4xx, and clients retry. The scheduler adapters decide it from the command's own
    words (Slurm's "Unable to contact slurm controller", PBS's "cannot connect to server").

    `reached` says whether the request may have got to the scheduler before things went
    wrong (a time-out after sending): a submission refused with `reached` False surely
    created no job; one with `reached` True may have, and is reconciled by its tag.
    `retry_after` is the pause, in seconds, suggested to clients.
    """

    code = "scheduler_unavailable"
    retry_after = 5

    def __init__(
        self,
        argv: Sequence[str],
        exit_code: int,
        stdout: str,
        stderr: str,
        *,
        action: str,
        reached: bool = False,
    ) -> None:
        self.action = action
        self.reached = reached
        super().__init__(
            argv,
            exit_code,
            stdout,
            stderr,
            hint="the scheduler is unavailable right now; try again shortly",
        )
