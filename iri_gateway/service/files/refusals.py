"""The one refusal type of file work: reads, writes and transfers refuse with `FileRefusedError`,
its `kind` one `Refusal`.

Why one: the programs where the files are (`remote`) answer a refusal as a word
(`{"ok": false, "error": KIND, "detail", "field"}`, standard library only, so no enum travels
there); the gateway's side turns that word into a `Refusal` here, once, and the API maps each
kind to its HTTP problem in one table (`api/plumbing/problems.py`). A word the gateway does
not know is its own agent's bug, never a guess: `unknown_refusal` says so.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from iri_gateway.errors import GatewayError


class Refusal(StrEnum):
    """Why a file operation was refused: the words the remote programs answer."""

    NOT_FOUND = "not_found"
    """Missing, outside what the user may use, or through a link that leaves it: one answer."""
    INVALID_PATH = "invalid_path"
    """The path cannot name a file at all (`policy.path_problem`)."""
    DIRECTORY = "directory"
    NOT_REGULAR = "not_regular"
    NOT_DIRECTORY = "not_directory"
    WINDOW = "window"
    """A line count the read limit cannot serve (`field` names the parameter)."""
    LIMIT = "limit"
    """The agent's worker ran out of CPU time, memory or wall time (`detail` says which)."""
    TOO_LARGE = "too_large"
    """More files or bytes than the operation may make (`cp`, archives)."""
    EXISTS = "exists"
    NOT_EMPTY = "not_empty"
    CROSS_DEVICE = "cross_device"
    CHANGED = "changed"
    """A folder was swapped for another while it was being walked."""
    ROOT = "root"
    """A root or a job folder itself, as what would be removed, moved or replaced."""
    RESERVED = "reserved"
    """The gateway's own files, or a tree holding them."""
    LINK_OUTSIDE = "link_outside"
    DENIED = "denied"
    """The operating system refused it to the user's account (EACCES, EPERM, EROFS)."""
    UNKNOWN_NAME = "unknown_name"
    """An owner or group that does not exist there."""
    SPECIAL_MODE = "special_mode"
    NOT_ALLOWED = "not_allowed"
    INVALID = "invalid"
    BAD_MEMBER = "bad_member"
    NOT_ARCHIVE = "not_archive"
    NO_FILE_COMMAND = "no_file_command"
    WRITE_FAILED = "write_failed"
    """An upload could not be written (the disk is full, say); nothing was left behind."""
    FAILED = "failed"
    """Any other error of the operating system."""
    CANCELED = "canceled"
    """The work's task was canceled; what it wrote was removed."""


_OF_A_PATH = {
    Refusal.NOT_FOUND: "it does not exist (yet) or is not where you may read",
    Refusal.DIRECTORY: "it is a directory",
    Refusal.NOT_REGULAR: "it is not a regular file",
}


class UnknownRefusalError(GatewayError):
    """A remote program answered a refusal word this gateway does not know: the program and
    the gateway disagree, which is the gateway's bug (a 500), never a guessed refusal."""

    code = "unknown_refusal"


class FileRefusedError(GatewayError):
    """A file operation the user may not make, or that cannot be made as asked: `kind` says
    why, `detail` in words (may be empty), `field` the request field it concerns (empty:
    the path, as each operation names it)."""

    code = "file_refused"

    def __init__(self, kind: Refusal, detail: str = "", field: str = "") -> None:
        super().__init__(detail or kind.value)
        self.kind, self.detail, self.field = kind, detail, field

    @classmethod
    def answered(cls, answer: dict[str, Any]) -> FileRefusedError:
        """The refusal a remote program answered (`{"ok": false, "error", ...}`)."""
        word = str(answer.get("error"))
        try:
            kind = Refusal(word)
        except ValueError:
            raise UnknownRefusalError(
                f"a file program answered the refusal {word!r}, which this gateway does not "
                f"know ({str(answer.get('detail') or '')[:200]!r}); known: " + ", ".join(Refusal)
            ) from None
        return cls(kind, str(answer.get("detail") or ""), str(answer.get("field") or ""))

    def of_the_path(self) -> str:
        """Why, as words about the path ("it is a directory"); the kind's word where there
        are none (a job's output that cannot be read says this)."""
        return _OF_A_PATH.get(self.kind, self.kind.value)
