"""The filesystem operations that change files, and `file` and `checksum`: the caller's
writer (`iri_gateway.service.files.writes`) and its refusals as HTTP problems.

Statuses: 404 for a path outside what the caller may use or missing (the same answer, as
for reads); 422 for a path that cannot name a file (NUL, control characters, too long) or a
missing required `path`; 403 for a root or job folder itself as what `rm`, `mv` or `cp`
removes or replaces, a tree holding the gateway's own files or folders at any depth (or, for
`chmod`, `chown`, `rm` and `mv`, a folder holding them), a link that would point outside, a
`chown` to another account or a group it is not in, or what the operating system refuses
the account (its reason given); 422 for a setuid, setgid or sticky `mode` the profile does
not allow; 409 for an existing target, a non-empty folder, a move across filesystems, or a
folder moved while it was walked; 413 for a `cp`, `compress` or
`extract` beyond the limits; 400 for an archive that is not one or has a member that would
not stay inside (named).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from typing import Any, TypeVar

from iri_gateway.api.filesystem.read_operations import _file as listed_file
from iri_gateway.api.plumbing.problems import ApiProblem, FileOperation, file_problem
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.files.reads import FileReader, UserFiles
from iri_gateway.service.files.refusals import FileRefusedError, Refusal
from iri_gateway.service.files.remote.archiver import MODES
from iri_gateway.service.files.writes import (
    FileWriter,
    Prepared,
    UserWrites,
)
from iri_gateway.service.jobs.engine import Engine

T = TypeVar("T")


def user_writes(engine: Engine, principal: Principal, resource_id: str) -> UserWrites:
    """What the caller may change on the resource (the same scope as reads)."""
    files = engine.files(owner=principal.user, resource_id=resource_id, claims=principal.claims)
    return UserWrites(files.scope, FileWriter(files.reader.agents))


def required(value: str | None, field: str = "path") -> str:
    """`value`, or the 422 naming `field` when the official schema let it be null."""
    if value is None:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"{field} is required",
            [{"name": field, "reason": "is required"}],
        )
    return value


def octal_mode(mode: str) -> str:
    """`mode` when it is 1 to 4 octal digits; the 422 naming `mode` otherwise."""
    if not re.fullmatch(r"[0-7]{1,4}", mode):
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"mode {mode[:20]!r} is not an octal mode",
            [{"name": "mode", "reason": "must be 1 to 4 octal digits, such as 755"}],
        )
    return mode


def compression_type(urn: str) -> str:
    """The type a compression URN names, when the writer offers it; the 422 naming
    `compression` otherwise."""
    kind = urn.removeprefix("urn:doe-iri:compression:")
    if kind not in MODES:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"compression {urn[:100]!r} is not offered",
            [
                {
                    "name": "compression",
                    "reason": "must be one of "
                    + ", ".join(f"urn:doe-iri:compression:{m}" for m in MODES),
                }
            ],
        )
    return kind


def match_pattern(pattern: str | None) -> str | None:
    """`pattern` when it is a regular expression; the 422 naming `match_pattern` otherwise."""
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ApiProblem(
                422,
                "Unprocessable Entity",
                "match_pattern is not a regular expression",
                [{"name": "match_pattern", "reason": f"is not a regular expression: {error}"}],
            ) from None
    return pattern


def account_name(name: str, field: str) -> str:
    """`name` when it can name a user or group; the 422 naming `field` otherwise."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or ":" in name or "/" in name:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"{field} is not a valid name",
            [{"name": field, "reason": "must not contain control characters, ':' or '/'"}],
        )
    return name


def refusing(resource_id: str, asked: dict[str, str], run: Callable[[], T]) -> T:
    """`run()`, its FileRefusedError as the HTTP problem. `asked` maps each request field
    to the path the caller gave (for the messages)."""
    try:
        return run()
    except FileRefusedError as error:
        raise _problem(resource_id, asked, error) from None


def change(resource_id: str, asked: dict[str, str], run: Any) -> dict[str, Any]:
    """`run()`'s result (a file the writer describes as the official `File`, as `ls` shows
    it, its absolute path as `name`); its FileRefusedError as the HTTP problem."""
    result: dict[str, Any] = refusing(resource_id, asked, run)
    found = result.get("output")
    if isinstance(found, dict) and "kind" in found:
        return {"output": listed_file(found, numeric=False).model_dump()}
    return result


def ready_to_run(resource_id: str, asked: dict[str, str], prepared: Prepared) -> None:
    """What a long change needs, looked at before it is queued so that the common refusals
    are immediate: `path` exists (404 otherwise), `target_path` does not (409), except that
    `extract` may unpack into an existing folder. The work checks again as it runs (a race
    is its task's failure)."""
    writer = prepared.writes.writer
    files = UserFiles(prepared.writes.scope, FileReader(writer.agents))

    def found(field: str, follow: bool = False) -> dict[str, Any] | None:
        try:
            return files.request(asked[field], "stat", dereference=follow)
        except FileRefusedError as error:
            if error.kind is Refusal.NOT_FOUND:
                return None
            raise

    if found("path") is None:
        raise _problem(resource_id, asked, FileRefusedError(Refusal.NOT_FOUND, "", "path"))
    into = prepared.operation == "extract"  # a folder (a link inside to one too) may exist
    target = found("target_path", follow=into)
    if target is None or (into and stat.S_ISDIR(target["mode"])):
        return
    raise _problem(resource_id, asked, FileRefusedError(Refusal.EXISTS, "", "target_path"))


def _problem(resource_id: str, asked: dict[str, str], error: FileRefusedError) -> ApiProblem:
    return file_problem(error, operation=FileOperation.WRITE, resource_id=resource_id, asked=asked)
