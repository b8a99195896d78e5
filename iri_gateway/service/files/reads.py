"""The gateway's side of reading files: place the path (`policy`), have the file agent read
it where the files are, turn its answer into results or errors.

The reader never runs in the serving process: the file agent (`agents`) runs it in a worker
with limits, on this machine with the gateway's own interpreter (as the gateway's account),
or on the login node with `python3 -I -c` (as the user's mapped account); the request goes as
JSON on stdin, never a value in the command line, so nothing the user wrote reaches a shell.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from iri_gateway.service.files.agents import AgentError, Agents
from iri_gateway.service.files.policy import Anchor, Scope, normal, path_problem
from iri_gateway.service.files.refusals import FileRefusedError, Refusal
from iri_gateway.transport.base import Transport

ReaderUnavailableError = AgentError
"""The login node cannot run the file agent (it needs `python3`), or it failed."""


class FileReader:
    """Runs reader requests in the file agent, as the account that owns the files.

    `idempotent`: whether a request may be sent again after a lost connection (a subclass,
    `writes.FileWriter`, runs changes, which are not).
    """

    idempotent = True

    def __init__(self, agents: Agents) -> None:
        self.agents = agents

    @property
    def transport(self) -> Transport:
        return self.agents.transport

    @property
    def where(self) -> str:
        return self.agents.where

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """The agent's answer (`{"ok": ...}`); TransportError when it could not answer."""
        return self.agents.run(request, idempotent=self.idempotent)


@dataclass(frozen=True)
class UserFiles:
    """The files one user may read on one resource, and how to read them."""

    scope: Scope
    reader: FileReader

    def request(
        self, path: str, operation: str, *, job_folder: str | None = None, **arguments: Any
    ) -> dict[str, Any]:
        """The reader's result for `operation` on `path`; FileRefusedError otherwise.

        `job_folder`: a folder the gateway made for one of the user's jobs (`Scope.locate`).
        """
        if path == "" and job_folder is None:
            return self._default_directory(operation, **arguments)
        problem = path_problem(path)
        if problem is not None:
            raise FileRefusedError(Refusal.INVALID_PATH, problem, "path")
        anchor = self.scope.locate(path, job_folder)
        if anchor is None:
            raise FileRefusedError(Refusal.NOT_FOUND)
        return self._run(anchor, operation, **arguments)

    def _default_directory(self, operation: str, **arguments: Any) -> dict[str, Any]:
        """`operation` on the caller's default directory (an empty path, as the official
        schema allows): the job root, where the folders of the caller's jobs are.

        Its listing holds only the caller's own job folders, never another user's (with
        `recursive`, each of them is listed as a path of its own would be); no job root yet
        is an empty listing. Other operations see the job root itself (`stat`; a
        directory for `head` and `view`).
        """
        root = Anchor(normal(self.scope.work_root), (), (), ())
        if operation != "ls":
            return self._run(root, operation, **arguments)
        try:
            listing = self._run(root, "ls", **{**arguments, "recursive": False})
        except FileRefusedError as error:
            if error.kind != Refusal.NOT_FOUND:
                raise
            return {"entries": [], "truncated": False, "folder": True}
        entries = [e for e in listing["entries"] if self.scope.owns_folder(str(e["name"]))]
        truncated = bool(listing["truncated"])
        if arguments.get("recursive"):
            for folder in [e for e in entries if e["kind"] == "directory"]:
                inner = self._run(
                    Anchor(root.base, (str(folder["name"]),), (), ()), "ls", **arguments
                )
                entries += [
                    {**e, "name": f"{folder['name']}/{e['name']}"} for e in inner["entries"]
                ]
                truncated = truncated or bool(inner["truncated"])
            entries.sort(key=lambda entry: str(entry["name"]))
        limit = int(arguments.get("max_entries", len(entries)))
        return {
            "entries": entries[:limit],
            "truncated": truncated or len(entries) > limit,
            "folder": True,
        }

    def _run(self, anchor: Anchor, operation: str, **arguments: Any) -> dict[str, Any]:
        """The reader's result for `operation` from `anchor`; FileRefusedError otherwise."""
        answer = self.reader.run({"op": operation, **anchor.spec(), **arguments})
        if not answer["ok"]:
            raise FileRefusedError.answered(answer)
        result: dict[str, Any] = answer["result"]
        return result


@dataclass(frozen=True)
class Part:
    """A part of a file, decoded: positions are byte offsets (end exclusive)."""

    text: str
    kind: str
    start: int
    end: int
    size: int
    truncated: bool


def decode_part(result: dict[str, Any]) -> Part:
    """A reader part as text: UTF-8, leniently (a range may start or end inside a character;
    bytes that are not UTF-8 become U+FFFD); positions count the bytes shown."""
    raw = base64.b64decode(result["data"])
    start = 0
    while start < min(3, len(raw)) and 0x80 <= raw[start] <= 0xBF:
        start += 1
    end = len(raw)
    for back in range(1, min(4, end - start) + 1):
        byte = raw[end - back]
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if back < need:
                end -= back
            break
        if byte < 0x80:
            break
    first = int(result["start"]) + start
    return Part(
        raw[start:end].decode("utf-8", "replace"),
        str(result["kind"]),
        first,
        first + (end - start),
        int(result["size"]),
        bool(result["truncated"]),
    )
